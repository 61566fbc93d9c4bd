#include "ticktensor/time_bars.hpp"

#include <cmath>
#include <string>

#include "ticktensor/errors.hpp"

namespace tt {

namespace {

// Whether trade i (> 0) opens a run: its series or bar differs from trade i - 1's.
inline bool starts_run(const Trades& t, std::size_t i, std::int64_t bar, std::int64_t previous) {
  return bar != previous || (t.series != nullptr && t.series[i] != t.series[i - 1]);
}

}  // namespace

RunCounts count_runs(const Trades& t) {
  RunCounts c{0, 0, 0};
  if (t.n == 0) return c;
  std::int64_t previous = bar_open(t.ts[0], t.interval);
  std::size_t length = 1;
  auto close_run = [&c, &length]() {
    ++c.runs;
    if (length > 1) {
      ++c.long_runs;
      c.long_rows += length;
    }
  };
  for (std::size_t i = 1; i < t.n; ++i) {
    const std::int64_t bar = bar_open(t.ts[i], t.interval);
    if (starts_run(t, i, bar, previous)) {
      close_run();
      length = 0;
    }
    ++length;
    previous = bar;
  }
  close_run();
  return c;
}

void time_bars(const Trades& t, const RunCounts& sizes, const BarColumns& out) {
  const auto too_small = [](const char* what) {
    return ArgumentError(std::string("the trades make more ") + what +
                         " than the arrays given hold (see count_runs)");
  };
  if (t.n == 0) {
    if (sizes.runs != 0 || sizes.long_runs != 0 || sizes.long_rows != 0) throw too_small("bars");
    return;
  }
  std::size_t run = 0;       // the run being filled
  std::size_t long_run = 0;  // runs of several trades so far
  std::size_t long_row = 0;  // their trades so far
  std::size_t first = 0;     // the run's first trade
  std::int64_t bar = bar_open(t.ts[0], t.interval);
  // Fills run `run` from trades [first, end).
  auto emit = [&](std::size_t end) {
    const std::size_t length = end - first;
    if (run >= sizes.runs) throw too_small("bars");
    if (length > 1 && (long_run >= sizes.long_runs || long_row + length > sizes.long_rows)) {
      throw too_small("trades in bars of several");
    }
    if (out.series != nullptr) out.series[run] = t.series[first];
    out.bar[run] = bar;
    out.ts_first[run] = t.ts[first];
    out.ts_last[run] = t.ts[end - 1];
    out.open[run] = t.price[first];
    out.close[run] = t.price[end - 1];
    double high = t.price[first];
    double low = t.price[first];
    for (std::size_t i = first + 1; i < end; ++i) {
      high = std::fmax(high, t.price[i]);
      low = std::fmin(low, t.price[i]);
    }
    out.high[run] = high;
    out.low[run] = low;
    out.count[run] = length;
    if (length == 1) {
      out.volume[run] = t.size[first];
      out.dollar[run] = t.price[first] * t.size[first];
      out.signed_volume[run] = t.side != nullptr ? t.side[first] * t.size[first] : 0.0;
    } else {
      out.volume[run] = out.dollar[run] = out.signed_volume[run] = 0.0;
      out.long_runs[long_run] = static_cast<std::int64_t>(run);
      out.long_starts[long_run] = static_cast<std::int64_t>(long_row);
      for (std::size_t i = first; i < end; ++i, ++long_row) {
        out.long_volume[long_row] = t.size[i];
        out.long_dollar[long_row] = t.price[i] * t.size[i];
        out.long_signed[long_row] = t.side != nullptr ? t.side[i] * t.size[i] : 0.0;
      }
      ++long_run;
    }
    ++run;
  };
  for (std::size_t i = 1; i < t.n; ++i) {
    const std::int64_t next = bar_open(t.ts[i], t.interval);
    if (starts_run(t, i, next, bar)) {
      emit(i);
      first = i;
      bar = next;
    }
  }
  emit(t.n);
  if (run != sizes.runs || long_run != sizes.long_runs || long_row != sizes.long_rows) {
    throw ArgumentError("the trades make fewer bars than the arrays given hold (see count_runs)");
  }
}

}  // namespace tt
