// Python binding of tt::stack_columns_f32: float64 columns in, a float32 matrix filled,
// GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "ticktensor/column_stack.hpp"
#include "ticktensor/errors.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

namespace {

using Column = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Matrix = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

}  // namespace

void bind_column_stack(nb::module_& m) {
  m.def(
      "stack_columns_f32",
      [](const nb::sequence& columns, Matrix out) {
        const std::size_t rows = out.shape(0);
        if (nb::len(columns) != out.shape(1)) {
          throw tt::ArgumentError("out: expected " + std::to_string(nb::len(columns)) +
                                  " columns (one per array), got " + std::to_string(out.shape(1)));
        }
        // The arrays hold references, so their memory stays valid without the GIL.
        std::vector<Column> owners;
        std::vector<const double*> data;
        std::size_t j = 0;
        for (nb::handle obj : columns) {
          Column c;
          if (!nb::try_cast(obj, c, /*convert=*/false)) {
            throw tt::ArgumentError("column " + std::to_string(j) +
                                    ": expected a contiguous 1-D float64 numpy array, got " +
                                    type_of(obj));
          }
          if (c.shape(0) != rows) {
            throw tt::ArgumentError("column " + std::to_string(j) + ": expected " +
                                    std::to_string(rows) + " rows (as out's), got " +
                                    std::to_string(c.shape(0)));
          }
          owners.push_back(c);
          data.push_back(c.data());
          ++j;
        }
        float* dst = out.data();
        nb::gil_scoped_release release;
        tt::stack_columns_f32(data.data(), data.size(), rows, dst);
      },
      "columns"_a, "out"_a,
      nb::sig("def stack_columns_f32(columns: collections.abc.Sequence["
              "numpy.typing.NDArray[numpy.float64]], "
              "out: numpy.typing.NDArray[numpy.float32]) -> None"),
      "Fill `out` (float32, [rows, len(columns)], C-contiguous) with the float64 columns\n"
      "(contiguous, `rows` each) side by side, each value cast to float32 (beyond its\n"
      "range: +/-inf). The GIL is released.");
}

}  // namespace ttpy
