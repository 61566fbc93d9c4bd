// Live features: per-symbol state that turns quotes and trades, pushed one at a time or in
// batches, into the feature rows ingest stores, bit for bit (docs/live.md). Plain C++: no
// Python; embed it by linking ticktensor_core.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tt::live {

// The kinds of events the engine takes.
enum class EventKind : std::uint8_t { quote = 0, trade = 1, bar = 2, book = 3 };

// Values an event carries (the unused ones are ignored).
inline constexpr std::size_t kValues = 8;
// Levels of an MBP-10 book event.
inline constexpr std::size_t kDepth = 10;

// One event. Quotes: v = bid_px, ask_px, bid_sz, ask_sz. Trades: v = price, size, side
// (-1, 0, +1). Bars (the ohlcv clock): v = open, high, low, close, volume, trade_count,
// vwap, interval_ns, and `ts` is the bar's close time (ts_event + interval_ns). MBP-10 book events:
// v = price, size, side, action (0..5 for A C M T F R; another number breaks action_domain) and
// `levels` the book after it: bid_px_00..09, ask_px_00..09, bid_sz_00..09, ask_sz_00..09
// (4 * kDepth values, read during push only). NaN stands for a null
// (an absent price). `key` tells apart events equal in every other field (a sequence
// number or a hash of the columns the features do not read): two events of one kind,
// symbol and time are duplicates when their values and keys are all equal.
struct Event {
  std::int64_t ts;
  std::uint32_t symbol;
  EventKind kind;
  double v[kValues];
  std::uint64_t key;
  const double* levels;  // book events only
};

// Why an event was refused (ingest's quarantine rules; `late` because a row already emitted
// cannot take an event stamped before it).
enum class Verdict : std::uint8_t {
  row = 0,        // accepted; it gave a feature row
  joined = 1,     // accepted; it updates the state rows read (no row of its own)
  late = 2,       // stamped before the symbol's latest accepted event
  duplicate = 3,  // equal to an accepted event of its kind, symbol and time
  not_null = 4,   // a required field is null (trades: price, size, side)
  finite = 5,     // a price or size is infinite
  positive_price = 6,
  non_negative_size = 7,
  side_domain = 8,
  crossed_book = 9,
  unknown_symbol = 10,
  positive_trade_size = 11,  // a trade of size 0
  ohlc_range = 12,           // low above min(open, close) or high below max(open, close)
  action_domain = 13,
  level_order = 14,  // a bid above a shallower bid, or an ask below a shallower ask
  other_kind = 15,   // a kind the clock does not read (e.g. quotes on the mbp10 clock)
};
inline constexpr std::size_t kVerdicts = 16;

enum class Clock : std::uint8_t { quotes = 0, trades = 1, ohlcv = 2, mbp10 = 3, bars = 4 };

// The formula of a feature (docs/features.md); the parameter is in FeatureOp.
enum class Op : std::uint8_t {
  mid,
  bid_px,
  ask_px,
  price,
  spread,
  spread_bps,
  imbalance,
  log1p_bid_sz,
  log1p_ask_sz,
  ret,          // px[i] / px[i-N] - 1
  log_ret,      // log(px[i] / px[i-N])
  mid_log_ret,  // log(mid[i] / mid[i-1])
  volatility,   // sqrt of the last N squared 1-row log returns, added oldest first
  volume,       // trade quantities over a window (unit, size)
  dollar_volume,
  trade_count,
  signed_volume,
  vwap_distance,
  time_of_day,
  last_trade_signed_size,
  open,  // the bar's columns (ohlcv clock)
  high,
  low,
  close,
  vwap,
  range_bps,
  depth_imbalance,  // over the sizes of the first `size` levels (mbp10 clock)
};

// A trade window: the row's own interval, the last N rows, or the last `size` ns.
enum class Window : std::uint8_t { own = 0, rows = 1, ns = 2 };

struct FeatureOp {
  Op op;
  Window window;      // trade quantities and vwap_distance only
  std::int64_t size;  // N for ret/log_ret/volatility and row windows; ns for time windows
};

// How sessions (ingest's partitions) are cut: every session_ns, or by UTC calendar month or
// year of ts_event.
enum class SessionKind : std::uint8_t { fixed = 0, month = 1, year = 2 };

// How the bars clock cuts trades: by time (Config::bar_ns), or every `bar_threshold` of
// volume or notional (price * size) traded since the session's start.
enum class BarKind : std::uint8_t { time = 0, volume = 1, dollar = 2 };

struct Config {
  Clock clock;
  std::vector<FeatureOp> features;
  std::size_t history;       // float32 rows kept per symbol for windows (0: none)
  std::int64_t session_ns;   // a symbol's state restarts when ts_event / session_ns (floored)
                             // grows: ingest's sessions are UTC days (0: one session)...
  SessionKind session_kind;  // ...or calendar months or years (UTC) of ts_event
  std::int64_t bar_ns;       // the bars clock: trades cut into time bars of this length, or
  BarKind bar_kind;          // into bars of `bar_threshold` volume or dollars traded
  double bar_threshold;
};

