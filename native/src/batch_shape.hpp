// What every window gather shares: its size checks and how it splits the copy (core-private).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ticktensor/errors.hpp"
#include "ticktensor/thread_pool.hpp"

namespace tt {

// Floats in one window of `window` rows x `n_features`, after checking that window >= 1,
// that batch windows fit the address space and that `out_elements` is exactly that many.
// Throws ArgumentError naming what was expected and what came.
inline std::size_t checked_window_elements(std::size_t batch, std::int64_t window,
                                           std::int64_t n_features, std::size_t out_elements) {
  if (window < 1) {
    throw ArgumentError("window: expected >= 1, got " + std::to_string(window));
  }
  std::size_t window_elements = 0;
  std::size_t expected = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(window),
                             static_cast<std::uint64_t>(n_features), &window_elements) ||
      __builtin_mul_overflow(batch, window_elements, &expected)) {
    throw ArgumentError("window: " + std::to_string(window) + " rows of " +
                        std::to_string(n_features) + " features overflow the address space");
  }
  if (out_elements != expected) {
    throw ArgumentError("out: expected " + std::to_string(expected) + " elements, got " +
                        std::to_string(out_elements));
  }
  return window_elements;
}

// Runs copy(begin, end) over the windows [0, batch): on the calling thread when the batch is
// under inline_bytes (not worth waking workers for) or the pool has one thread, else across
// the pool in ranges of at least ~64 KiB, which keeps the claiming overhead negligible.
template <typename Copy>
void copy_windows(std::size_t batch, std::size_t window_bytes, std::size_t inline_bytes,
                  ThreadPool& pool, const Copy& copy) {
  if (batch * window_bytes < inline_bytes || pool.size() == 1) {
    copy(std::size_t{0}, batch);
    return;
  }
  const std::size_t grain = (64 * 1024 + window_bytes - 1) / window_bytes;
  pool.parallel_for(batch, copy, grain);
}

}  // namespace tt
