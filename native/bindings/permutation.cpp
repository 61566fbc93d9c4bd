// Python binding of tt::random_permutation: fills a numpy int64 array, GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>

#include "ticktensor/permutation.hpp"
#include "ticktensor/thread_pool.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

using PermutationOut = nb::ndarray<std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void bind_permutation(nb::module_& m) {
  m.def(
      "random_permutation",
      [](PermutationOut out, std::uint64_t seed, std::uint64_t stream, tt::ThreadPool& pool) {
        const auto n = static_cast<std::int64_t>(out.shape(0));
        std::int64_t* data = out.data();
        nb::gil_scoped_release release;
        tt::random_permutation(data, n, seed, stream, pool);
      },
      "out"_a, "seed"_a, "stream"_a, "pool"_a,
      "Fill `out` (int64, 1-D, C-contiguous) with a uniformly random permutation of\n"
      "range(len(out)), determined by (seed, stream) alone. The GIL is released.");
}

}  // namespace ttpy
