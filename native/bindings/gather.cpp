// Python binding of tt::WindowGather: zero-copy numpy views, GIL released while copying.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "ticktensor/errors.hpp"
#include "ticktensor/thread_pool.hpp"
#include "ticktensor/window_gather.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

namespace {

// Any CPU array, imported without conversion: dtype and layout are checked by hand so a
// wrong one fails with a message instead of being silently copied.
using SourceArray = nb::ndarray<nb::ro, nb::device::cpu>;
using IndexArray = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

SourceArray to_source(nb::handle obj, std::size_t i) {
  const std::string where = "source " + std::to_string(i) + ": ";
  SourceArray a;
  if (!nb::try_cast(obj, a, /*convert=*/false)) {
    throw tt::ArgumentError(where + "expected a numpy array, got " + type_of(obj));
  }
  if (a.ndim() != 2 || !is_float32(a)) {
    throw tt::ArgumentError(where + "expected a 2-D float32 array [rows, features], got " +
                            std::to_string(a.ndim()) + "-D " + type_of(obj) + " of shape " +
                            shape_text(a) + " and dtype " + dtype_text(a.dtype()));
  }
  if (!is_c_contiguous(a)) {
    throw tt::ArgumentError(where + "expected a C-contiguous array, got shape " + shape_text(a) +
                            " with byte strides " + strides_text(a) +
                            "; pass np.ascontiguousarray(source) (a copy) instead");
  }
  return a;
}

// Owns references to the source arrays (so their memory outlives every gather) and borrows
// the pool, which keep_alive below ties to this object's lifetime.
class PyWindowGather {
 public:
  PyWindowGather(const nb::sequence& sources, tt::ThreadPool& pool)
      : owners_(collect(sources)), core_(views(owners_)), pool_(&pool) {}

  std::size_t n_sources() const { return core_.n_sources(); }
  std::int64_t n_features() const { return core_.n_features(); }
  std::int64_t rows(std::size_t i) const { return core_.rows(i); }

  void gather(const IndexArray& array_ids, const IndexArray& starts, std::int64_t window,
              nb::handle out_obj) const {
    const std::size_t batch = array_ids.shape(0);
    if (starts.shape(0) != batch) {
      throw tt::ArgumentError("array_ids and starts: expected the same length, got " +
                              std::to_string(batch) + " and " + std::to_string(starts.shape(0)));
    }
    if (window < 1) {
      throw tt::ArgumentError("window: expected >= 1, got " + std::to_string(window));
    }
    OutArray out = to_out(out_obj, batch, window, core_.n_features());
    // `out` and the index arrays hold references, so the memory stays valid without the GIL.
    nb::gil_scoped_release release;
    core_.gather(array_ids.data(), starts.data(), batch, window, static_cast<float*>(out.data()),
                 out.size(), *pool_);
  }

 private:
  static std::vector<SourceArray> collect(const nb::sequence& sources) {
    std::vector<SourceArray> arrays;
    arrays.reserve(nb::len(sources));
    std::size_t i = 0;
    for (nb::handle obj : sources) arrays.push_back(to_source(obj, i++));
    return arrays;
  }

  static std::vector<tt::SourceArray> views(const std::vector<SourceArray>& arrays) {
    std::vector<tt::SourceArray> result;
    result.reserve(arrays.size());
    for (const SourceArray& a : arrays) {
      result.push_back({static_cast<const float*>(a.data()), static_cast<std::int64_t>(a.shape(0)),
                        static_cast<std::int64_t>(a.shape(1))});
    }
    return result;
  }

  std::vector<SourceArray> owners_;
  tt::WindowGather core_;
  tt::ThreadPool* pool_;
};

}  // namespace

void bind_gather(nb::module_& m) {
  nb::class_<PyWindowGather>(
      m, "WindowGather",
      "Copies windows of consecutive rows out of fixed float32 source arrays.\n\n"
      "Holds a reference to every source array and to the pool.")
      .def(nb::init<const nb::sequence&, tt::ThreadPool&>(), "sources"_a, "pool"_a,
           nb::keep_alive<1, 3>(),
           nb::sig("def __init__(self, sources: collections.abc.Sequence["
                   "numpy.typing.NDArray[numpy.float32]], pool: ThreadPool) -> None"),
           "Borrow C-contiguous 2-D float32 arrays with one common number of features.")
      .def_prop_ro("n_sources", &PyWindowGather::n_sources, "Number of source arrays.")
      .def_prop_ro("n_features", &PyWindowGather::n_features, "Features (columns) per row.")
      .def("rows", &PyWindowGather::rows, "array_id"_a, "Rows of source ``array_id``.")
      .def("gather", &PyWindowGather::gather, "array_ids"_a, "starts"_a, "window"_a,
           "out"_a.noconvert(),
           nb::sig("def gather(self, array_ids: numpy.typing.NDArray[numpy.int64], "
                   "starts: numpy.typing.NDArray[numpy.int64], window: int, "
                   "out: numpy.typing.NDArray[numpy.float32]) -> None"),
           "Write ``sources[array_ids[b]][starts[b]:starts[b] + window]`` into ``out[b]``.\n\n"
           "Checks every sample before writing; releases the GIL while copying.");
}

}  // namespace ttpy
