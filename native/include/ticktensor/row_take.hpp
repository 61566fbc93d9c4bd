// Rows of a column held in several chunks, gathered without joining the chunks first.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tt {

// Copies element rows[i] of the chunks' concatenation to out[i], for i in [0, n).
//
// `chunks[c]` holds `starts[c + 1] - starts[c]` elements of `itemsize` bytes; `starts`
// (n_chunks + 1 values) begins at 0 and never decreases. A row outside
// [0, starts[n_chunks]) throws IndexError naming it, before anything is copied.
// Rows are found chunk by chunk: the chunk of the previous row is tried first, so rows
// that mostly step forward (a symbol's rows in input order) cost no search.
void take_rows(const std::byte* const* chunks, const std::int64_t* starts, std::size_t n_chunks,
               std::size_t itemsize, const std::int64_t* rows, std::size_t n, std::byte* out);

}  // namespace tt
