// Python binding of tt::crc32c: any contiguous buffer in, its CRC-32C out, GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>

#include "ticktensor/crc32c.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

using Bytes = nb::ndarray<nb::ro, const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void bind_crc32c(nb::module_& m) {
  m.def(
      "crc32c",
      [](const Bytes& data, std::uint32_t value) {
        const void* p = data.data();
        const std::size_t size = data.shape(0);
        nb::gil_scoped_release release;
        return tt::crc32c(p, size, value);
      },
      "data"_a, "value"_a = 0,
      "The CRC-32C (Castagnoli) of `data`, continuing from `value` (the CRC-32C of the\n"
      "bytes before them; 0 to start).");
}

}  // namespace ttpy
