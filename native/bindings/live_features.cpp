// Python binding of tt::live::Engine: events in as numpy columns, feature rows out into
// caller-allocated arrays, GIL released around the engine's work.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "ticktensor/errors.hpp"
#include "ticktensor/live_features.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ttpy {

namespace {

template <typename T>
using In = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <typename T>
using In2 = nb::ndarray<const T, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Out = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Out2 = nb::ndarray<T, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Int64Array = nb::ndarray<nb::numpy, std::int64_t, nb::ndim<1>>;
using DoubleArray = nb::ndarray<nb::numpy, double, nb::ndim<1>>;

void expect(const char* name, std::size_t got, std::size_t expected) {
  if (got != expected) {
    throw tt::ArgumentError(std::string(name) + ": expected " + std::to_string(expected) +
                            " items, got " + std::to_string(got));
  }
}

// The engine behind one lock: a released GIL lets two Python threads call at once.
class LiveEngine {
 public:
  LiveEngine(std::uint8_t clock, In<std::uint8_t> ops, In<std::uint8_t> windows,
             In<std::int64_t> sizes, std::size_t history, std::int64_t session_ns,
             std::uint8_t session_kind, std::int64_t bar_ns, std::uint8_t bar_kind,
             double bar_threshold, std::size_t symbols)
      : engine_(config(clock, ops, windows, sizes, history, session_ns, session_kind, bar_ns,
                       bar_kind, bar_threshold),
                symbols) {}

  std::size_t features() const { return engine_.features(); }
  std::size_t symbols() const { return engine_.symbols(); }

  std::uint32_t add_symbol() {
    std::lock_guard<std::mutex> lock(mutex_);
    return engine_.add_symbol();
  }

  std::uint8_t push(std::uint8_t kind, std::uint32_t symbol, std::int64_t ts, In<double> values,
                    std::uint64_t key, Out<double> row, std::optional<In<double>> levels) {
    expect("row", row.shape(0), engine_.features());
    if (levels) expect("levels", levels->shape(0), 4 * tt::live::kDepth);
    if (kind == static_cast<std::uint8_t>(tt::live::EventKind::book) && !levels) {
      throw tt::ArgumentError("levels: an MBP-10 event needs its 40 level values");
    }
    if (values.shape(0) > tt::live::kValues) {
      throw tt::ArgumentError("values: expected at most " + std::to_string(tt::live::kValues) +
                              " items, got " + std::to_string(values.shape(0)));
    }
    tt::live::Event e{ts, symbol, event_kind(kind), {}, key, levels ? levels->data() : nullptr};
    std::copy(values.data(), values.data() + values.shape(0), e.v);
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<std::uint8_t>(engine_.push(e, row.data()));
  }

  std::size_t push_batch(In<std::uint8_t> kind, In<std::uint32_t> symbol, In<std::int64_t> ts,
                         In2<double> values, In<std::uint64_t> key, Out2<double> rows,
                         Out<std::int64_t> row_event, Out<std::int64_t> row_ts,
                         Out<std::uint8_t> verdicts, std::optional<In2<double>> levels) {
    const std::size_t n = ts.shape(0);
    check_events(kind, symbol, ts, values, key, levels);
    expect("rows", rows.shape(0), n);
    expect("rows' columns", rows.shape(1), engine_.features());
    expect("row_event", row_event.shape(0), n);
    expect("row_ts", row_ts.shape(0), n);
    expect("verdicts", verdicts.shape(0), n);
    nb::gil_scoped_release release;
    const std::vector<tt::live::Event> events = gather(kind, symbol, ts, values, key, levels);
    std::lock_guard<std::mutex> lock(mutex_);
    return engine_.push_batch(events.data(), n, rows.data(), row_event.data(), row_ts.data(),
                              reinterpret_cast<tt::live::Verdict*>(verdicts.data()));
  }

  void push_timed(In<std::uint8_t> kind, In<std::uint32_t> symbol, In<std::int64_t> ts,
                  In2<double> values, In<std::uint64_t> key, Out<std::int64_t> ns,
                  std::optional<In2<double>> levels) {
    const std::size_t n = ts.shape(0);
    check_events(kind, symbol, ts, values, key, levels);
    expect("ns", ns.shape(0), n);
    nb::gil_scoped_release release;
    const std::vector<tt::live::Event> events = gather(kind, symbol, ts, values, key, levels);
    std::vector<double> row(engine_.features());
    std::lock_guard<std::mutex> lock(mutex_);
    tt::live::push_timed(engine_, events.data(), n, ns.data(), row.data());
  }

