#include "ticktensor/key_order.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "ticktensor/errors.hpp"

namespace tt {

namespace {

// Calls `visit(row_in_chunk, key)` for each row of `chunk` in order, codes read as `Code`.
// A code outside the key table throws before `visit` sees it.
template <typename Code, typename Visit>
void each_key(const KeyedChunk& chunk, std::size_t index, Visit&& visit) {
  const auto* codes = static_cast<const Code*>(chunk.codes);
  const auto limit = static_cast<std::uint64_t>(chunk.n_keys_table);
  for (std::size_t i = 0; i < chunk.n; ++i) {
    const Code code = codes[i];
    // A negative signed code becomes a huge unsigned one: one comparison checks both ends.
    if (static_cast<std::uint64_t>(static_cast<std::int64_t>(code)) >= limit) {
      throw IndexError("chunk " + std::to_string(index) + " row " + std::to_string(i) + ": code " +
                       std::to_string(static_cast<std::int64_t>(code)) +
                       " is outside its key table of " + std::to_string(chunk.n_keys_table));
    }
    visit(i, chunk.keys[static_cast<std::size_t>(code)]);
  }
}

template <typename Visit>
void each_key(const KeyedChunk& chunk, std::size_t index, Visit&& visit) {
  switch (chunk.width * 2 + (chunk.is_signed ? 1 : 0)) {
    case 2:
      return each_key<std::uint8_t>(chunk, index, visit);
    case 3:
      return each_key<std::int8_t>(chunk, index, visit);
    case 4:
      return each_key<std::uint16_t>(chunk, index, visit);
    case 5:
      return each_key<std::int16_t>(chunk, index, visit);
    case 8:
      return each_key<std::uint32_t>(chunk, index, visit);
    case 9:
      return each_key<std::int32_t>(chunk, index, visit);
    case 16:
      return each_key<std::uint64_t>(chunk, index, visit);
    case 17:
      return each_key<std::int64_t>(chunk, index, visit);
    default:
      throw ArgumentError("chunk " + std::to_string(index) + ": codes of " +
                          std::to_string(chunk.width) + " bytes; expected 1, 2, 4 or 8");
  }
}

}  // namespace

void order_by_key(const KeyedChunk* chunks, std::size_t n_chunks, std::size_t n_keys,
                  std::int64_t* counts, std::int64_t* order) {
  for (std::size_t c = 0; c < n_chunks; ++c) {
    const KeyedChunk& chunk = chunks[c];
    const std::uint32_t* end = chunk.keys + chunk.n_keys_table;
    const std::uint32_t* bad =
        std::find_if(chunk.keys, end, [n_keys](std::uint32_t k) { return k >= n_keys; });
    if (bad != end) {
      throw ArgumentError("chunk " + std::to_string(c) + ": key table entry " +
                          std::to_string(bad - chunk.keys) + " is " + std::to_string(*bad) +
                          ", not below the " + std::to_string(n_keys) + " keys");
    }
  }
  std::fill(counts, counts + n_keys, 0);
  for (std::size_t c = 0; c < n_chunks; ++c) {
    each_key(chunks[c], c, [counts](std::size_t, std::uint32_t key) { ++counts[key]; });
  }
  // Where each key's next row goes: its rows start after every smaller key's.
  std::vector<std::int64_t> next(n_keys);
  std::int64_t start = 0;
  for (std::size_t k = 0; k < n_keys; ++k) {
    next[k] = start;
    start += counts[k];
  }
  std::int64_t first = 0;  // the row number of the chunk's first row
  for (std::size_t c = 0; c < n_chunks; ++c) {
    std::int64_t* slot = next.data();
    each_key(chunks[c], c, [slot, order, first](std::size_t i, std::uint32_t key) {
      order[slot[key]++] = first + static_cast<std::int64_t>(i);
    });
    first += static_cast<std::int64_t>(chunks[c].n);
  }
}

}  // namespace tt
