// tt::SamplePrefetcher: one thread gathers planned steps into free slots, in step order.
#include "ticktensor/sample_prefetcher.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "process.hpp"
#include "ticktensor/errors.hpp"

namespace tt {

namespace {

enum class SlotState { kFree, kFilling, kWaiting, kOut };

struct SlotBuffers {
  float* features;
  float* labels;
  SlotState state;
};

}  // namespace

struct SamplePrefetcher::State {
  std::mutex mutex;                     // Guards everything below except `thread`.
  std::condition_variable producer_cv;  // A slot was released, a batch taken, or stop.
  std::condition_variable consumer_cv;  // A batch was filled, the thread ended, or stop.
  std::vector<SlotBuffers> slots;
  std::deque<std::size_t> free;  // Free slots, oldest release first.
  std::deque<Batch> filled;      // Filled batches in step order.
  std::exception_ptr error;      // Thrown by a gather, not yet rethrown.
  std::int64_t failed_step = -1;
  bool stop = false;
  bool finished = false;  // The thread has left run().
  double fill_seconds = 0.0;
  std::thread thread;
};

bool SamplePrefetcher::forked() const { return forked_since(owner_pid_); }

SamplePrefetcher::SamplePrefetcher(const ChunkGather& gather, const ChunkGather::SampleIndex& index,
                                   std::int64_t window, const std::int64_t* order,
                                   std::size_t order_size, std::vector<Step> steps,
                                   std::size_t capacity, std::size_t depth, ThreadPool& pool)
    : gather_(gather),
      index_(index),
      window_(window),
      order_(order),
      order_size_(order_size),
      steps_(std::move(steps)),
      capacity_(capacity),
      depth_(depth),
      pool_(pool),
      state_(std::make_unique<State>()),
      owner_pid_(current_pid()) {
  if (window < 1) throw ArgumentError("window: expected >= 1, got " + std::to_string(window));
  if (depth == 0) throw ArgumentError("depth: expected >= 1, got 0");
  for (std::size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    if (step.first < 0 || step.count < 0 || static_cast<std::size_t>(step.count) > capacity) {
      throw ArgumentError("step " + std::to_string(s) + ": expected a position >= 0 and 0 to " +
                          std::to_string(capacity) + " samples, got position " +
                          std::to_string(step.first) + " and " + std::to_string(step.count));
    }
    if (step.count > 0 && order_size == 0) {
      throw ArgumentError("step " + std::to_string(s) + " takes samples of an empty order");
    }
  }
  state_->thread = std::thread([this] { run(); });
}

SamplePrefetcher::~SamplePrefetcher() {
  if (forked()) {
    // The thread exists only in the parent: joining it would wait forever and destroying
    // a joinable std::thread terminates. Leak the state instead.
    static_cast<void>(state_.release());  // Intentional leak.
    return;
  }
  stop();
}

std::size_t SamplePrefetcher::add_slot(float* features, std::size_t feature_elements, float* labels,
                                       std::size_t label_elements) {
  const auto per_sample = static_cast<std::size_t>(window_ * gather_.n_features());
  const auto n_labels = static_cast<std::size_t>(index_.n_labels);
  if (feature_elements != capacity_ * per_sample || label_elements != capacity_ * n_labels) {
    throw ArgumentError("slot: expected " + std::to_string(capacity_ * per_sample) +
                        " feature and " + std::to_string(capacity_ * n_labels) +
                        " label elements, got " + std::to_string(feature_elements) + " and " +
                        std::to_string(label_elements));
  }
  if (forked()) return 0;
  std::size_t slot = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    slot = state_->slots.size();
    state_->slots.push_back({features, labels, SlotState::kFree});
    state_->free.push_back(slot);
  }
  state_->producer_cv.notify_one();
  return slot;
}

void SamplePrefetcher::release(std::size_t slot) {
  if (forked()) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (slot >= state_->slots.size()) {
      throw IndexError("slot " + std::to_string(slot) + " out of range for " +
                       std::to_string(state_->slots.size()) + " slots");
    }
    SlotBuffers& buffers = state_->slots[slot];
    if (buffers.state != SlotState::kOut) {
      throw ArgumentError("slot " + std::to_string(slot) + " is not held by the consumer");
    }
    buffers.state = SlotState::kFree;
    state_->free.push_back(slot);
  }
  state_->producer_cv.notify_one();
}

