// A thread that gathers planned batches of dataset samples into a ring of caller slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ticktensor/chunk_gather.hpp"
#include "ticktensor/thread_pool.hpp"

namespace tt {

// The loader's hot loop with no interpreter in it: once every chunk a dataset reads is
// loaded, a batch is one ChunkGather::gather_samples call, and this class makes those
// calls back to back on its own thread, ahead of the consumer.
//
// The plan is a sample order and a list of steps: step s is the samples at positions
// first + j (modulo the order's length) for j < count. Steps are gathered in order into
// slots, caller-owned buffers of `capacity` samples: features [capacity, window, F] and
// labels [capacity, L]. A slot is filled only while it is free; the caller adds slots,
// and gives each back with release() once nothing reads the batch in it any more. At most
// `depth` filled batches wait for the consumer.
//
// next() hands out filled batches in step order. An exception thrown while gathering a
// step ends the thread; next() returns the batches before it, then rethrows it.
//
// Fork: a child process inherits the object but not its thread (and maybe a lock that
// thread held). There every call is inert and takes no lock: running() is false, next()
// reports a timeout, waiting() 0, add_slot() and release() do nothing, and the destructor
// leaves the (absent) thread alone.
class SamplePrefetcher {
 public:
  struct Step {
    std::int64_t first;  // Position in the order of the step's first sample.
    std::int64_t count;  // Samples in the step, at most the slots' capacity.
  };

  struct Batch {
    enum class Kind { kBatch, kTimeout, kEnd };
    Kind kind = Kind::kTimeout;
    std::int64_t step = -1;
    std::size_t slot = 0;
    std::int64_t samples = 0;
  };

  // Borrows `gather`, `index`, `order` and `pool`: they must outlive the object. Throws
  // ArgumentError for an empty order with steps, a step longer than `capacity` or with a
  // negative position, window < 1 or depth 0. The thread starts at once and waits for
  // slots.
  SamplePrefetcher(const ChunkGather& gather, const ChunkGather::SampleIndex& index,
                   std::int64_t window, const std::int64_t* order, std::size_t order_size,
                   std::vector<Step> steps, std::size_t capacity, std::size_t depth,
                   ThreadPool& pool);
  ~SamplePrefetcher();  // stop()

  SamplePrefetcher(const SamplePrefetcher&) = delete;
  SamplePrefetcher& operator=(const SamplePrefetcher&) = delete;

  // A free slot: `features` holds capacity * window * F floats, `labels` capacity * L.
  // Returns its number. Throws ArgumentError for buffers of another size.
  std::size_t add_slot(float* features, std::size_t feature_elements, float* labels,
                       std::size_t label_elements);
  // Slot `slot`'s batch is no longer read: it may be filled again. Throws IndexError for a
  // slot that does not exist, ArgumentError for one that is free already.
  void release(std::size_t slot);
  // Waits up to `timeout_s` seconds for the next batch. kTimeout when none came, kEnd after
  // the last step or once stopped; rethrows (once) the exception that ended the thread.
  Batch next(double timeout_s);
  // Stops the thread and joins it; filled batches not taken are dropped. Idempotent.
  void stop();

  bool running() const;
  std::size_t waiting() const;       // Filled batches not taken yet.
  std::size_t slots() const;         // Slots added so far.
  double fill_seconds() const;       // Time the thread spent gathering.
  std::int64_t failed_step() const;  // The step whose gather threw, or -1.
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  struct State;

  bool forked() const;  // Whether this is a child process forked after construction.
  void run();
  void fill(std::size_t step, float* features, float* labels, std::vector<std::int64_t>& indices);

  const ChunkGather& gather_;
  ChunkGather::SampleIndex index_;
  std::int64_t window_;
  const std::int64_t* order_;
  std::size_t order_size_;
  std::vector<Step> steps_;
  std::size_t capacity_;
  std::size_t depth_;
  ThreadPool& pool_;
  std::unique_ptr<State> state_;  // On the heap: a forked child leaks it (see ThreadPool).
  long owner_pid_;
};

}  // namespace tt
