// tt::ChunkGather: validate every sample and its chunks, then copy each window piecewise.
#include "ticktensor/chunk_gather.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include "batch_shape.hpp"
#include "ticktensor/errors.hpp"

namespace tt {

ChunkGather::ChunkGather(const std::vector<std::vector<std::int64_t>>& chunk_starts,
                         const std::vector<std::int64_t>& source_rows, std::int64_t n_features)
    : source_rows_(source_rows), n_features_(n_features) {
  if (n_features < 0) {
    throw ArgumentError("n_features: expected >= 0, got " + std::to_string(n_features));
  }
  if (chunk_starts.size() != source_rows.size()) {
    throw ArgumentError("chunk_starts and source_rows: expected one entry per source, got " +
                        std::to_string(chunk_starts.size()) + " and " +
                        std::to_string(source_rows.size()));
  }
  first_chunk_.reserve(source_rows.size() + 1);
  for (std::size_t s = 0; s < source_rows.size(); ++s) {
    const std::string where = "source " + std::to_string(s) + ": ";
    const std::vector<std::int64_t>& starts = chunk_starts[s];
    const std::int64_t rows = source_rows[s];
    if (rows < 0) throw ArgumentError(where + "expected >= 0 rows, got " + std::to_string(rows));
    if (rows > 0 && (starts.empty() || starts.front() != 0)) {
      throw ArgumentError(where + "the first chunk must start at row 0");
    }
    first_chunk_.push_back(chunk_start_.size());
    for (std::size_t k = 0; k < starts.size(); ++k) {
      const std::int64_t end = k + 1 < starts.size() ? starts[k + 1] : rows;
      if (starts[k] >= end) {
        throw ArgumentError(where + "chunk " + std::to_string(k) + " starts at row " +
                            std::to_string(starts[k]) + ", expected below " + std::to_string(end) +
                            " (starts must increase within the rows)");
      }
      chunk_start_.push_back(starts[k]);
      chunk_rows_.push_back(end - starts[k]);
    }
  }
  first_chunk_.push_back(chunk_start_.size());
  data_ = std::make_unique<std::atomic<const float*>[]>(chunk_start_.size());
  for (std::size_t c = 0; c < chunk_start_.size(); ++c) data_[c].store(nullptr);
}

std::int64_t ChunkGather::source_rows(std::size_t source) const {
  if (source >= n_sources()) {
    throw IndexError("source " + std::to_string(source) + " out of range for " +
                     std::to_string(n_sources()) + " sources");
  }
  return source_rows_[source];
}

std::size_t ChunkGather::first_chunk(std::size_t source) const {
  source_rows(source);  // Checks the index.
  return first_chunk_[source];
}

void ChunkGather::check_chunk(std::size_t chunk) const {
  if (chunk >= n_chunks()) {
    throw IndexError("chunk " + std::to_string(chunk) + " out of range for " +
                     std::to_string(n_chunks()) + " chunks");
  }
}

std::int64_t ChunkGather::chunk_rows(std::size_t chunk) const {
  check_chunk(chunk);
  return chunk_rows_[chunk];
}

void ChunkGather::set(std::size_t chunk, const float* data) {
  check_chunk(chunk);
  std::unique_lock<std::shared_mutex> lock(mutex_);
  data_[chunk].store(data, std::memory_order_release);
}

void ChunkGather::clear(std::size_t chunk) {
  check_chunk(chunk);
  std::unique_lock<std::shared_mutex> lock(mutex_);
  data_[chunk].store(nullptr, std::memory_order_release);
}

bool ChunkGather::loaded(std::size_t chunk) const {
  check_chunk(chunk);
  return data_[chunk].load(std::memory_order_acquire) != nullptr;
}

std::size_t ChunkGather::loaded_count() const {
  std::size_t count = 0;
  for (std::size_t c = 0; c < n_chunks(); ++c) {
    count += data_[c].load(std::memory_order_relaxed) != nullptr;
  }
  return count;
}

std::size_t ChunkGather::chunk_of(std::size_t source, std::int64_t row) const {
  const auto begin = chunk_start_.begin() + static_cast<std::ptrdiff_t>(first_chunk_[source]);
  const auto end = chunk_start_.begin() + static_cast<std::ptrdiff_t>(first_chunk_[source + 1]);
  return static_cast<std::size_t>(std::upper_bound(begin, end, row) - chunk_start_.begin()) - 1;
}

std::vector<ChunkGather::Start> ChunkGather::plan(const std::int64_t* source_ids,
                                                  const std::int64_t* starts, std::size_t batch,
                                                  std::int64_t window) const {
  std::vector<Start> plan(batch);
  const auto n = static_cast<std::int64_t>(n_sources());
  for (std::size_t b = 0; b < batch; ++b) {
    const std::int64_t id = source_ids[b];
    const std::int64_t start = starts[b];
    const std::string where = "batch position " + std::to_string(b) + ": ";
    if (id < 0 || id >= n) {
      throw WindowIndexError(b, id, start, window,
                             where + "source " + std::to_string(id) + " out of range for " +
                                 std::to_string(n) + " sources");
    }
    const auto source = static_cast<std::size_t>(id);
    if (start < 0 || start > source_rows_[source] - window) {
      throw WindowIndexError(b, id, start, window,
                             where + "window of " + std::to_string(window) + " rows at row " +
                                 std::to_string(start) + " does not fit in source " +
                                 std::to_string(id) + " of " +
                                 std::to_string(source_rows_[source]) + " rows");
    }
    const std::size_t first = chunk_of(source, start);
    // Every chunk the window touches must be loaded.
    for (std::size_t c = first; chunk_start_[c] < start + window; ++c) {
      if (data_[c].load(std::memory_order_acquire) == nullptr) {
        throw ChunkNotLoadedError(
            b, c,
            where + "chunk " + std::to_string(c) + " (source " + std::to_string(id) + ", rows " +
                std::to_string(chunk_start_[c]) + " to " +
                std::to_string(chunk_start_[c] + chunk_rows_[c]) + ") is not loaded");
      }
      if (c + 1 == first_chunk_[source + 1]) break;
    }
    plan[b] = {first, start - chunk_start_[first]};
  }
  return plan;
}

void ChunkGather::gather_samples(const std::int64_t* indices, std::size_t batch,
                                 const SampleIndex& index, std::int64_t window, float* out,
                                 std::size_t out_elements, float* labels_out,
                                 std::size_t labels_out_elements, ThreadPool& pool) const {
  const auto n_labels = static_cast<std::size_t>(index.n_labels);
  if (labels_out_elements != batch * n_labels) {
    throw ArgumentError("labels_out: expected " + std::to_string(batch * n_labels) +
                        " elements, got " + std::to_string(labels_out_elements));
  }
  std::vector<std::int64_t> sources(batch);
  std::vector<std::int64_t> starts(batch);
  std::vector<std::int64_t> label_rows(batch);
  for (std::size_t b = 0; b < batch; ++b) {
    const std::int64_t i = indices[b];
    if (i < 0 || static_cast<std::uint64_t>(i) >= index.n_samples) {
      throw WindowIndexError(b, -1, i, window,
                             "batch position " + std::to_string(b) + ": sample " +
                                 std::to_string(i) + " out of range for " +
                                 std::to_string(index.n_samples) + " samples");
    }
    const auto sample = static_cast<std::size_t>(i);
    const std::int32_t source = index.source[sample];
    sources[b] = source;
    starts[b] = index.start[sample];
    const bool known = source >= 0 && static_cast<std::size_t>(source) < n_sources();
    label_rows[b] = known ? index.label_offset[source] + starts[b] + window - 1 : -1;
    if (known && (label_rows[b] < 0 || label_rows[b] >= index.label_rows)) {
      throw WindowIndexError(b, source, starts[b], window,
                             "batch position " + std::to_string(b) + ": label row " +
                                 std::to_string(label_rows[b]) + " out of range for " +
                                 std::to_string(index.label_rows) + " label rows");
    }
  }
  gather(sources.data(), starts.data(), batch, window, out, out_elements, pool);
  for (std::size_t b = 0; b < batch; ++b) {
    std::memcpy(labels_out + b * n_labels, index.labels + label_rows[b] * index.n_labels,
                n_labels * sizeof(float));
  }
}

void ChunkGather::gather(const std::int64_t* source_ids, const std::int64_t* starts,
                         std::size_t batch, std::int64_t window, float* out,
                         std::size_t out_elements, ThreadPool& pool) const {
  const std::size_t window_elements =
      checked_window_elements(batch, window, n_features_, out_elements);
  std::shared_lock<std::shared_mutex> lock(mutex_);
  const std::vector<Start> starts_plan = plan(source_ids, starts, batch, window);
  if (batch == 0 || window_elements == 0) return;

  const auto row_bytes = static_cast<std::size_t>(n_features_) * sizeof(float);
  auto copy_range = [&](std::size_t begin, std::size_t end) {
    for (std::size_t b = begin; b < end; ++b) {
      auto* dst = reinterpret_cast<unsigned char*>(out + b * window_elements);
      std::size_t chunk = starts_plan[b].chunk;
      std::int64_t offset = starts_plan[b].offset;
      std::int64_t left = window;
      while (left > 0) {
        const std::int64_t rows = std::min(left, chunk_rows_[chunk] - offset);
        const float* src = data_[chunk].load(std::memory_order_relaxed) + offset * n_features_;
        const std::size_t bytes = static_cast<std::size_t>(rows) * row_bytes;
        std::memcpy(dst, src, bytes);
        dst += bytes;
        left -= rows;
        ++chunk;
        offset = 0;
      }
    }
  };
  const std::size_t window_bytes = window_elements * sizeof(float);
  copy_windows(batch, window_bytes, kInlineBytes, pool, copy_range);
}

}  // namespace tt