  std::size_t flush(Out2<double> rows, Out<std::uint32_t> row_symbol, Out<std::int64_t> row_ts) {
    const std::size_t n = engine_.symbols();
    expect("rows", rows.shape(0), n);
    expect("rows' columns", rows.shape(1), engine_.features());
    expect("row_symbol", row_symbol.shape(0), n);
    expect("row_ts", row_ts.shape(0), n);
    std::lock_guard<std::mutex> lock(mutex_);
    return engine_.flush(rows.data(), row_symbol.data(), row_ts.data());
  }

  std::vector<std::uint64_t> counts() {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto& c = engine_.counts();
    return {c.begin(), c.end()};
  }

  void set_counts(const std::vector<std::uint64_t>& counts) {
    expect("counts", counts.size(), tt::live::kVerdicts);
    std::array<std::uint64_t, tt::live::kVerdicts> c{};
    for (std::size_t k = 0; k < c.size(); ++k) c[k] = counts[k];
    std::lock_guard<std::mutex> lock(mutex_);
    engine_.set_counts(c);
  }

  std::int64_t rows(std::uint32_t symbol) {
    std::lock_guard<std::mutex> lock(mutex_);
    return engine_.rows(symbol);
  }

  void window(std::uint32_t symbol, Out2<float> out) {
    expect("out's columns", out.shape(1), engine_.features());
    std::lock_guard<std::mutex> lock(mutex_);
    engine_.window(symbol, out.shape(0), out.data());
  }

