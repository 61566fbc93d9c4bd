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
// Rows go in batches: first each row's address (the chunk lookups, which branch), then
// the copies, from lines prefetched while the addresses were found.
template <std::size_t Size>
void take(const std::byte* const* chunks, const std::int64_t* starts, std::size_t n_chunks,
          std::size_t itemsize, const std::int64_t* rows, std::size_t n, std::byte* out) {
  constexpr std::size_t kBatch = 256;
  const std::size_t size = Size ? Size : itemsize;
  const std::byte* from[kBatch];
  std::size_t c = 0;
  for (std::size_t lo = 0; lo < n; lo += kBatch) {
    const std::size_t m = std::min(kBatch, n - lo);
    for (std::size_t j = 0; j < m; ++j) {
      const std::int64_t row = rows[lo + j];
      c = chunk_of(starts, n_chunks, row, c);
      from[j] = chunks[c] + (row - starts[c]) * size;
      __builtin_prefetch(from[j]);
    }
    std::byte* to = out + lo * size;
    for (std::size_t j = 0; j < m; ++j) std::memcpy(to + j * size, from[j], size);
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
