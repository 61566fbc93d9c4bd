// tt::ChunkGather's Python-side owner, shared by the bindings that gather through it.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "ticktensor/chunk_gather.hpp"
#include "ticktensor/errors.hpp"
#include "ticktensor/thread_pool.hpp"

namespace ttpy {

namespace nb = nanobind;

using ChunkArray = nb::ndarray<nb::ro, nb::device::cpu>;
using IndexArray = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using SourceIds = nb::ndarray<const std::int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using LabelArray = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using LabelsOut = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

inline std::vector<std::int64_t> to_vector(const IndexArray& a) {
  return {a.data(), a.data() + a.shape(0)};
}

// Holds a reference to every loaded chunk's array and to the pool. set() and clear() are
// serialized by `mutate_`, taken without the GIL, so a chunk's array is released only after
// the core no longer publishes its pointer.
class PyChunkGather {
 public:
  PyChunkGather(const std::vector<IndexArray>& chunk_starts, const IndexArray& source_rows,
                std::int64_t n_features, tt::ThreadPool& pool)
      : core_(starts_of(chunk_starts), to_vector(source_rows), n_features),
        owners_(core_.n_chunks()),
        pool_(&pool) {}

  tt::ChunkGather& core() { return core_; }
  tt::ThreadPool& pool() const { return *pool_; }

  void set(std::size_t chunk, nb::handle obj) {
    const std::int64_t rows = core_.chunk_rows(chunk);  // Checks the index first.
    const std::string where = "chunk " + std::to_string(chunk) + ": ";
    ChunkArray a;
    if (!nb::try_cast(obj, a, /*convert=*/false)) {
      throw tt::ArgumentError(where + "expected a numpy array, got " + type_of(obj));
    }
    const bool shape_ok = a.ndim() == 2 && static_cast<std::int64_t>(a.shape(0)) >= rows &&
                          static_cast<std::int64_t>(a.shape(1)) == core_.n_features();
    if (!is_float32(a) || !shape_ok || !is_c_contiguous(a)) {
      throw tt::ArgumentError(where + "expected a C-contiguous float32 array of at least " +
                              std::to_string(rows) + " rows and " +
                              std::to_string(core_.n_features()) + " columns, got " +
                              dtype_text(a.dtype()) + " of shape " + shape_text(a) +
                              (is_c_contiguous(a) ? "" : ", not C-contiguous"));
    }
    nb::object keep = nb::borrow(obj);
    const auto* data = static_cast<const float*>(a.data());
    std::unique_lock<std::mutex> lock = acquire();
    {
      nb::gil_scoped_release release;
      core_.set(chunk, data);
    }
    std::swap(owners_[chunk], keep);  // The previous array (if any) is released with `keep`.
  }

  void clear(std::size_t chunk) {
    core_.chunk_rows(chunk);  // Checks the index.
    nb::object dropped;
    std::unique_lock<std::mutex> lock = acquire();
    {
      nb::gil_scoped_release release;
      core_.clear(chunk);
    }
    std::swap(owners_[chunk], dropped);
  }

  // A dataset's per-sample index over these arrays (borrowed: the caller keeps them), or
  // ArgumentError when their lengths disagree with each other or with the sources.
  tt::ChunkGather::SampleIndex sample_index(const SourceIds& sample_source,
                                            const IndexArray& sample_start,
                                            const LabelArray& labels,
                                            const IndexArray& label_offset) const {
    if (sample_source.shape(0) != sample_start.shape(0)) {
      throw tt::ArgumentError("sample_source and sample_start: expected the same length, got " +
                              std::to_string(sample_source.shape(0)) + " and " +
                              std::to_string(sample_start.shape(0)));
    }
    if (label_offset.shape(0) != core_.n_sources()) {
      throw tt::ArgumentError("label_offset: expected one entry per source (" +
                              std::to_string(core_.n_sources()) + "), got " +
                              std::to_string(label_offset.shape(0)));
    }
    return {
        sample_source.data(),
        sample_start.data(),
        sample_start.shape(0),
        labels.data(),
        static_cast<std::int64_t>(labels.shape(0)),
        static_cast<std::int64_t>(labels.shape(1)),
        label_offset.data(),
    };
  }

  void gather_samples(const IndexArray& indices, const SourceIds& sample_source,
                      const IndexArray& sample_start, std::int64_t window, nb::handle out_obj,
                      const LabelArray& labels, const IndexArray& label_offset,
                      const LabelsOut& labels_out) const {
    const std::size_t batch = indices.shape(0);
    const tt::ChunkGather::SampleIndex index =
        sample_index(sample_source, sample_start, labels, label_offset);
    if (labels_out.shape(0) != batch || labels_out.shape(1) != labels.shape(1)) {
      throw tt::ArgumentError("labels_out: expected shape (" + std::to_string(batch) + ", " +
                              std::to_string(labels.shape(1)) + "), got " + shape_text(labels_out));
    }
    if (window < 1) {
      throw tt::ArgumentError("window: expected >= 1, got " + std::to_string(window));
    }
    OutArray out = to_out(out_obj, batch, window, core_.n_features());
    nb::gil_scoped_release release;
    core_.gather_samples(indices.data(), batch, index, window, static_cast<float*>(out.data()),
                         out.size(), labels_out.data(), labels_out.size(), *pool_);
  }

  void gather(const IndexArray& source_ids, const IndexArray& starts, std::int64_t window,
              nb::handle out_obj) const {
    const std::size_t batch = source_ids.shape(0);
    if (starts.shape(0) != batch) {
      throw tt::ArgumentError("source_ids and starts: expected the same length, got " +
                              std::to_string(batch) + " and " + std::to_string(starts.shape(0)));
    }
    if (window < 1) {
      throw tt::ArgumentError("window: expected >= 1, got " + std::to_string(window));
    }
    OutArray out = to_out(out_obj, batch, window, core_.n_features());
    nb::gil_scoped_release release;
    core_.gather(source_ids.data(), starts.data(), batch, window, static_cast<float*>(out.data()),
                 out.size(), *pool_);
  }

 private:
  static std::vector<std::vector<std::int64_t>> starts_of(const std::vector<IndexArray>& arrays) {
    std::vector<std::vector<std::int64_t>> result;
    result.reserve(arrays.size());
    for (const IndexArray& a : arrays) result.push_back(to_vector(a));
    return result;
  }

  // The mutation lock, waited for without the GIL so that a gather's caller can go on.
  std::unique_lock<std::mutex> acquire() {
    std::unique_lock<std::mutex> lock(mutate_, std::defer_lock);
    nb::gil_scoped_release release;
    lock.lock();
    return lock;
  }

  tt::ChunkGather core_;
  std::vector<nb::object> owners_;
  tt::ThreadPool* pool_;
  std::mutex mutate_;
};

}  // namespace ttpy
