// A stable order of rows by a small integer key (a counting sort), for rows held in
// several chunks whose values are codes into per-chunk key tables (Arrow dictionaries).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tt {

// One chunk of rows: `n` codes of `width` bytes (1, 2, 4 or 8; signed or not), each an
// index into `keys` (`n_keys_table` entries). Row i's key is keys[codes[i]].
struct KeyedChunk {
  const void* codes;
  std::size_t n;
  std::size_t width;
  bool is_signed;
  const std::uint32_t* keys;
  std::size_t n_keys_table;
};

// The rows of the chunks one after the other (row numbers count across chunks), ordered
// by key, rows of one key in their order: order[0 .. total) gets the row numbers and
// counts[0 .. n_keys) the rows of each key.
//
// Two passes over the codes (count, then place), no comparison sort. A key table entry
// not below `n_keys` throws ArgumentError; a code outside its key table throws
// IndexError naming the chunk and row, before anything is placed in `order`.
void order_by_key(const KeyedChunk* chunks, std::size_t n_chunks, std::size_t n_keys,
                  std::int64_t* counts, std::int64_t* order);

}  // namespace tt
