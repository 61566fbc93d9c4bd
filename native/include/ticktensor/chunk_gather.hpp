// Chunk gather: copy row windows out of sources whose rows live in separate chunks.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "ticktensor/thread_pool.hpp"

namespace tt {

// The rows of each source are split into consecutive chunks, each its own allocation (a
// memory-mapped chunk file or a decoded buffer) that may be loaded and dropped while the
// gather lives. Chunks are numbered globally, source by source: chunk `first_chunk(s) + k`
// is the k-th chunk of source s and holds its rows [start, start + rows) as a C-contiguous
// [rows, n_features] float32 block.
//
// Contract of gather(): output[b] = rows [starts[b], starts[b] + window) of source
// source_ids[b], read across as many chunks as the window spans, written into a caller-owned
// C-contiguous [batch, window, n_features] buffer. Every sample is checked (bounds, and that
// each chunk it reads is loaded) before any byte is written; a bad sample throws
// WindowIndexError, a chunk that is not loaded throws ChunkNotLoadedError; the output is then
// untouched. gather() may run from several threads at once; set() and clear() wait until no
// gather is running, so a chunk is never dropped in the middle of a copy.
class ChunkGather {
 public:
  static constexpr std::size_t kInlineBytes = 256 * 1024;

  // chunk_starts[s] lists the first row of each chunk of source s: it starts at 0, strictly
  // increases and stays below source_rows[s] (a source of 0 rows has no chunk). Throws
  // ArgumentError otherwise.
  ChunkGather(const std::vector<std::vector<std::int64_t>>& chunk_starts,
              const std::vector<std::int64_t>& source_rows, std::int64_t n_features);

  std::size_t n_sources() const noexcept { return source_rows_.size(); }
  std::size_t n_chunks() const noexcept { return chunk_start_.size(); }
  std::int64_t n_features() const noexcept { return n_features_; }
  // Throw IndexError for a source or chunk that does not exist.
  std::int64_t source_rows(std::size_t source) const;
  std::size_t first_chunk(std::size_t source) const;
  std::int64_t chunk_rows(std::size_t chunk) const;

  // Publish (or replace) the rows of `chunk`; `data` must stay valid until clear() or the
  // next set() of that chunk returns. Throws IndexError for a missing chunk.
  void set(std::size_t chunk, const float* data);
  // Forget `chunk`'s rows; returns once no running gather can still read them.
  void clear(std::size_t chunk);
  bool loaded(std::size_t chunk) const;
  std::size_t loaded_count() const;

  // A dataset's per-sample index, borrowed: sample i is the window at row start[i] of source
  // source[i], and its labels are row label_offset[source[i]] + start[i] + window - 1 of
  // labels ([label_rows, n_labels]).
  struct SampleIndex {
    const std::int32_t* source;
    const std::int64_t* start;
    std::size_t n_samples;
    const float* labels;
    std::int64_t label_rows;
    std::int64_t n_labels;
    const std::int64_t* label_offset;  // One entry per source.
  };

  // gather() of the samples `indices` of `index`, and their labels into labels_out
  // ([batch, n_labels]), in one call: no per-batch index arrays on the caller's side.
  // Throws IndexError naming the batch position of a sample index out of range.
  void gather_samples(const std::int64_t* indices, std::size_t batch, const SampleIndex& index,
                      std::int64_t window, float* out, std::size_t out_elements, float* labels_out,
                      std::size_t labels_out_elements, ThreadPool& pool) const;

  // Throws ArgumentError when window < 1 or out_elements != batch * window * n_features.
  void gather(const std::int64_t* source_ids, const std::int64_t* starts, std::size_t batch,
              std::int64_t window, float* out, std::size_t out_elements, ThreadPool& pool) const;

 private:
  struct Start {
    std::size_t chunk;    // First chunk the window reads.
    std::int64_t offset;  // Row of the window's first row inside that chunk.
  };
  std::vector<Start> plan(const std::int64_t* source_ids, const std::int64_t* starts,
                          std::size_t batch, std::int64_t window) const;
  std::size_t chunk_of(std::size_t source, std::int64_t row) const;
  void check_chunk(std::size_t chunk) const;

  std::vector<std::int64_t> source_rows_;
  std::vector<std::size_t> first_chunk_;   // Per source, plus one past the last.
  std::vector<std::int64_t> chunk_start_;  // Per chunk: first row inside its source.
  std::vector<std::int64_t> chunk_rows_;   // Per chunk: rows it holds.
  std::unique_ptr<std::atomic<const float*>[]> data_;
  std::int64_t n_features_ = 0;
  mutable std::shared_mutex mutex_;  // Shared by gathers, exclusive for set() and clear().
};

}  // namespace tt
