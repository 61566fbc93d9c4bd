// tt::ThreadPool: fixed workers, a FIFO of jobs, callers participate in their own job.
#include "ticktensor/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "process.hpp"
#include "ticktensor/errors.hpp"

namespace tt {

// One parallel_for call. Lives on the caller's stack: the caller removes it from the queue
// and waits for `active` to drop to zero before returning, so workers never see it dangle.
struct ThreadPool::Job {
  const RangeFn* fn = nullptr;
  std::size_t n_items = 0;
  std::size_t chunk = 1;
  std::atomic<std::size_t> next{0};  // First unclaimed item.
  std::atomic<bool> failed{false};   // Set once fn threw; stops claiming.
  // Workers inside this job: changed under the pool mutex, read by the polling caller.
  std::atomic<std::size_t> active{0};
  std::mutex error_mutex;
  std::exception_ptr error;
};

ThreadPool::ThreadPool(std::size_t n_threads)
    : state_(std::make_unique<State>()),
      workers_(state_->workers),
      mutex_(state_->mutex),
      work_cv_(state_->work_cv),
      done_cv_(state_->done_cv),
      queue_(state_->queue),
      stop_(state_->stop),
      owner_pid_(current_pid()) {
  if (n_threads == 0) {
    throw ArgumentError("ThreadPool: n_threads must be >= 1, got 0");
  }
  workers_.reserve(n_threads - 1);
  try {
    for (std::size_t i = 0; i + 1 < n_threads; ++i) {
      workers_.emplace_back([this] { worker_loop(); });
    }
  } catch (...) {
    // Could not start every thread: stop the ones that did start before failing.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& worker : workers_) worker.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  if (forked_since(owner_pid_)) {
    // The workers exist only in the parent: joining them would wait forever, destroying
    // a joinable std::thread terminates, and destroying the condition variables they
    // waited on blocks. Leak the whole state instead.
    static_cast<void>(state_.release());  // Intentional leak.
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::retire(Job* job) {
  auto it = std::find(queue_.begin(), queue_.end(), job);
  if (it != queue_.end()) {
    queue_.erase(it);
    state_->pending.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::run_ranges(Job& job) noexcept {
  while (!job.failed.load(std::memory_order_relaxed)) {
    const std::size_t begin = job.next.fetch_add(job.chunk, std::memory_order_relaxed);
    if (begin >= job.n_items) return;
    const std::size_t end = std::min(job.n_items, begin + job.chunk);
    try {
      (*job.fn)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
      job.failed.store(true, std::memory_order_relaxed);
    }
  }
}

namespace {

// How long an idle worker, or a caller waiting for its job's last range, keeps polling
// before it sleeps on a condition variable. Loaders call parallel_for back to back (a
// batch every few hundred microseconds), and waking a sleeping thread takes tens of
// microseconds on a VM, about a tenth of a batch; yielding while polling leaves the core
// to any other runnable thread.
constexpr auto kSpin = std::chrono::microseconds(200);

template <typename Ready>
bool poll_for(const Ready& ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  do {
    if (ready()) return true;
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  return ready();
}

}  // namespace

void ThreadPool::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!stop_ && queue_.empty()) {
      lock.unlock();
      poll_for([this] { return state_->pending.load(std::memory_order_acquire) > 0; });
      lock.lock();
    }
    work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left to help with.
    Job* job = queue_.front();
    ++job->active;
    lock.unlock();
    run_ranges(*job);
    lock.lock();
    retire(job);  // Every item of this job is claimed now: idle workers move on.
    if (job->active.fetch_sub(1, std::memory_order_acq_rel) == 1) done_cv_.notify_all();
  }
}

void ThreadPool::parallel_for(std::size_t n_items, const RangeFn& fn, std::size_t grain) {
  if (n_items == 0) return;
  const std::size_t participants = size();
  // About four ranges per participant balances uneven ranges without much claiming traffic.
  const std::size_t target = (n_items + 4 * participants - 1) / (4 * participants);
  const std::size_t chunk = std::max<std::size_t>({grain, target, 1});
  if (workers_.empty() || chunk >= n_items || forked_since(owner_pid_)) {
    fn(0, n_items);
    return;
  }

  Job job;
  job.fn = &fn;
  job.n_items = n_items;
  job.chunk = chunk;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(&job);
    state_->pending.fetch_add(1, std::memory_order_release);
  }
  const std::size_t helpers = std::min(workers_.size(), (n_items + chunk - 1) / chunk - 1);
  if (helpers >= workers_.size()) {
    work_cv_.notify_all();
  } else {
    for (std::size_t i = 0; i < helpers; ++i) work_cv_.notify_one();
  }

  run_ranges(job);

  {
    std::unique_lock<std::mutex> lock(mutex_);
    retire(&job);
    // No worker can join the job now; wait for those in it to finish their ranges.
    if (job.active.load(std::memory_order_acquire) != 0) {
      lock.unlock();
      poll_for([&job] { return job.active.load(std::memory_order_acquire) == 0; });
      lock.lock();
    }
    done_cv_.wait(lock, [&job] { return job.active.load(std::memory_order_acquire) == 0; });
  }
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace tt
