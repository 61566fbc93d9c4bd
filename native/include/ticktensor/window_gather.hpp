// Window gather: copy fixed-length row windows out of 2-D float32 arrays into one batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ticktensor/thread_pool.hpp"

namespace tt {

// A borrowed, C-contiguous [rows, n_features] float32 array. The caller keeps it alive.
struct SourceArray {
  const float* data;
  std::int64_t rows;
  std::int64_t n_features;
};

// Copies windows of `window` consecutive rows out of a fixed set of source arrays.
//
// Contract of gather(): output[b] = sources[array_ids[b]][starts[b] : starts[b] + window],
// written into a caller-owned C-contiguous [batch, window, n_features] float32 buffer that
// must not overlap any source. Every sample is checked before any byte is written; a bad
// sample throws WindowIndexError naming its batch position, and the output is untouched.
// Batches under kInlineBytes are copied on the calling thread; larger ones are split across
// the pool. gather() is const and may run concurrently from several threads.
class WindowGather {
 public:
  // Batches smaller than this are not worth waking workers for.
  static constexpr std::size_t kInlineBytes = 256 * 1024;

  // Throws ArgumentError when the arrays disagree on n_features or a shape is negative.
  explicit WindowGather(std::vector<SourceArray> sources);

  std::size_t n_sources() const noexcept { return sources_.size(); }
  std::int64_t n_features() const noexcept { return n_features_; }
  // Throws IndexError when array_id >= n_sources().
  std::int64_t rows(std::size_t array_id) const;

  // Throws ArgumentError when window < 1, when out_elements != batch * window * n_features
  // or when out overlaps a source; WindowIndexError for the first bad sample.
  void gather(const std::int64_t* array_ids, const std::int64_t* starts, std::size_t batch,
              std::int64_t window, float* out, std::size_t out_elements, ThreadPool& pool) const;

 private:
  // Checks every sample and returns the first source float of each window.
  std::vector<const float*> plan(const std::int64_t* array_ids, const std::int64_t* starts,
                                 std::size_t batch, std::int64_t window) const;
  void check_no_overlap(const float* out, std::size_t out_elements) const;

  std::vector<SourceArray> sources_;
  std::int64_t n_features_ = 0;
};

}  // namespace tt
