// The size checks every window gather makes before touching memory (private to the core).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ticktensor/errors.hpp"

namespace tt {

// Floats in one window of `window` rows x `n_features`, after checking that window >= 1,
// that batch windows fit the address space and that `out_elements` is exactly that many.
// Throws ArgumentError naming what was expected and what came.
inline std::size_t checked_window_elements(std::size_t batch, std::int64_t window,
                                           std::int64_t n_features,
                                           std::size_t out_elements) {
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

}  // namespace tt
