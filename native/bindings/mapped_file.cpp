// Python binding of tt::MappedFile: a read-only uint8 array that owns the mapping.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ticktensor/mapped_file.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

using MappedBytes = nb::ndarray<nb::numpy, const std::uint8_t, nb::ndim<1>>;

void bind_mapped_file(nb::module_& m) {
  m.def(
      "map_file",
      [](int fd, std::size_t size, bool populate, bool willneed) {
        std::unique_ptr<tt::MappedFile> mapped;
        {
          nb::gil_scoped_release release;  // MAP_POPULATE may read the whole file
          mapped = std::make_unique<tt::MappedFile>(fd, size, populate, willneed);
        }
        const auto* data = static_cast<const std::uint8_t*>(mapped->data());
        // The capsule owns the mapping: it is unmapped when the last view is released.
        nb::capsule owner(mapped.get(),
                          [](void* p) noexcept { delete static_cast<tt::MappedFile*>(p); });
        static_cast<void>(mapped.release());
        return MappedBytes(data, {size}, owner);
      },
      "fd"_a, "size"_a, "populate"_a, "willneed"_a,
      "A read-only uint8 array over the first `size` bytes of the file open as `fd`,\n"
      "memory-mapped; it holds no descriptor (close `fd` at will) and is unmapped when\n"
      "the last view goes.");
}

}  // namespace ttpy