// The state of one symbol: everything a row needs from the symbol's past events.
struct SymbolState {
  std::int64_t session;                        // the session of the latest event (INT64_MIN: none)
  std::int64_t last_ts;                        // latest accepted event (INT64_MIN: none)
  std::int64_t rows;                           // rows emitted
  std::int64_t trades;                         // trades accepted
  double bid, ask, bid_sz, ask_sz;             // the last quote (NaN: none yet or null)
  double last_signed;                          // side * size of the last trade (0 before any)
  std::array<double, 4> cum;                   // volume, dollar volume, trade count, signed volume
  std::vector<double> px;                      // ring of the last rows' prices (returns)
  double prev_mid;                             // the previous row's mid (mid_log_return)
  std::vector<double> squares;                 // ring of the last rows' squared log returns
  std::vector<std::array<double, 4>> row_cum;  // ring of cum as of the last rows
  // Trades (quotes clock) or rows (trades clock) of the time windows, oldest first from
  // `mark_head`; per time window the next mark not yet passed and the cum as of it.
  std::vector<std::int64_t> mark_ts;
  std::vector<std::array<double, 4>> mark_cum;
  std::size_t mark_head;
  std::vector<std::size_t> passed;
  std::vector<std::array<double, 4>> base;
  // Events at `last_ts`, per kind, for the duplicate rule: values and key.
  std::array<std::vector<std::array<double, kValues + 1>>, 4> at_last_ts;
  std::vector<float> history;  // ring of the last `history` rows, float32
  // The bars clock's open bar (bar_open INT64_MIN: none): first, highest, lowest and last
  // price, and its trades' quantities, summed as numpy's add.reduceat when it closes.
  std::int64_t bar_open;  // time bars: the open; volume/dollar bars: the bar's number
  double bar_first, bar_high, bar_low, bar_last;
  std::vector<double> bar_size, bar_dollar, bar_signed;
  // Volume/dollar bars: the quantity traded in the session so far, the open bar's first
  // and last trade times, and the book as of its last trade.
  double bar_total;
  std::int64_t bar_first_ts, bar_last_ts;
  std::array<double, 4> bar_book;
};

class Engine {
 public:
  explicit Engine(Config config, std::size_t symbols = 0);

  const Config& config() const noexcept { return config_; }
  std::size_t features() const noexcept { return config_.features.size(); }
  std::size_t symbols() const noexcept { return states_.size(); }

  // A new symbol with no events yet; returns its number.
  std::uint32_t add_symbol();

  // Take one event; on Verdict::row, `row` (features() doubles) holds a new row, stamped
  // last_row_ts(). On the bars clock the row is the bar the event closed (an event at or
  // after its close), and the event's own verdict is counted (a refused event may close a
  // bar too: a session's next day does).
  Verdict push(const Event& event, double* row);
  std::int64_t last_row_ts() const noexcept { return row_ts_; }

  // Take `n` events in order: rows go to `rows` (n * features() doubles at most, row after
  // row), the event each row came from to `row_event` and its time to `row_ts`, every
  // event's verdict to `verdicts`. Returns the number of rows.
  std::size_t push_batch(const Event* events, std::size_t n, double* rows, std::int64_t* row_event,
                         std::int64_t* row_ts, Verdict* verdicts);

  // The bars clock: close every open bar (the data ended), writing their rows, symbols and
  // times (symbols() rows at most). Returns the number of rows; 0 on other clocks.
  std::size_t flush(double* rows, std::uint32_t* row_symbol, std::int64_t* row_ts);

  // Counts of verdicts so far, by Verdict value.
  const std::array<std::uint64_t, kVerdicts>& counts() const noexcept { return counts_; }

  // The last `w` rows of `symbol` (w <= history, w <= rows so far), oldest first, into `out`.
  void window(std::uint32_t symbol, std::size_t w, float* out) const;
  std::int64_t rows(std::uint32_t symbol) const;

  // The state of `symbol` as plain words (int64 and float64), and back; the layout is
  // private to this version of the engine (the config must match).
  void save(std::uint32_t symbol, std::vector<std::int64_t>& ints,
            std::vector<double>& doubles) const;
  void load(std::uint32_t symbol, const std::int64_t* ints, std::size_t n_ints,
            const double* doubles, std::size_t n_doubles);
  void set_counts(const std::array<std::uint64_t, kVerdicts>& counts) { counts_ = counts; }

 private:
  Verdict check(const Event& e, SymbolState& s) const;
  static Verdict check_book(const Event& e);
  void take_quantities(const std::array<double, 4>& x, std::int64_t ts, SymbolState& s);
  std::array<double, 4> quantities(const Event& e) const;
  void compute_row(const Event& e, SymbolState& s, double* row,
                   const std::array<double, 4>* own_given = nullptr);
  void close_bar(SymbolState& s, double* row);
  bool take_bar_trade(const Event& e, SymbolState& s, bool closed, double* row);
  bool solid(const SymbolState& s) const;
  void pass_marks(SymbolState& s, std::int64_t ts);
  std::array<double, 4> window_sum(const SymbolState& s, const FeatureOp& f, std::size_t slot,
                                   const std::array<double, 4>& own) const;
  SymbolState fresh() const;

  Config config_;
  std::vector<SymbolState> states_;
  std::array<std::uint64_t, kVerdicts> counts_{};
  // Sizes derived from the config.
  std::size_t px_ring_ = 0;                 // max N of ret/log_ret, + 1
  std::size_t square_ring_ = 0;             // max N of volatility
  std::size_t row_ring_ = 0;                // max N of row windows, + 1
  std::vector<std::int64_t> durations_;     // distinct time windows
  std::vector<std::size_t> duration_slot_;  // per feature: its time window's slot
  std::int64_t longest_ = 0;
  std::int64_t row_ts_ = 0;
};

// Push `n` events one by one through Engine::push, writing each push's wall time in ns
// (steady clock) to `ns`; `row` takes each row (features() doubles). For latency figures.
void push_timed(Engine& engine, const Event* events, std::size_t n, std::int64_t* ns, double* row);

}  // namespace tt::live
