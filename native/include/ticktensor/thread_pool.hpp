// A fixed pool of worker threads that runs index ranges in parallel (parallel_for).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tt {

// A fixed-size thread pool. `size()` is the parallelism of one parallel_for: the pool starts
// size() - 1 worker threads once, and the calling thread works as the size()-th participant,
// so ThreadPool(1) starts no thread and runs everything inline.
//
// parallel_for may be called from several host threads at once: each call is one job in a
// FIFO; idle workers join the oldest job that still has unclaimed items, and every caller
// works on its own job until all of its items are claimed, so no call can starve.
//
// Fork: a child process inherits the pool but not its threads. There, parallel_for runs
// everything on the calling thread and the destructor leaves the (absent) workers alone,
// so a pool created before fork() neither deadlocks nor crashes the child.
class ThreadPool {
 public:
  // fn(begin, end) processes the items [begin, end).
  using RangeFn = std::function<void(std::size_t begin, std::size_t end)>;

  // Throws ArgumentError when n_threads is 0.
  explicit ThreadPool(std::size_t n_threads);
  ~ThreadPool();  // Joins every worker; must not run while a parallel_for is in flight.

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  std::size_t size() const noexcept { return workers_.size() + 1; }

  // Calls fn on disjoint ranges covering [0, n_items) and returns when all have finished.
  // Ranges hold at least `grain` items (except the last). The first exception thrown by fn
  // stops the handing out of further ranges and is rethrown here after all participants
  // have left the job.
  void parallel_for(std::size_t n_items, const RangeFn& fn, std::size_t grain = 1);

 private:
  struct Job;

  void worker_loop();
  // Takes `job` off the queue if it is still there; the caller holds the pool mutex.
  void retire(Job* job);
  static void run_ranges(Job& job) noexcept;

  // The threads and their locks live on the heap: a forked child leaks them, since
  // destroying a condition variable the parent's (absent) workers waited on never returns.
  struct State {
    std::vector<std::thread> workers;
    std::mutex mutex;                     // Guards queue and stop; Job::active changes under it.
    std::condition_variable work_cv;      // Signals workers: a job was queued, or stop.
    std::condition_variable done_cv;      // Signals callers: a worker left a job.
    std::deque<Job*> queue;               // Jobs that may still have unclaimed items.
    std::atomic<std::size_t> pending{0};  // queue.size(), read by polling workers.
    bool stop = false;
  };
  std::unique_ptr<State> state_;
  std::vector<std::thread>& workers_;
  std::mutex& mutex_;
  std::condition_variable& work_cv_;
  std::condition_variable& done_cv_;
  std::deque<Job*>& queue_;
  bool& stop_;
  long owner_pid_;  // The process whose threads these are.
};

}  // namespace tt
