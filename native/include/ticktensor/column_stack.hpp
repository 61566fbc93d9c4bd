// Columns of float64 side by side, cast to one row-major float32 matrix.
#pragma once

#include <cstddef>

namespace tt {

// out[i * n_columns + j] = float(columns[j][i]) for i in [0, n_rows), j in [0, n_columns):
// each value rounded to the nearest float32 as a C++ cast does it (as numpy's astype
// does): beyond float32's range it becomes +/-inf, a NaN stays a NaN. Rows go in blocks
// that stay in cache, so every column is read and the matrix written in order.
void stack_columns_f32(const double* const* columns, std::size_t n_columns, std::size_t n_rows,
                       float* out);

}  // namespace tt
