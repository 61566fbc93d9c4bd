// Python binding of tt::order_by_key: (codes, key table) chunks in, numpy arrays filled,
// GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "ticktensor/errors.hpp"
#include "ticktensor/key_order.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

namespace {

using CodeArray = nb::ndarray<nb::ro, nb::ndim<1>, nb::device::cpu>;
using KeyArray = nb::ndarray<const std::uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Int64Out = nb::ndarray<std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// One (codes, keys) pair checked; the arrays are kept in `codes` and `keys`.
tt::KeyedChunk to_chunk(nb::handle pair, std::size_t i, std::vector<CodeArray>& codes,
                        std::vector<KeyArray>& keys) {
  const std::string where = "chunk " + std::to_string(i) + ": ";
  nb::tuple items;
  if (!nb::try_cast(pair, items, /*convert=*/false) || nb::len(items) != 2) {
    throw tt::ArgumentError(where + "expected a (codes, keys) tuple, got " + type_of(pair));
  }
  CodeArray c;
  if (!nb::try_cast(items[0], c, /*convert=*/false)) {
    throw tt::ArgumentError(where + "codes: expected a 1-D numpy array, got " + type_of(items[0]));
  }
  const auto code = static_cast<nb::dlpack::dtype_code>(c.dtype().code);
  const bool integer = code == nb::dlpack::dtype_code::Int || code == nb::dlpack::dtype_code::UInt;
  const std::size_t width = c.dtype().bits / 8;
  if (!integer || c.dtype().lanes != 1 || (width != 1 && width != 2 && width != 4 && width != 8)) {
    throw tt::ArgumentError(where + "codes: expected integers, got dtype " + dtype_text(c.dtype()));
  }
  if (c.shape(0) > 1 && c.stride(0) != 1) {
    throw tt::ArgumentError(where + "codes: expected a contiguous array, got byte strides " +
                            strides_text(c));
  }
  KeyArray k;
  if (!nb::try_cast(items[1], k, /*convert=*/false)) {
    throw tt::ArgumentError(where + "keys: expected a contiguous 1-D uint32 numpy array, got " +
                            type_of(items[1]));
  }
  codes.push_back(c);
  keys.push_back(k);
  return {c.data(), c.shape(0), width, code == nb::dlpack::dtype_code::Int, k.data(), k.shape(0)};
}

}  // namespace

void bind_key_order(nb::module_& m) {
  m.def(
      "order_by_key",
      [](const nb::sequence& chunks, Int64Out counts, Int64Out order) {
        // The arrays hold references, so their memory stays valid without the GIL.
        std::vector<CodeArray> codes;
        std::vector<KeyArray> keys;
        std::vector<tt::KeyedChunk> keyed;
        std::size_t i = 0;
        std::size_t rows = 0;
        for (nb::handle pair : chunks) {
          keyed.push_back(to_chunk(pair, i++, codes, keys));
          rows += keyed.back().n;
        }
        if (order.shape(0) != rows) {
          throw tt::ArgumentError("order: expected " + std::to_string(rows) +
                                  " items (one per row of the chunks), got " +
                                  std::to_string(order.shape(0)));
        }
        nb::gil_scoped_release release;
        tt::order_by_key(keyed.data(), keyed.size(), counts.shape(0), counts.data(), order.data());
      },
      "chunks"_a, "counts"_a, "order"_a,
      nb::sig("def order_by_key(chunks: collections.abc.Sequence[tuple["
              "numpy.typing.NDArray[typing.Any], numpy.typing.NDArray[numpy.uint32]]], "
              "counts: numpy.typing.NDArray[numpy.int64], "
              "order: numpy.typing.NDArray[numpy.int64]) -> None"),
      "Fill `order` with the rows of the chunks (each a (codes, keys) pair: row i's key\n"
      "is keys[codes[i]]), one chunk after the other, stably ordered by key, and `counts`\n"
      "(one item per key) with the rows of each key. A counting sort; the GIL is released.\n"
      "A code outside its key table raises IndexError, a key not below len(counts)\n"
      "ArgumentError, before `order` is written.");
}

}  // namespace ttpy
