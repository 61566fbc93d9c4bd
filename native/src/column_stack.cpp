#include "ticktensor/column_stack.hpp"

#include <algorithm>

namespace tt {

void stack_columns_f32(const double* const* columns, std::size_t n_columns, std::size_t n_rows,
                       float* out) {
  constexpr std::size_t kBlock = 1024;  // rows per block: kBlock * n_columns floats in cache
  for (std::size_t lo = 0; lo < n_rows; lo += kBlock) {
    const std::size_t hi = std::min(n_rows, lo + kBlock);
    for (std::size_t j = 0; j < n_columns; ++j) {
      const double* column = columns[j];
      float* to = out + lo * n_columns + j;
      for (std::size_t i = lo; i < hi; ++i, to += n_columns) *to = static_cast<float>(column[i]);
    }
  }
}

}  // namespace tt
