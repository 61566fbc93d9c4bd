// Python binding of tt::ChunkGather: chunks are numpy arrays the binding keeps alive.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chunk_gather.hpp"
#include "ticktensor/thread_pool.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

void bind_chunk_gather(nb::module_& m) {
  nb::class_<PyChunkGather>(
      m, "ChunkGather",
      "Copies row windows out of sources split into chunks that are loaded and dropped.\n\n"
      "Holds a reference to each loaded chunk's array and to the pool.")
      .def(nb::init<const std::vector<IndexArray>&, const IndexArray&, std::int64_t,
                    tt::ThreadPool&>(),
           "chunk_starts"_a, "source_rows"_a, "n_features"_a, "pool"_a, nb::keep_alive<1, 5>(),
           nb::sig("def __init__(self, chunk_starts: collections.abc.Sequence["
                   "numpy.typing.NDArray[numpy.int64]], source_rows: "
                   "numpy.typing.NDArray[numpy.int64], n_features: int, pool: ThreadPool) "
                   "-> None"),
           "Chunk k of source s starts at row ``chunk_starts[s][k]``.")
      .def_prop_ro(
          "n_sources", [](PyChunkGather& g) { return g.core().n_sources(); }, "Sources.")
      .def_prop_ro(
          "n_chunks", [](PyChunkGather& g) { return g.core().n_chunks(); },
          "Chunks over all sources.")
      .def_prop_ro(
          "n_features", [](PyChunkGather& g) { return g.core().n_features(); },
          "Features (columns) per row.")
      .def_prop_ro(
          "loaded_count", [](PyChunkGather& g) { return g.core().loaded_count(); },
          "Chunks whose rows are loaded now.")
      .def(
          "first_chunk", [](PyChunkGather& g, std::size_t s) { return g.core().first_chunk(s); },
          "source"_a, "Global number of source ``source``'s first chunk.")
      .def(
          "chunk_rows", [](PyChunkGather& g, std::size_t c) { return g.core().chunk_rows(c); },
          "chunk"_a, "Rows of chunk ``chunk``.")
      .def(
          "loaded", [](PyChunkGather& g, std::size_t c) { return g.core().loaded(c); }, "chunk"_a,
          "Whether chunk ``chunk``'s rows are loaded.")
      .def("set", &PyChunkGather::set, "chunk"_a, "data"_a,
           nb::sig("def set(self, chunk: int, data: numpy.typing.NDArray[numpy.float32]) -> None"),
           "Load chunk ``chunk`` from ``data`` (kept referenced until cleared or replaced).")
      .def("clear", &PyChunkGather::clear, "chunk"_a,
           "Drop chunk ``chunk``; returns once no running gather reads it.")
      .def("gather_samples", &PyChunkGather::gather_samples, "indices"_a, "sample_source"_a,
           "sample_start"_a, "window"_a, "out"_a.noconvert(), "labels"_a, "label_offset"_a,
           "labels_out"_a.noconvert(),
           nb::sig("def gather_samples(self, indices: numpy.typing.NDArray[numpy.int64], "
                   "sample_source: numpy.typing.NDArray[numpy.int32], "
                   "sample_start: numpy.typing.NDArray[numpy.int64], window: int, "
                   "out: numpy.typing.NDArray[numpy.float32], "
                   "labels: numpy.typing.NDArray[numpy.float32], "
                   "label_offset: numpy.typing.NDArray[numpy.int64], "
                   "labels_out: numpy.typing.NDArray[numpy.float32]) -> None"),
           "Gather samples ``indices`` of a dataset's index and their labels in one call.\n\n"
           "Checks every sample first; releases the GIL.")
      .def("gather", &PyChunkGather::gather, "source_ids"_a, "starts"_a, "window"_a,
           "out"_a.noconvert(),
           nb::sig("def gather(self, source_ids: numpy.typing.NDArray[numpy.int64], "
                   "starts: numpy.typing.NDArray[numpy.int64], window: int, "
                   "out: numpy.typing.NDArray[numpy.float32]) -> None"),
           "Write rows ``[starts[b], starts[b] + window)`` of source ``source_ids[b]`` into "
           "``out[b]``.\n\nChecks every sample and its chunks before writing; releases the "
           "GIL while copying.");
}

}  // namespace ttpy
