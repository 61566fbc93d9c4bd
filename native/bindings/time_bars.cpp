// Python binding of tt::count_runs and tt::time_bars: numpy arrays in and filled, GIL
// released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.hpp"
#include "ticktensor/errors.hpp"
#include "ticktensor/time_bars.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

namespace {

template <typename T>
using In = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Out = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void check_length(const char* name, std::size_t got, std::size_t expected) {
  if (got != expected) {
    throw tt::ArgumentError(std::string(name) + ": expected " + std::to_string(expected) +
                            " items, got " + std::to_string(got));
  }
}

tt::Trades trades(const std::optional<In<std::uint32_t>>& series, const In<std::int64_t>& ts,
                  const double* price, const double* size, const double* side,
                  std::int64_t interval) {
  if (interval <= 0) {
    throw tt::ArgumentError("interval: expected a positive number of ns, got " +
                            std::to_string(interval));
  }
  if (series) check_length("series", series->shape(0), ts.shape(0));
  return {series ? series->data() : nullptr, ts.data(), price, size, side, ts.shape(0), interval};
}

}  // namespace

void bind_time_bars(nb::module_& m) {
  m.def(
      "count_time_bar_runs",
      [](std::optional<In<std::uint32_t>> series, In<std::int64_t> ts, std::int64_t interval) {
        const tt::Trades t = trades(series, ts, nullptr, nullptr, nullptr, interval);
        nb::gil_scoped_release release;
        const tt::RunCounts c = tt::count_runs(t);
        return std::make_tuple(c.runs, c.long_runs, c.long_rows);
      },
      "series"_a.none(), "ts"_a, "interval"_a,
      "(bars, bars of several trades, trades in those) of trades sorted by (series, ts):\n"
      "the runs of equal (series, ts - ts mod interval). The GIL is released.");
  m.def(
      "time_bars",
      [](std::optional<In<std::uint32_t>> series, In<std::int64_t> ts, In<double> price,
         In<double> size, std::optional<In<double>> side, std::int64_t interval,
         std::optional<Out<std::uint32_t>> series_out, Out<std::int64_t> bar,
         Out<std::int64_t> ts_first, Out<std::int64_t> ts_last, Out<double> open, Out<double> high,
         Out<double> low, Out<double> close, Out<std::uint64_t> count, Out<double> volume,
         Out<double> dollar, Out<double> signed_volume, Out<std::int64_t> long_runs,
         Out<std::int64_t> long_starts, Out<double> long_volume, Out<double> long_dollar,
         Out<double> long_signed) {
        const std::size_t n = ts.shape(0);
        check_length("price", price.shape(0), n);
        check_length("size", size.shape(0), n);
        if (side) check_length("side", side->shape(0), n);
        if (series.has_value() != series_out.has_value()) {
          throw tt::ArgumentError("series_out: expected one exactly when series is given");
        }
        const tt::Trades t =
            trades(series, ts, price.data(), size.data(), side ? side->data() : nullptr, interval);
        // The arrays' sizes: the kernel checks the trades' bars against them as it goes.
        const tt::RunCounts c{bar.shape(0), long_runs.shape(0), long_volume.shape(0)};
        if (series_out) check_length("series_out", series_out->shape(0), c.runs);
        for (auto [name, got] :
             {std::make_pair("ts_first", ts_first.shape(0)),
              std::make_pair("ts_last", ts_last.shape(0)), std::make_pair("open", open.shape(0)),
              std::make_pair("high", high.shape(0)), std::make_pair("low", low.shape(0)),
              std::make_pair("close", close.shape(0)), std::make_pair("count", count.shape(0)),
              std::make_pair("volume", volume.shape(0)), std::make_pair("dollar", dollar.shape(0)),
              std::make_pair("signed_volume", signed_volume.shape(0))}) {
          check_length(name, got, c.runs);
        }
        check_length("long_starts", long_starts.shape(0), c.long_runs);
        check_length("long_dollar", long_dollar.shape(0), c.long_rows);
        check_length("long_signed", long_signed.shape(0), c.long_rows);
        const tt::BarColumns out{series_out ? series_out->data() : nullptr,
                                 bar.data(),
                                 ts_first.data(),
                                 ts_last.data(),
                                 open.data(),
                                 high.data(),
                                 low.data(),
                                 close.data(),
                                 count.data(),
                                 volume.data(),
                                 dollar.data(),
                                 signed_volume.data(),
                                 long_runs.data(),
                                 long_starts.data(),
                                 long_volume.data(),
                                 long_dollar.data(),
                                 long_signed.data()};
        nb::gil_scoped_release release;
        tt::time_bars(t, c, out);
      },
      "series"_a.none(), "ts"_a, "price"_a, "size"_a, "side"_a.none(), "interval"_a,
      "series_out"_a.none(), "bar"_a, "ts_first"_a, "ts_last"_a, "open"_a, "high"_a, "low"_a,
      "close"_a, "count"_a, "volume"_a, "dollar"_a, "signed_volume"_a, "long_runs"_a,
      "long_starts"_a, "long_volume"_a, "long_dollar"_a, "long_signed"_a,
      "Fill one row per time bar of trades sorted by (series, ts), the arrays sized by\n"
      "count_time_bar_runs (see ticktensor.kernels.time_bars). The GIL is released.");
}

}  // namespace ttpy