  std::tuple<Int64Array, DoubleArray> save(std::uint32_t symbol) {
    auto* ints = new std::vector<std::int64_t>();
    auto* doubles = new std::vector<double>();
    nb::capsule own_ints(
        ints, [](void* p) noexcept { delete static_cast<std::vector<std::int64_t>*>(p); });
    nb::capsule own_doubles(doubles,
                            [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
    {
      std::lock_guard<std::mutex> lock(mutex_);
      engine_.save(symbol, *ints, *doubles);
    }
    return {Int64Array(ints->data(), {ints->size()}, own_ints),
            DoubleArray(doubles->data(), {doubles->size()}, own_doubles)};
  }

  void load(std::uint32_t symbol, In<std::int64_t> ints, In<double> doubles) {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_.load(symbol, ints.data(), ints.shape(0), doubles.data(), doubles.shape(0));
  }

 private:
  static tt::live::EventKind event_kind(std::uint8_t kind) {
    if (kind > 3) {
      throw tt::ArgumentError("kind: expected 0 (quote), 1 (trade), 2 (bar) or 3 (book), got " +
                              std::to_string(kind));
    }
    return static_cast<tt::live::EventKind>(kind);
  }

  static tt::live::Config config(std::uint8_t clock, const In<std::uint8_t>& ops,
                                 const In<std::uint8_t>& windows, const In<std::int64_t>& sizes,
                                 std::size_t history, std::int64_t session_ns,
                                 std::uint8_t session_kind, std::int64_t bar_ns,
                                 std::uint8_t bar_kind, double bar_threshold) {
    if (session_kind > 2) {
      throw tt::ArgumentError("session_kind: expected 0 (fixed), 1 (month) or 2 (year), got " +
                              std::to_string(session_kind));
    }
    if (bar_kind > 2) {
      throw tt::ArgumentError("bar_kind: expected 0 (time), 1 (volume) or 2 (dollar), got " +
                              std::to_string(bar_kind));
    }
    if (clock > 4) {
      throw tt::ArgumentError(
          "clock: expected 0 (quotes), 1 (trades), 2 (ohlcv), 3 (mbp10) or 4 (bars), got " +
          std::to_string(clock));
    }
    const std::size_t f = ops.shape(0);
    expect("windows", windows.shape(0), f);
    expect("sizes", sizes.shape(0), f);
    tt::live::Config c;
    c.clock = static_cast<tt::live::Clock>(clock);
    c.history = history;
    c.session_ns = session_ns;
    c.session_kind = static_cast<tt::live::SessionKind>(session_kind);
    c.bar_ns = bar_ns;
    c.bar_kind = static_cast<tt::live::BarKind>(bar_kind);
    c.bar_threshold = bar_threshold;
    for (std::size_t j = 0; j < f; ++j) {
      if (ops.data()[j] > static_cast<std::uint8_t>(tt::live::Op::depth_imbalance) ||
          windows.data()[j] > 2) {
        throw tt::ArgumentError("feature " + std::to_string(j) + ": unknown op or window");
      }
      c.features.push_back({static_cast<tt::live::Op>(ops.data()[j]),
                            static_cast<tt::live::Window>(windows.data()[j]), sizes.data()[j]});
    }
    return c;
  }

  static void check_events(const In<std::uint8_t>& kind, const In<std::uint32_t>& symbol,
                           const In<std::int64_t>& ts, const In2<double>& values,
                           const In<std::uint64_t>& key, const std::optional<In2<double>>& levels) {
    const std::size_t n = ts.shape(0);
    expect("kind", kind.shape(0), n);
    if (levels) {
      expect("levels", levels->shape(0), n);
      expect("levels' columns", levels->shape(1), 4 * tt::live::kDepth);
    }
    expect("symbol", symbol.shape(0), n);
    expect("values", values.shape(0), n);
    if (values.shape(1) > tt::live::kValues) {
      throw tt::ArgumentError("values: expected at most " + std::to_string(tt::live::kValues) +
                              " columns, got " + std::to_string(values.shape(1)));
    }
    expect("key", key.shape(0), n);
    for (std::size_t k = 0; k < n; ++k) {
      if (event_kind(kind.data()[k]) == tt::live::EventKind::book && !levels) {
        throw tt::ArgumentError("levels: event " + std::to_string(k) +
                                " is an MBP-10 event; pass the levels of every event");
      }
    }
  }

  static std::vector<tt::live::Event> gather(const In<std::uint8_t>& kind,
                                             const In<std::uint32_t>& symbol,
                                             const In<std::int64_t>& ts, const In2<double>& values,
                                             const In<std::uint64_t>& key,
                                             const std::optional<In2<double>>& levels) {
    const std::size_t n = ts.shape(0);
    std::vector<tt::live::Event> events(n);
    const double* book = levels ? levels->data() : nullptr;
    const std::size_t width = values.shape(1);
    const double* v = values.data();
    for (std::size_t k = 0; k < n; ++k) {
      tt::live::Event& e = events[k];
      e.ts = ts.data()[k];
      e.symbol = symbol.data()[k];
      e.kind = static_cast<tt::live::EventKind>(kind.data()[k]);
      std::copy(v + width * k, v + width * (k + 1), e.v);
      std::fill(e.v + width, e.v + tt::live::kValues, 0.0);
      e.key = key.data()[k];
      e.levels = book ? book + 4 * tt::live::kDepth * k : nullptr;
    }
    return events;
  }

  tt::live::Engine engine_;
  std::mutex mutex_;
};

}  // namespace

void bind_live_features(nb::module_& m) {
  nb::class_<LiveEngine>(m, "LiveEngine",
                         "Per-symbol live feature state (see ticktensor.live); not for direct use.")
      .def(nb::init<std::uint8_t, In<std::uint8_t>, In<std::uint8_t>, In<std::int64_t>, std::size_t,
                    std::int64_t, std::uint8_t, std::int64_t, std::uint8_t, double, std::size_t>(),
           "clock"_a, "ops"_a, "windows"_a, "sizes"_a, "history"_a, "session_ns"_a,
           "session_kind"_a, "bar_ns"_a, "bar_kind"_a, "bar_threshold"_a, "symbols"_a)
      .def_prop_ro("features", &LiveEngine::features, "Number of features per row.")
      .def_prop_ro("symbols", &LiveEngine::symbols, "Number of symbols.")
      .def("add_symbol", &LiveEngine::add_symbol, "A new symbol; returns its number.")
      .def("push", &LiveEngine::push, "kind"_a, "symbol"_a, "ts"_a, "values"_a, "key"_a, "row"_a,
           "levels"_a.none() = nb::none(),
           "Take one event; returns its verdict (0: `row` holds a new row).")
      .def("push_batch", &LiveEngine::push_batch, "kind"_a, "symbol"_a, "ts"_a, "values"_a, "key"_a,
           "rows"_a, "row_event"_a, "row_ts"_a, "verdicts"_a, "levels"_a.none() = nb::none(),
           "Take events in order; returns the number of rows written. The GIL is released.")
      .def("push_timed", &LiveEngine::push_timed, "kind"_a, "symbol"_a, "ts"_a, "values"_a, "key"_a,
           "ns"_a, "levels"_a.none() = nb::none(),
           "Take events one by one, writing each push's time in ns. The GIL is released.")
      .def("flush", &LiveEngine::flush, "rows"_a, "row_symbol"_a, "row_ts"_a,
           "The bars clock: close every open bar into rows[:m]; returns m.")
      .def("counts", &LiveEngine::counts, "Counts of verdicts so far, by verdict number.")
      .def("set_counts", &LiveEngine::set_counts, "counts"_a, "Restore the verdict counts.")
      .def("rows", &LiveEngine::rows, "symbol"_a, "Rows emitted for a symbol.")
      .def("window", &LiveEngine::window, "symbol"_a, "out"_a,
           "The symbol's last out.shape[0] rows, oldest first, into `out`.")
      .def("save", &LiveEngine::save, "symbol"_a, "A symbol's state as (int64, float64) words.")
      .def("load", &LiveEngine::load, "symbol"_a, "ints"_a, "doubles"_a,
           "Replace a symbol's state with words from save().");
}

}  // namespace ttpy