SamplePrefetcher::Batch SamplePrefetcher::next(double timeout_s) {
  Batch batch;
  if (forked()) return batch;  // No thread fills it here.
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  const auto ready = [&s] { return !s.filled.empty() || s.finished || s.stop; };
  const auto limit = std::chrono::duration<double>(timeout_s < 0 ? 0.0 : timeout_s);
  if (!s.consumer_cv.wait_for(lock, limit, ready)) return batch;
  if (!s.filled.empty()) {
    batch = s.filled.front();
    s.filled.pop_front();
    s.slots[batch.slot].state = SlotState::kOut;
    lock.unlock();
    s.producer_cv.notify_one();
    return batch;
  }
  if (s.error) {
    std::exception_ptr error = std::exchange(s.error, nullptr);
    std::rethrow_exception(error);
  }
  batch.kind = Batch::Kind::kEnd;
  return batch;
}

void SamplePrefetcher::stop() {
  if (forked()) return;  // No thread to stop here.
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stop = true;
    s.filled.clear();
  }
  s.producer_cv.notify_all();
  s.consumer_cv.notify_all();
  if (s.thread.joinable() && s.thread.get_id() != std::this_thread::get_id()) s.thread.join();
}

bool SamplePrefetcher::running() const {
  if (forked()) return false;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return !state_->finished;
}

std::size_t SamplePrefetcher::waiting() const {
  if (forked()) return 0;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->filled.size();
}

std::size_t SamplePrefetcher::slots() const {
  if (forked()) return 0;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->slots.size();
}

double SamplePrefetcher::fill_seconds() const {
  if (forked()) return 0.0;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->fill_seconds;
}

std::int64_t SamplePrefetcher::failed_step() const {
  if (forked()) return -1;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->failed_step;
}

void SamplePrefetcher::fill(std::size_t step, float* features, float* labels,
                            std::vector<std::int64_t>& indices) {
  const Step& plan = steps_[step];
  const auto count = static_cast<std::size_t>(plan.count);
  indices.resize(count);
  auto position = static_cast<std::size_t>(plan.first) % (order_size_ == 0 ? 1 : order_size_);
  for (std::size_t j = 0; j < count; ++j) {
    indices[j] = order_[position];
    if (++position == order_size_) position = 0;
  }
  const auto per_sample = static_cast<std::size_t>(window_ * gather_.n_features());
  const auto n_labels = static_cast<std::size_t>(index_.n_labels);
  gather_.gather_samples(indices.data(), count, index_, window_, features, count * per_sample,
                         labels, count * n_labels, pool_);
}

void SamplePrefetcher::run() {
  State& s = *state_;
  std::vector<std::int64_t> indices;
  for (std::size_t step = 0; step < steps_.size(); ++step) {
    std::size_t slot = 0;
    SlotBuffers buffers{};  // Copied under the lock: add_slot() may grow `slots` meanwhile.
    {
      std::unique_lock<std::mutex> lock(s.mutex);
      s.producer_cv.wait(lock,
                         [&] { return s.stop || (!s.free.empty() && s.filled.size() < depth_); });
      if (s.stop) break;
      slot = s.free.front();
      s.free.pop_front();
      s.slots[slot].state = SlotState::kFilling;
      buffers = s.slots[slot];
    }
    const auto started = std::chrono::steady_clock::now();
    try {
      fill(step, buffers.features, buffers.labels, indices);
    } catch (...) {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.error = std::current_exception();
      s.failed_step = static_cast<std::int64_t>(step);
      s.slots[slot].state = SlotState::kFree;
      s.free.push_front(slot);
      break;
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.fill_seconds += took.count();
      s.slots[slot].state = SlotState::kWaiting;
      s.filled.push_back(
          {Batch::Kind::kBatch, static_cast<std::int64_t>(step), slot, steps_[step].count});
    }
    s.consumer_cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.finished = true;
  }
  s.consumer_cv.notify_all();
}

}  // namespace tt
