// Python bindings of tt::crc32c and tt::read_checked: checksums and checked reads, GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "ticktensor/crc32c.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

using Bytes = nb::ndarray<nb::ro, const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using BytesOut = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

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
  m.def(
      "read_checked",
      [](int fd, std::uint64_t offset, const BytesOut& out, bool checksum) {
        void* p = out.data();
        const std::size_t size = out.shape(0);
        tt::CheckedRead done;
        {
          nb::gil_scoped_release release;
          done = tt::read_checked(fd, offset, p, size, checksum);
        }
        return std::make_pair(done.bytes, done.crc);
      },
      "fd"_a, "offset"_a, "out"_a, "checksum"_a,
      "Fill `out` from byte `offset` of the file open as `fd` with pread; returns the bytes\n"
      "read (fewer at the end of the file) and, with `checksum`, their CRC-32C (else 0).");
}

}  // namespace ttpy
