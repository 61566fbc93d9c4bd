// Python binding of tt::take_rows: numpy chunks in, a numpy array filled, GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "ticktensor/errors.hpp"
#include "ticktensor/row_take.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

namespace {

using ChunkArray = nb::ndarray<nb::ro, nb::ndim<1>, nb::device::cpu>;
using RowArray = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using TakeOut = nb::ndarray<nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::size_t itemsize_of(nb::dlpack::dtype dt) { return (dt.bits / 8) * dt.lanes; }

ChunkArray to_chunk(nb::handle obj, std::size_t i, std::size_t itemsize) {
  const std::string where = "chunk " + std::to_string(i) + ": ";
  ChunkArray a;
  if (!nb::try_cast(obj, a, /*convert=*/false)) {
    throw tt::ArgumentError(where + "expected a 1-D numpy array, got " + type_of(obj));
  }
  if (itemsize_of(a.dtype()) != itemsize) {
    throw tt::ArgumentError(where + "expected items of " + std::to_string(itemsize) +
                            " bytes (as out's), got dtype " + dtype_text(a.dtype()));
  }
  if (a.shape(0) > 1 && a.stride(0) != 1) {
    throw tt::ArgumentError(where + "expected a contiguous array, got byte strides " +
                            strides_text(a));
  }
  return a;
}

}  // namespace

void bind_row_take(nb::module_& m) {
  m.def(
      "take_rows",
      [](const nb::sequence& chunks, const RowArray& rows, TakeOut out) {
        const std::size_t itemsize = itemsize_of(out.dtype());
        if (out.shape(0) != rows.shape(0)) {
          throw tt::ArgumentError("out: expected " + std::to_string(rows.shape(0)) +
                                  " items (one per row), got " + std::to_string(out.shape(0)));
        }
        // The arrays hold references, so their memory stays valid without the GIL.
        std::vector<ChunkArray> owners;
        owners.reserve(nb::len(chunks));
        std::size_t i = 0;
        for (nb::handle obj : chunks) owners.push_back(to_chunk(obj, i++, itemsize));
        std::vector<const std::byte*> data;
        std::vector<std::int64_t> starts{0};
        for (const ChunkArray& a : owners) {
          data.push_back(static_cast<const std::byte*>(a.data()));
          starts.push_back(starts.back() + static_cast<std::int64_t>(a.shape(0)));
        }
        auto* dst = static_cast<std::byte*>(out.data());
        nb::gil_scoped_release release;
        tt::take_rows(data.data(), starts.data(), data.size(), itemsize, rows.data(), rows.shape(0),
                      dst);
      },
      "chunks"_a, "rows"_a, "out"_a,
      nb::sig("def take_rows(chunks: collections.abc.Sequence[numpy.typing.NDArray[typing.Any]], "
              "rows: numpy.typing.NDArray[numpy.int64], "
              "out: numpy.typing.NDArray[typing.Any]) -> None"),
      "Fill `out` (1-D, C-contiguous) with rows `rows` (int64) of the concatenation of\n"
      "`chunks` (1-D contiguous numpy arrays whose items are as wide as out's), without\n"
      "joining them. A row out of range raises IndexError before anything is copied.\n"
      "The GIL is released.");
}

}  // namespace ttpy
