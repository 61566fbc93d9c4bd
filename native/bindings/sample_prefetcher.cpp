// Python binding of tt::SamplePrefetcher: holds the gather, index and order it borrows.
#include "ticktensor/sample_prefetcher.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "chunk_gather.hpp"
#include "ticktensor/errors.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

namespace {

using Floats = nb::ndarray<float, nb::c_contig, nb::device::cpu>;

// The arrays and the gather the core reads stay referenced here for the object's life;
// slot buffers do not (the Python side keeps them, and stops the thread before it lets
// them go), so a slot's reference count still tells whether a consumer holds its batch.
class PySamplePrefetcher {
 public:
  PySamplePrefetcher(nb::object gather, const SourceIds& sample_source,
                     const IndexArray& sample_start, const LabelArray& labels,
                     const IndexArray& label_offset, std::int64_t window, const IndexArray& order,
                     const IndexArray& step_first, const IndexArray& step_count,
                     std::size_t capacity, std::size_t depth)
      : gather_(std::move(gather)),
        sample_source_(sample_source),
        sample_start_(sample_start),
        labels_(labels),
        label_offset_(label_offset),
        order_(order) {
    PyChunkGather& owner = nb::cast<PyChunkGather&>(gather_);
    // Read through the members: they hold the arrays as long as the core borrows them.
    const tt::ChunkGather::SampleIndex index =
        owner.sample_index(sample_source_, sample_start_, labels_, label_offset_);
    if (step_first.shape(0) != step_count.shape(0)) {
      throw tt::ArgumentError("step_first and step_count: expected the same length, got " +
                              std::to_string(step_first.shape(0)) + " and " +
                              std::to_string(step_count.shape(0)));
    }
    std::vector<tt::SamplePrefetcher::Step> steps(step_first.shape(0));
    for (std::size_t s = 0; s < steps.size(); ++s) {
      steps[s] = {step_first.data()[s], step_count.data()[s]};
    }
    core_ = std::make_unique<tt::SamplePrefetcher>(owner.core(), index, window, order_.data(),
                                                   order_.shape(0), std::move(steps), capacity,
                                                   depth, owner.pool());
  }

  ~PySamplePrefetcher() { stop(); }

  std::size_t add_slot(const Floats& features, const Floats& labels) {
    return core_->add_slot(features.data(), features.size(), labels.data(), labels.size());
  }

  void release(std::size_t slot) { core_->release(slot); }

  nb::tuple next(double timeout_s) {
    tt::SamplePrefetcher::Batch batch;
    {
      nb::gil_scoped_release release;
      batch = core_->next(timeout_s);
    }
    return nb::make_tuple(static_cast<int>(batch.kind), batch.step, batch.slot, batch.samples);
  }

  void stop() {
    if (!core_) return;
    nb::gil_scoped_release release;  // The thread may be waiting for the pool.
    core_->stop();
  }

  tt::SamplePrefetcher& core() { return *core_; }

 private:
  nb::object gather_;
  SourceIds sample_source_;
  IndexArray sample_start_;
  LabelArray labels_;
  IndexArray label_offset_;
  IndexArray order_;
  std::unique_ptr<tt::SamplePrefetcher> core_;  // Declared last: destroyed (joined) first.
};

}  // namespace

void bind_sample_prefetcher(nb::module_& m) {
  nb::class_<PySamplePrefetcher>(
      m, "SamplePrefetcher",
      "A native thread that gathers planned batches of a dataset's samples into slots.\n\n"
      "Step s is the samples at positions ``step_first[s] + j`` (modulo ``len(order)``) of\n"
      "``order`` for ``j < step_count[s]``. Batches come out of :meth:`next` in step order.")
      .def(nb::init<nb::object, const SourceIds&, const IndexArray&, const LabelArray&,
                    const IndexArray&, std::int64_t, const IndexArray&, const IndexArray&,
                    const IndexArray&, std::size_t, std::size_t>(),
           "gather"_a, "sample_source"_a, "sample_start"_a, "labels"_a, "label_offset"_a,
           "window"_a, "order"_a, "step_first"_a, "step_count"_a, "capacity"_a, "depth"_a,
           nb::sig("def __init__(self, gather: ChunkGather, "
                   "sample_source: numpy.typing.NDArray[numpy.int32], "
                   "sample_start: numpy.typing.NDArray[numpy.int64], "
                   "labels: numpy.typing.NDArray[numpy.float32], "
                   "label_offset: numpy.typing.NDArray[numpy.int64], window: int, "
                   "order: numpy.typing.NDArray[numpy.int64], "
                   "step_first: numpy.typing.NDArray[numpy.int64], "
                   "step_count: numpy.typing.NDArray[numpy.int64], capacity: int, depth: int) "
                   "-> None"),
           "Start the thread; it fills slots as they are added or released.")
      .def("add_slot", &PySamplePrefetcher::add_slot, "features"_a.noconvert(),
           "labels"_a.noconvert(),
           nb::sig("def add_slot(self, features: numpy.typing.NDArray[numpy.float32], "
                   "labels: numpy.typing.NDArray[numpy.float32]) -> int"),
           "Add a free slot (``capacity`` samples of features and labels); returns its number."
           "\n\nThe caller keeps both arrays alive until :meth:`stop` has returned.")
      .def("release", &PySamplePrefetcher::release, "slot"_a,
           "Slot ``slot``'s batch is no longer read: it may be filled again.")
      .def("next", &PySamplePrefetcher::next, "timeout"_a,
           nb::sig("def next(self, timeout: float) -> tuple[int, int, int, int]"),
           "``(kind, step, slot, samples)`` of the next batch, waiting up to ``timeout``\n"
           "seconds with the GIL released. kind 0 is a batch, 1 a timeout, 2 the end;\n"
           "an exception that ended the thread is raised (once).")
      .def("stop", &PySamplePrefetcher::stop, "Stop and join the thread. Idempotent.")
      .def_prop_ro(
          "running", [](PySamplePrefetcher& p) { return p.core().running(); },
          "Whether the thread is running (False in a forked child).")
      .def_prop_ro(
          "waiting", [](PySamplePrefetcher& p) { return p.core().waiting(); },
          "Filled batches not taken yet.")
      .def_prop_ro(
          "slots", [](PySamplePrefetcher& p) { return p.core().slots(); }, "Slots added so far.")
      .def_prop_ro(
          "fill_seconds", [](PySamplePrefetcher& p) { return p.core().fill_seconds(); },
          "Seconds the thread spent gathering.")
      .def_prop_ro(
          "failed_step", [](PySamplePrefetcher& p) { return p.core().failed_step(); },
          "The step whose gather raised, or -1.");
}

}  // namespace ttpy
