// tt::WindowGather: validate every sample, then one memcpy per window across the pool.
#include "ticktensor/window_gather.hpp"

#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "batch_shape.hpp"
#include "ticktensor/errors.hpp"

namespace tt {

namespace {

std::string window_text(std::int64_t start, std::int64_t window) {
  // start + window can pass INT64_MAX for absurd starts; unsigned math keeps the text exact.
  if (start >= 0) {
    const auto end = static_cast<std::uint64_t>(start) + static_cast<std::uint64_t>(window);
    return "[" + std::to_string(start) + ", " + std::to_string(end) + ")";
  }
  return "[" + std::to_string(start) + ", " + std::to_string(start + window) + ")";
}

}  // namespace

WindowGather::WindowGather(std::vector<SourceArray> sources) : sources_(std::move(sources)) {
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    const SourceArray& src = sources_[i];
    if (src.rows < 0 || src.n_features < 0) {
      throw ArgumentError("source " + std::to_string(i) + ": expected a non-negative shape, got [" +
                          std::to_string(src.rows) + ", " + std::to_string(src.n_features) + "]");
    }
    if (i == 0) {
      n_features_ = src.n_features;
    } else if (src.n_features != n_features_) {
      throw ArgumentError("source " + std::to_string(i) + ": expected " +
                          std::to_string(n_features_) + " features like source 0, got " +
                          std::to_string(src.n_features));
    }
  }
}

std::int64_t WindowGather::rows(std::size_t array_id) const {
  if (array_id >= sources_.size()) {
    throw IndexError("array index " + std::to_string(array_id) + " out of range for " +
                     std::to_string(sources_.size()) + " source arrays");
  }
  return sources_[array_id].rows;
}

std::vector<const float*> WindowGather::plan(const std::int64_t* array_ids,
                                             const std::int64_t* starts, std::size_t batch,
                                             std::int64_t window) const {
  // Each index is read exactly once into the plan, so a caller mutating the index arrays
  // meanwhile cannot make the copy pass read outside a source.
  std::vector<const float*> windows(batch);
  const auto n_sources = static_cast<std::int64_t>(sources_.size());
  for (std::size_t b = 0; b < batch; ++b) {
    const std::int64_t id = array_ids[b];
    const std::int64_t start = starts[b];
    const std::string where = "batch position " + std::to_string(b) + ": ";
    if (id < 0 || id >= n_sources) {
      throw WindowIndexError(b, id, start, window,
                             where + "array index " + std::to_string(id) + " out of range for " +
                                 std::to_string(n_sources) + " source arrays");
    }
    const SourceArray& src = sources_[static_cast<std::size_t>(id)];
    if (start < 0) {
      throw WindowIndexError(b, id, start, window,
                             where + "window " + window_text(start, window) +
                                 " starts before row 0 of array " + std::to_string(id));
    }
    if (start > src.rows - window) {
      throw WindowIndexError(b, id, start, window,
                             where + "window " + window_text(start, window) + " exceeds array " +
                                 std::to_string(id) + " of " + std::to_string(src.rows) + " rows");
    }
    windows[b] = src.data + start * n_features_;
  }
  return windows;
}

void WindowGather::check_no_overlap(const float* out, std::size_t out_elements) const {
  // memcpy between overlapping ranges is undefined; comparing addresses as integers is the
  // portable way to test ranges that belong to different allocations.
  const auto out_begin = reinterpret_cast<std::uintptr_t>(out);
  const auto out_end = out_begin + out_elements * sizeof(float);
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    const SourceArray& src = sources_[i];
    if (src.rows == 0 || src.n_features == 0) continue;  // No bytes, nothing to overlap.
    const auto src_begin = reinterpret_cast<std::uintptr_t>(src.data);
    const auto src_end =
        src_begin + static_cast<std::uintptr_t>(src.rows * src.n_features) * sizeof(float);
    if (out_begin < src_end && src_begin < out_end) {
      throw ArgumentError("out must not overlap the sources, but it overlaps source " +
                          std::to_string(i));
    }
  }
}

void WindowGather::gather(const std::int64_t* array_ids, const std::int64_t* starts,
                          std::size_t batch, std::int64_t window, float* out,
                          std::size_t out_elements, ThreadPool& pool) const {
  const std::size_t window_elements =
      checked_window_elements(batch, window, n_features_, out_elements);
  if (batch == 0 || window_elements == 0) {
    // Still check the samples: an empty feature axis does not make a bad index valid.
    plan(array_ids, starts, batch, window);
    return;
  }
  check_no_overlap(out, out_elements);
  const std::vector<const float*> windows = plan(array_ids, starts, batch, window);

  const std::size_t window_bytes = window_elements * sizeof(float);
  auto copy_range = [&](std::size_t begin, std::size_t end) {
    for (std::size_t b = begin; b < end; ++b) {
      std::memcpy(out + b * window_elements, windows[b], window_bytes);
    }
  };
  copy_windows(batch, window_bytes, kInlineBytes, pool, copy_range);
}

}  // namespace tt
