// Time bars of trades: each run of trades with one (series, bar open) reduced to a row.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tt {

// Trades sorted by (series, time): `series` (nullptr: one series), times in ns, prices,
// sizes and sides (nullptr: no sides). A trade's bar opens at ts - ts mod interval
// (the floored modulo: the epoch-aligned grid, before 1970 too).
struct Trades {
  const std::uint32_t* series;
  const std::int64_t* ts;
  const double* price;
  const double* size;
  const double* side;
  std::size_t n;
  std::int64_t interval;
};

// The bar open of a trade at `ts`.
inline std::int64_t bar_open(std::int64_t ts, std::int64_t interval) {
  std::int64_t r = ts % interval;
  if (r < 0) r += interval;
  // Wrapping as numpy's int64 does at the type's ends (no undefined overflow).
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(ts) - static_cast<std::uint64_t>(r));
}

struct RunCounts {
  std::size_t runs;       // bars
  std::size_t long_runs;  // bars of more than one trade
  std::size_t long_rows;  // trades in those bars
};

// The runs of trades with equal (series, bar open).
RunCounts count_runs(const Trades& t);

// One row per run (arrays of count_runs(t).runs items; series_out only when t.series is set):
// the run's series and bar open, first and last trade's time and price, the greatest and
// least price (std::fmax/fmin: NaN only when every price is NaN), its trade count, and
// for a run of one trade its volume (size), dollar volume (price * size) and signed
// volume (side * size; 0 without sides). Runs of several trades get 0 there; their trades'
// quantities go to long_volume / long_dollar / long_signed (long_rows items, run
// after run), long_runs gets their run numbers and long_starts where each begins, so that
// the caller sums them as it must (numpy's reduceat, pairwise).
struct BarColumns {
  std::uint32_t* series;
  std::int64_t* bar;
  std::int64_t* ts_first;
  std::int64_t* ts_last;
  double* open;
  double* high;
  double* low;
  double* close;
  std::uint64_t* count;
  double* volume;
  double* dollar;
  double* signed_volume;
  std::int64_t* long_runs;
  std::int64_t* long_starts;
  double* long_volume;
  double* long_dollar;
  double* long_signed;
};

// `sizes`: the items of the arrays (count_runs(t) fits them exactly); a mismatch throws
// ArgumentError, before anything is written past them.
void time_bars(const Trades& t, const RunCounts& sizes, const BarColumns& out);

}  // namespace tt
