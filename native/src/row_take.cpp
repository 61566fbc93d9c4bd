#include "ticktensor/row_take.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "ticktensor/errors.hpp"

namespace tt {

namespace {

// The chunk holding `row`: `hint` when it does, else a binary search over `starts`.
inline std::size_t chunk_of(const std::int64_t* starts, std::size_t n_chunks, std::int64_t row,
                            std::size_t hint) {
  if (row >= starts[hint] && row < starts[hint + 1]) return hint;
  // The last chunk whose start is <= row (empty chunks share their start with the next).
  const std::int64_t* after = std::upper_bound(starts, starts + n_chunks + 1, row);
  return static_cast<std::size_t>(after - starts) - 1;
}

// Size: the item size when known at compile time (a plain load and store), else 0.
template <std::size_t Size>
void take(const std::byte* const* chunks, const std::int64_t* starts, std::size_t n_chunks,
          std::size_t itemsize, const std::int64_t* rows, std::size_t n, std::byte* out) {
  const std::size_t size = Size ? Size : itemsize;
  std::size_t c = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t row = rows[i];
    c = chunk_of(starts, n_chunks, row, c);
    std::memcpy(out + i * size, chunks[c] + (row - starts[c]) * size, size);
  }
}

}  // namespace

void take_rows(const std::byte* const* chunks, const std::int64_t* starts, std::size_t n_chunks,
               std::size_t itemsize, const std::int64_t* rows, std::size_t n, std::byte* out) {
  const std::int64_t total = starts[n_chunks];
  for (std::size_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= total) {
      throw IndexError("row " + std::to_string(rows[i]) + " at position " + std::to_string(i) +
                       " is outside the chunks' " + std::to_string(total) + " rows");
    }
  }
  if (n_chunks == 0 || n == 0) return;
  switch (itemsize) {
    case 1:
      return take<1>(chunks, starts, n_chunks, itemsize, rows, n, out);
    case 2:
      return take<2>(chunks, starts, n_chunks, itemsize, rows, n, out);
    case 4:
      return take<4>(chunks, starts, n_chunks, itemsize, rows, n, out);
    case 8:
      return take<8>(chunks, starts, n_chunks, itemsize, rows, n, out);
    default:
      return take<0>(chunks, starts, n_chunks, itemsize, rows, n, out);
  }
}

}  // namespace tt
