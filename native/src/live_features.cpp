// Live features: the per-symbol state machine behind ticktensor.live. Every formula repeats
// the batch side's operations in the batch side's order (ingest/_feature_engine.py), so each
// value is the same double; keep this file compiled without floating-point contraction.
#include "ticktensor/live_features.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "ticktensor/errors.hpp"

namespace tt::live {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::int64_t kNsPerDay = 86'400LL * 1'000'000'000LL;
constexpr std::size_t kVolume = 0, kDollar = 1, kCount = 2, kSigned = 3;
constexpr std::int64_t kNoBar = std::numeric_limits<std::int64_t>::min();

// ts - ts mod size, the floored modulo: the epoch-aligned grid of time bars.
std::int64_t floor_to(std::int64_t ts, std::int64_t size) {
  std::int64_t r = ts % size;
  if (r < 0) r += size;
  return ts - r;
}

// The session of a time: fixed lengths, or the UTC month (year * 12 + month) or year.
std::int64_t session_of(std::int64_t ts, std::int64_t length, SessionKind kind) {
  constexpr std::int64_t day_ns = 86'400LL * 1'000'000'000LL;
  const std::int64_t size = kind == SessionKind::fixed ? length : day_ns;
  std::int64_t unit = ts / size;
  if (ts % size < 0) --unit;
  if (kind == SessionKind::fixed) return unit;
  // Days since 1970-01-01 to the civil year and month (Howard Hinnant's days_to_civil).
  const std::int64_t z = unit + 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  const std::int64_t month = mp < 10 ? mp + 3 : mp - 9;
  const std::int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  return kind == SessionKind::year ? year : year * 12 + (month - 1);
}

// numpy's pairwise summation (the float64 add loop of a reduction): 8 accumulators up to
// 128 terms, halves beyond.
double pairwise(const double* a, std::size_t n) {
  if (n < 8) {
    double res = 0.0;
    for (std::size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (std::size_t j = 0; j < 8; ++j) r[j] = a[j];
    std::size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (std::size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  std::size_t half = n / 2;
  half -= half % 8;
  return pairwise(a, half) + pairwise(a + half, n - half);
}

// np.add.reduceat over one run: its first term, plus the pairwise sum of the others.
double reduceat_sum(const std::vector<double>& x) {
  if (x.empty()) return 0.0;
  return x[0] + pairwise(x.data() + 1, x.size() - 1);
}

bool is_trade_quantity(Op op) {
  return op == Op::volume || op == Op::dollar_volume || op == Op::trade_count ||
         op == Op::signed_volume || op == Op::vwap_distance;
}

// polars' fill_null(1.0) on px / px.shift(n): NaN stands for null here (validated prices
// are finite and positive, so a NaN ratio comes only from a null price).
double filled_ratio(double num, double den) {
  const double r = num / den;
  return std::isnan(r) ? 1.0 : r;
}

// when(den == 0).then(0).otherwise(num / den)
double ratio_or_zero(double num, double den) { return den == 0.0 ? 0.0 : num / den; }

bool same(double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); }

std::size_t slot(std::int64_t row, std::size_t size) {
  return static_cast<std::size_t>(row % static_cast<std::int64_t>(size));
}

}  // namespace

Engine::Engine(Config config, std::size_t symbols) : config_(std::move(config)) {
  std::size_t returns = 0, volatility = 0, row_window = 0;
  for (const FeatureOp& f : config_.features) {
    if ((f.op == Op::ret || f.op == Op::log_ret || f.op == Op::volatility) && f.size < 1) {
      throw ArgumentError("live features: a row count must be >= 1, got " + std::to_string(f.size));
    }
    const bool timed = config_.bar_kind == BarKind::time;
    if (config_.clock == Clock::bars &&
        (timed ? config_.bar_ns <= 0 : !(config_.bar_threshold > 0.0))) {
      throw ArgumentError("live features: the bars clock needs a bar length or threshold > 0");
    }
    if (f.op == Op::depth_imbalance && (f.size < 1 || f.size > static_cast<std::int64_t>(kDepth))) {
      throw ArgumentError("live features: depth_imbalance levels must be 1.." +
                          std::to_string(kDepth) + ", got " + std::to_string(f.size));
    }
    if (f.op == Op::ret || f.op == Op::log_ret) {
      returns = std::max(returns, static_cast<std::size_t>(f.size));
    } else if (f.op == Op::volatility) {
      returns = std::max<std::size_t>(returns, 1);
      volatility = std::max(volatility, static_cast<std::size_t>(f.size));
    }
    std::size_t at = 0;
    if (is_trade_quantity(f.op) && f.window != Window::own) {
      if (f.size < 1) {
        throw ArgumentError("live features: a window must be >= 1, got " + std::to_string(f.size));
      }
      if (f.window == Window::rows) {
        row_window = std::max(row_window, static_cast<std::size_t>(f.size));
      } else {
        auto found = std::find(durations_.begin(), durations_.end(), f.size);
        at = static_cast<std::size_t>(found - durations_.begin());
        if (found == durations_.end()) durations_.push_back(f.size);
        longest_ = std::max(longest_, f.size);
      }
    }
    duration_slot_.push_back(at);
  }
  px_ring_ = returns + 1;
  square_ring_ = volatility;
  row_ring_ = row_window + 1;
  states_.assign(symbols, fresh());
}

SymbolState Engine::fresh() const {
  SymbolState s;
  s.session = std::numeric_limits<std::int64_t>::min();
  s.last_ts = std::numeric_limits<std::int64_t>::min();
  s.rows = 0;
  s.trades = 0;
  s.bid = s.ask = s.bid_sz = s.ask_sz = kNaN;
  s.last_signed = 0.0;
  s.cum = {0.0, 0.0, 0.0, 0.0};
  s.px.assign(px_ring_, 0.0);
  s.prev_mid = kNaN;
  s.squares.assign(square_ring_, 0.0);
  s.row_cum.assign(row_ring_, {0.0, 0.0, 0.0, 0.0});
  s.mark_head = 0;
  s.passed.assign(durations_.size(), 0);
  s.base.assign(durations_.size(), {0.0, 0.0, 0.0, 0.0});
  s.history.assign(config_.history * config_.features.size(), 0.0f);
  s.bar_open = kNoBar;
  s.bar_first = s.bar_high = s.bar_low = s.bar_last = kNaN;
  s.bar_total = 0.0;
  s.bar_first_ts = s.bar_last_ts = 0;
  s.bar_book = {kNaN, kNaN, kNaN, kNaN};
  return s;
}

std::uint32_t Engine::add_symbol() {
  states_.push_back(fresh());
  return static_cast<std::uint32_t>(states_.size() - 1);
}

Verdict Engine::check_book(const Event& e) {
  const double* v = e.v;
  if (e.levels == nullptr) throw ArgumentError("an MBP-10 event needs its levels");
  const double* bid_px = e.levels;
  const double* ask_px = e.levels + kDepth;
  const double* sizes = e.levels + 2 * kDepth;
  if (std::isnan(v[2]) || std::isnan(v[3])) return Verdict::not_null;  // side, action
  if (std::isinf(v[0]) || std::isinf(v[1])) return Verdict::finite;
  for (std::size_t k = 0; k < 4 * kDepth; ++k) {
    if (std::isinf(e.levels[k])) return Verdict::finite;
  }
  if (v[0] <= 0.0) return Verdict::positive_price;
  for (std::size_t k = 0; k < 2 * kDepth; ++k) {
    if (e.levels[k] <= 0.0) return Verdict::positive_price;
  }
  if (v[1] < 0.0) return Verdict::non_negative_size;
  for (std::size_t k = 0; k < 2 * kDepth; ++k) {
    if (sizes[k] < 0.0) return Verdict::non_negative_size;
  }
  if (v[2] != -1.0 && v[2] != 0.0 && v[2] != 1.0) return Verdict::side_domain;
  if (!(v[3] >= 0.0 && v[3] <= 5.0 && v[3] == std::floor(v[3]))) return Verdict::action_domain;
  if (bid_px[0] > ask_px[0]) return Verdict::crossed_book;
  // Each level against the last present shallower one (empty levels are skipped).
  double bid = bid_px[0], ask = ask_px[0];
  for (std::size_t k = 1; k < kDepth; ++k) {
    if (bid_px[k] > bid || ask_px[k] < ask) return Verdict::level_order;
    if (!std::isnan(bid_px[k])) bid = bid_px[k];
    if (!std::isnan(ask_px[k])) ask = ask_px[k];
  }
  return Verdict::row;
}

Verdict Engine::check(const Event& e, SymbolState& s) const {
  // The kind giving the clock's rows, and the one joined onto them (ohlcv: none).
  constexpr EventKind rows_of[] = {EventKind::quote, EventKind::trade, EventKind::bar,
                                   EventKind::book, EventKind::trade};
  constexpr EventKind joined_of[] = {EventKind::trade, EventKind::quote, EventKind::bar,
                                     EventKind::trade, EventKind::quote};
  const auto clock = static_cast<std::size_t>(config_.clock);
  const EventKind rows = rows_of[clock];
  if (e.kind != rows && e.kind != joined_of[clock]) return Verdict::other_kind;
  const double* v = e.v;
  if (e.kind == EventKind::quote) {
    for (std::size_t k = 0; k < 4; ++k) {
      if (std::isinf(v[k])) return Verdict::finite;
    }
    if (v[0] <= 0.0 || v[1] <= 0.0) return Verdict::positive_price;
    if (v[2] < 0.0 || v[3] < 0.0) return Verdict::non_negative_size;
    if (v[0] > v[1]) return Verdict::crossed_book;
  } else if (e.kind == EventKind::trade) {
    if (std::isnan(v[0]) || std::isnan(v[1]) || std::isnan(v[2])) return Verdict::not_null;
    if (std::isinf(v[0]) || std::isinf(v[1])) return Verdict::finite;
    if (v[0] <= 0.0) return Verdict::positive_price;
    if (v[1] < 0.0) return Verdict::non_negative_size;
    if (v[1] == 0.0) return Verdict::positive_trade_size;
    if (v[2] != -1.0 && v[2] != 0.0 && v[2] != 1.0) return Verdict::side_domain;
  } else if (e.kind == EventKind::book) {
    const Verdict broken = check_book(e);
    if (broken != Verdict::row) return broken;
  } else {
    for (std::size_t k = 0; k < 4; ++k) {
      if (std::isnan(v[k])) return Verdict::not_null;
    }
    for (std::size_t k = 0; k < 7; ++k) {
      if (std::isinf(v[k])) return Verdict::finite;
    }
    for (std::size_t k : {0, 1, 2, 3, 6}) {
      if (v[k] <= 0.0) return Verdict::positive_price;
    }
    if (v[4] < 0.0) return Verdict::non_negative_size;
    if (v[2] > std::min(v[0], v[3]) || v[1] < std::max(v[0], v[3])) return Verdict::ohlc_range;
  }
  if (e.ts < s.last_ts) return Verdict::late;
  const auto kind = static_cast<std::size_t>(e.kind);
  double key = 0.0;
  std::memcpy(&key, &e.key, sizeof(double));
  if (e.ts == s.last_ts) {
    for (const auto& seen : s.at_last_ts[kind]) {
      bool equal = std::memcmp(&seen[kValues], &key, sizeof(double)) == 0;
      for (std::size_t k = 0; equal && k < kValues; ++k) equal = same(seen[k], v[k]);
      if (equal) return Verdict::duplicate;
    }
  } else {
    for (auto& seen : s.at_last_ts) seen.clear();
    s.last_ts = e.ts;
  }
  std::array<double, kValues + 1> seen;
  std::copy(v, v + kValues, seen.begin());
  seen[kValues] = key;
  s.at_last_ts[kind].push_back(seen);
  return e.kind == rows ? Verdict::row : Verdict::joined;
}

std::array<double, 4> Engine::quantities(const Event& e) const {
  const double* v = e.v;
  if (e.kind == EventKind::trade) return {v[1], v[0] * v[1], 1.0, v[2] * v[1]};
  // A bar: its volume, vwap (else close) times volume, its trade count; no sides.
  const double price = std::isnan(v[6]) ? v[3] : v[6];
  return {v[4], price * v[4], v[5], kNaN};
}

void Engine::take_quantities(const std::array<double, 4>& x, std::int64_t ts, SymbolState& s) {
  // polars' cum_sum: a null (NaN here) adds nothing, and the row's own sum is null.
  std::array<double, 4> now;
  for (std::size_t q = 0; q < 4; ++q) {
    if (!std::isnan(x[q])) s.cum[q] = s.cum[q] + x[q];
    now[q] = std::isnan(x[q]) ? kNaN : s.cum[q];
  }
  s.last_signed = x[kSigned];
  ++s.trades;
  if (durations_.empty()) return;
  // Marks every time window has passed are no longer read: drop them now and then.
  const std::size_t oldest = *std::min_element(s.passed.begin(), s.passed.end());
  if (oldest > 1024 && oldest * 2 > s.mark_ts.size()) {
    const auto drop = static_cast<std::ptrdiff_t>(oldest);
    s.mark_ts.erase(s.mark_ts.begin(), s.mark_ts.begin() + drop);
    s.mark_cum.erase(s.mark_cum.begin(), s.mark_cum.begin() + drop);
    for (std::size_t& p : s.passed) p -= oldest;
  }
  s.mark_ts.push_back(ts);
  s.mark_cum.push_back(now);
}

void Engine::pass_marks(SymbolState& s, std::int64_t ts) {
  for (std::size_t k = 0; k < durations_.size(); ++k) {
    // The as-of join at ts - d: the cum of the last mark stamped at or before it.
    const std::int64_t edge = ts - durations_[k];
    std::size_t p = s.passed[k];
    while (p < s.mark_ts.size() && s.mark_ts[p] <= edge) {
      s.base[k] = s.mark_cum[p];
      ++p;
    }
    s.passed[k] = p;
  }
}

std::array<double, 4> Engine::window_sum(const SymbolState& s, const FeatureOp& f, std::size_t at,
                                         const std::array<double, 4>& own) const {
  const bool own_window = f.window == Window::own || (f.window == Window::rows && f.size == 1);
  if (own_window) return own;
  // The row's cum (NaN where its own quantity is null), minus the cum N rows back (0 before
  // the first row) or as of ts - d (0 before any, or where it is null: fill_null(0)).
  const std::array<double, 4>& now = s.row_cum[slot(s.rows, row_ring_)];
  std::array<double, 4> out{};
  for (std::size_t q = 0; q < 4; ++q) {
    double before = 0.0;
    if (f.window == Window::rows) {
      if (s.rows >= f.size) before = s.row_cum[slot(s.rows - f.size, row_ring_)][q];
    } else if (!std::isnan(s.base[at][q])) {
      before = s.base[at][q];
    }
    out[q] = now[q] - before;
  }
  return out;
}

void Engine::compute_row(const Event& e, SymbolState& s, double* row,
                         const std::array<double, 4>* own_given) {
  // The book clocks (quotes, mbp10) join trades; the others are their own trades or bars.
  const bool quotes = config_.clock == Clock::quotes || config_.clock == Clock::mbp10;
  const bool bars = config_.clock == Clock::ohlcv || config_.clock == Clock::bars;
  const std::int64_t i = s.rows;
  const double mid = (s.bid + s.ask) / 2;
  const double px = quotes ? mid : bars ? e.v[3] : e.v[0];
  // The row's own trade quantities: the quotes clock's interval since the previous row,
  // the trade or bar itself; and the cum as of the row.
  std::array<double, 4> own;
  std::array<double, 4> now = s.cum;
  if (quotes) {
    const std::array<double, 4> zero{0.0, 0.0, 0.0, 0.0};
    const auto& prev = i > 0 ? s.row_cum[slot(i - 1, row_ring_)] : zero;
    for (std::size_t q = 0; q < 4; ++q) own[q] = s.cum[q] - prev[q];
  } else {
    own = own_given != nullptr ? *own_given : quantities(e);
    for (std::size_t q = 0; q < 4; ++q) {
      if (std::isnan(own[q])) now[q] = kNaN;
    }
  }
  s.px[slot(i, px_ring_)] = px;
  s.row_cum[slot(i, row_ring_)] = now;
  pass_marks(s, e.ts);
  double log_ret_1 = 0.0;
  if (square_ring_ > 0) {
    const double ratio = i >= 1 ? filled_ratio(px, s.px[slot(i - 1, px_ring_)]) : 1.0;
    log_ret_1 = std::log(ratio);
    s.squares[slot(i, square_ring_)] = log_ret_1 * log_ret_1;
  }
  const std::size_t n = config_.features.size();
  for (std::size_t j = 0; j < n; ++j) {
    const FeatureOp& f = config_.features[j];
    double v = kNaN;
    switch (f.op) {
      case Op::mid:
        v = mid;
        break;
      case Op::bid_px:
        v = s.bid;
        break;
      case Op::ask_px:
        v = s.ask;
        break;
      case Op::price:
        v = e.v[0];
        break;
      case Op::spread:
        v = s.ask - s.bid;
        break;
      case Op::spread_bps:
        v = (s.ask - s.bid) / mid * 1e4;
        break;
      case Op::imbalance:
        v = ratio_or_zero(s.bid_sz - s.ask_sz, s.bid_sz + s.ask_sz);
        break;
      case Op::log1p_bid_sz:
        v = std::log1p(s.bid_sz);
        break;
      case Op::log1p_ask_sz:
        v = std::log1p(s.ask_sz);
        break;
      case Op::ret:
      case Op::log_ret: {
        const double ratio = i >= f.size ? filled_ratio(px, s.px[slot(i - f.size, px_ring_)]) : 1.0;
        v = f.op == Op::ret ? ratio - 1.0 : std::log(ratio);
        break;
      }
      case Op::mid_log_ret:
        v = std::log(i >= 1 ? filled_ratio(mid, s.prev_mid) : 1.0);
        break;
      case Op::volatility: {
        // 0 + r2[i-N+1] + ... + r2[i], oldest first; rows before the first add 0.
        double total = 0.0;
        const auto size = static_cast<std::int64_t>(square_ring_);
        for (std::int64_t k = f.size - 1; k >= 0; --k) {
          total = total + (i >= k ? s.squares[slot(i - k + size, square_ring_)] : 0.0);
        }
        v = std::sqrt(total);
        break;
      }
      case Op::volume:
      case Op::dollar_volume:
      case Op::trade_count:
      case Op::signed_volume: {
        const std::size_t q = static_cast<std::size_t>(f.op) - static_cast<std::size_t>(Op::volume);
        v = window_sum(s, f, duration_slot_[j], own)[q];
        break;
      }
      case Op::vwap_distance: {
        const auto w = window_sum(s, f, duration_slot_[j], own);
        v = w[kDollar] == 0.0 ? 0.0 : px * w[kVolume] / w[kDollar] - 1.0;
        break;
      }
      case Op::time_of_day:
        // polars divides an integer column by an integer literal as a multiplication by
        // the literal's reciprocal.
        v = static_cast<double>(e.ts % kNsPerDay) * (1.0 / static_cast<double>(kNsPerDay));
        break;
      case Op::last_trade_signed_size:
        v = quotes ? s.last_signed : e.v[2] * e.v[1];
        break;
      case Op::open:
      case Op::high:
      case Op::low:
      case Op::close:
        v = e.v[static_cast<std::size_t>(f.op) - static_cast<std::size_t>(Op::open)];
        break;
      case Op::vwap:
        v = e.v[6];
        break;
      case Op::range_bps:
        v = (e.v[1] - e.v[2]) / e.v[3] * 1e4;
        break;
      case Op::depth_imbalance: {
        // polars' sum_horizontal of the levels' sizes, nulls as 0, left to right.
        const double* bid_sz = e.levels + 2 * kDepth;
        const double* ask_sz = e.levels + 3 * kDepth;
        double bid = 0.0, ask = 0.0;
        for (std::int64_t k = 0; k < f.size; ++k) {
          bid = bid + (std::isnan(bid_sz[k]) ? 0.0 : bid_sz[k]);
          ask = ask + (std::isnan(ask_sz[k]) ? 0.0 : ask_sz[k]);
        }
        v = ratio_or_zero(bid - ask, bid + ask);
        break;
      }
    }
    row[j] = v;
  }
  s.prev_mid = mid;
  if (config_.history > 0) {
    float* out = s.history.data() + slot(i, config_.history) * n;
    for (std::size_t j = 0; j < n; ++j) out[j] = static_cast<float>(row[j]);
  }
  ++s.rows;
}

Verdict Engine::push(const Event& e, double* row) {
  if (e.symbol >= states_.size()) {
    ++counts_[static_cast<std::size_t>(Verdict::unknown_symbol)];
    return Verdict::unknown_symbol;
  }
  SymbolState& s = states_[e.symbol];
  const bool bars = config_.clock == Clock::bars;
  bool closed = false;  // the bars clock: the event closed the open bar
  const bool sessions = config_.session_ns > 0 || config_.session_kind != SessionKind::fixed;
  if (sessions && e.ts >= s.last_ts) {
    // A new session starts from nothing, as ingest computes each session on its own.
    const std::int64_t open =
        e.kind == EventKind::bar ? e.ts - static_cast<std::int64_t>(e.v[7]) : e.ts;
    const std::int64_t session = session_of(open, config_.session_ns, config_.session_kind);
    if (session > s.session) {
      // The previous session's last bar: a time bar closes; a volume or dollar bar short
      // of its threshold is dropped, as ingest drops it.
      if (bars && s.bar_open != kNoBar && (config_.bar_kind == BarKind::time || solid(s))) {
        close_bar(s, row);
        closed = true;
      }
      if (s.session != std::numeric_limits<std::int64_t>::min()) s = fresh();
      s.session = session;
    }
  }
  Verdict verdict = check(e, s);
  if (bars && verdict == Verdict::row) verdict = Verdict::joined;  // trades make bars
  ++counts_[static_cast<std::size_t>(verdict)];
  if (verdict != Verdict::row && verdict != Verdict::joined) return closed ? Verdict::row : verdict;
  if (bars && !closed && config_.bar_kind == BarKind::time && s.bar_open != kNoBar &&
      e.ts >= s.bar_open + config_.bar_ns) {
    close_bar(s, row);  // before the event: quotes join the bar as of strictly before its close
    closed = true;
  }
  if (e.kind == EventKind::quote) {
    s.bid = e.v[0];
    s.ask = e.v[1];
    s.bid_sz = e.v[2];
    s.ask_sz = e.v[3];
  } else if (e.kind == EventKind::book) {
    s.bid = e.levels[0];
    s.ask = e.levels[kDepth];
    s.bid_sz = e.levels[2 * kDepth];
    s.ask_sz = e.levels[3 * kDepth];
  } else if (bars && config_.bar_kind != BarKind::time) {
    closed = take_bar_trade(e, s, closed, row);
  } else if (bars) {
    const std::int64_t open = floor_to(e.ts, config_.bar_ns);
    if (s.bar_open == kNoBar) {
      s.bar_open = open;
      s.bar_first = s.bar_high = s.bar_low = e.v[0];
    }
    s.bar_high = std::fmax(s.bar_high, e.v[0]);
    s.bar_low = std::fmin(s.bar_low, e.v[0]);
    s.bar_last = e.v[0];
    s.bar_size.push_back(e.v[1]);
    s.bar_dollar.push_back(e.v[0] * e.v[1]);
    s.bar_signed.push_back(e.v[2] * e.v[1]);
  } else {
    take_quantities(quantities(e), e.ts, s);
  }
  if (verdict == Verdict::row) {
    compute_row(e, s, row);
    row_ts_ = e.ts;
  }
  return closed ? Verdict::row : verdict;
}

bool Engine::solid(const SymbolState& s) const {
  // Ingest keeps a session's last volume/dollar bar when its total reached the next
  // multiple: total >= (bar + 1) * threshold.
  return s.bar_total >= static_cast<double>(s.bar_open + 1) * config_.bar_threshold;
}

bool Engine::take_bar_trade(const Event& e, SymbolState& s, bool closed, double* row) {
  // A trade's bar is floor(traded before it / threshold): ingest's key, from the same
  // float64 running sum.
  const double quantity = config_.bar_kind == BarKind::volume ? e.v[1] : e.v[0] * e.v[1];
  const double before = s.bar_total;
  const auto key = static_cast<std::int64_t>(std::floor(before / config_.bar_threshold));
  if (s.bar_open != kNoBar && key != s.bar_open && !closed) {
    close_bar(s, row);  // a bar that reached its threshold only by rounding: closed now
    closed = true;
  }
  if (s.bar_open == kNoBar) {
    s.bar_open = key;
    s.bar_first = s.bar_high = s.bar_low = e.v[0];
    s.bar_first_ts = e.ts;
  }
  s.bar_high = std::fmax(s.bar_high, e.v[0]);
  s.bar_low = std::fmin(s.bar_low, e.v[0]);
  s.bar_last = e.v[0];
  s.bar_last_ts = e.ts;
  s.bar_size.push_back(e.v[1]);
  s.bar_dollar.push_back(e.v[0] * e.v[1]);
  s.bar_signed.push_back(e.v[2] * e.v[1]);
  s.bar_book = {s.bid, s.ask, s.bid_sz, s.ask_sz};  // quotes as of its last trade
  s.bar_total = before + quantity;
  const auto next = static_cast<std::int64_t>(std::floor(s.bar_total / config_.bar_threshold));
  if (next != s.bar_open && solid(s) && !closed) {
    close_bar(s, row);  // the trade that reached the threshold closes the bar
    closed = true;
  }
  return closed;
}

void Engine::close_bar(SymbolState& s, double* row) {
  const double count = static_cast<double>(s.bar_size.size());
  const double volume = reduceat_sum(s.bar_size);
  const double dollar = reduceat_sum(s.bar_dollar);
  const std::array<double, 4> own{volume, dollar, count, reduceat_sum(s.bar_signed)};
  const bool timed = config_.bar_kind == BarKind::time;
  Event bar{};
  bar.ts = timed ? s.bar_open + config_.bar_ns : s.bar_last_ts;
  bar.kind = EventKind::bar;
  const double vwap = volume > 0.0 ? dollar / volume : kNaN;
  const auto interval = timed ? config_.bar_ns : s.bar_last_ts - s.bar_first_ts;
  const double values[kValues] = {
      s.bar_first, s.bar_high, s.bar_low, s.bar_last,
      volume,      count,      vwap,      static_cast<double>(interval)};
  std::copy(values, values + kValues, bar.v);
  take_quantities(own, bar.ts, s);
  if (timed) {
    compute_row(bar, s, row, &own);
  } else {  // the book as of the bar's last trade
    const std::array<double, 4> now{s.bid, s.ask, s.bid_sz, s.ask_sz};
    s.bid = s.bar_book[0];
    s.ask = s.bar_book[1];
    s.bid_sz = s.bar_book[2];
    s.ask_sz = s.bar_book[3];
    compute_row(bar, s, row, &own);
    s.bid = now[0];
    s.ask = now[1];
    s.bid_sz = now[2];
    s.ask_sz = now[3];
  }
  row_ts_ = bar.ts;
  ++counts_[static_cast<std::size_t>(Verdict::row)];
  s.bar_open = kNoBar;
  s.bar_size.clear();
  s.bar_dollar.clear();
  s.bar_signed.clear();
}

std::size_t Engine::flush(double* rows, std::uint32_t* row_symbol, std::int64_t* row_ts) {
  if (config_.clock != Clock::bars) return 0;
  std::size_t m = 0;
  for (std::size_t k = 0; k < states_.size(); ++k) {
    SymbolState& s = states_[k];
    if (s.bar_open == kNoBar) continue;
    if (config_.bar_kind != BarKind::time && !solid(s)) {  // short of its threshold: dropped
      s.bar_open = kNoBar;
      s.bar_size.clear();
      s.bar_dollar.clear();
      s.bar_signed.clear();
      continue;
    }
    close_bar(s, rows + m * features());
    row_symbol[m] = static_cast<std::uint32_t>(k);
    row_ts[m++] = row_ts_;
  }
  return m;
}

std::size_t Engine::push_batch(const Event* events, std::size_t n, double* rows,
                               std::int64_t* row_event, std::int64_t* row_ts, Verdict* verdicts) {
  const std::size_t f = features();
  std::size_t m = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const Verdict v = push(events[k], rows + m * f);
    verdicts[k] = v;
    if (v == Verdict::row) {
      row_ts[m] = row_ts_;
      row_event[m++] = static_cast<std::int64_t>(k);
    }
  }
  return m;
}

std::int64_t Engine::rows(std::uint32_t symbol) const {
  if (symbol >= states_.size()) throw IndexError("symbol " + std::to_string(symbol) + " unknown");
  return states_[symbol].rows;
}

void Engine::window(std::uint32_t symbol, std::size_t w, float* out) const {
  const std::int64_t have = rows(symbol);
  if (w > config_.history || static_cast<std::int64_t>(w) > have) {
    throw IndexError("window of " + std::to_string(w) + " rows: symbol " + std::to_string(symbol) +
                     " has " + std::to_string(have) + " rows and the engine keeps " +
                     std::to_string(config_.history));
  }
  const std::size_t f = features();
  const SymbolState& s = states_[symbol];
  for (std::size_t r = 0; r < w; ++r) {
    const std::int64_t row = have - static_cast<std::int64_t>(w - r);
    std::memcpy(out + r * f, s.history.data() + slot(row, config_.history) * f, f * sizeof(float));
  }
}

void Engine::save(std::uint32_t symbol, std::vector<std::int64_t>& ints,
                  std::vector<double>& doubles) const {
  rows(symbol);  // checks the number
  const SymbolState& s = states_[symbol];
  const std::size_t head =
      s.passed.empty() ? s.mark_ts.size() : *std::min_element(s.passed.begin(), s.passed.end());
  ints = {s.session,
          s.last_ts,
          s.rows,
          s.trades,
          static_cast<std::int64_t>(s.mark_ts.size() - head),
          static_cast<std::int64_t>(s.at_last_ts[0].size()),
          static_cast<std::int64_t>(s.at_last_ts[1].size()),
          static_cast<std::int64_t>(s.at_last_ts[2].size()),
          static_cast<std::int64_t>(s.at_last_ts[3].size()),
          s.bar_open,
          static_cast<std::int64_t>(s.bar_size.size()),
          s.bar_first_ts,
          s.bar_last_ts};
  for (std::size_t p : s.passed) ints.push_back(static_cast<std::int64_t>(p - head));
  ints.insert(ints.end(), s.mark_ts.begin() + static_cast<std::ptrdiff_t>(head), s.mark_ts.end());
  doubles = {s.bid, s.ask, s.bid_sz, s.ask_sz, s.last_signed, s.prev_mid};
  doubles.insert(doubles.end(), s.cum.begin(), s.cum.end());
  doubles.insert(doubles.end(), s.px.begin(), s.px.end());
  doubles.insert(doubles.end(), s.squares.begin(), s.squares.end());
  auto put = [&doubles](const auto& begin, const auto& end) {
    for (auto it = begin; it != end; ++it) doubles.insert(doubles.end(), it->begin(), it->end());
  };
  put(s.row_cum.begin(), s.row_cum.end());
  put(s.mark_cum.begin() + static_cast<std::ptrdiff_t>(head), s.mark_cum.end());
  put(s.base.begin(), s.base.end());
  for (const auto& seen : s.at_last_ts) put(seen.begin(), seen.end());
  doubles.insert(doubles.end(), s.history.begin(), s.history.end());
  for (double v : {s.bar_first, s.bar_high, s.bar_low, s.bar_last, s.bar_total}) {
    doubles.push_back(v);
  }
  doubles.insert(doubles.end(), s.bar_book.begin(), s.bar_book.end());
  for (const auto* part : {&s.bar_size, &s.bar_dollar, &s.bar_signed}) {
    doubles.insert(doubles.end(), part->begin(), part->end());
  }
}

void Engine::load(std::uint32_t symbol, const std::int64_t* ints, std::size_t n_ints,
                  const double* doubles, std::size_t n_doubles) {
  rows(symbol);
  const std::size_t k = durations_.size();
  auto fail = [symbol](const std::string& what) {
    throw ArgumentError("live state of symbol " + std::to_string(symbol) + ": " + what +
                        " (a state saved by an engine of another spec?)");
  };
  // session, last_ts, rows, trades, marks, events at last_ts per kind, open bar and its trades
  constexpr std::size_t head = 13;
  if (n_ints < head + k) fail("too few int64 words");
  const auto marks = static_cast<std::size_t>(ints[4]);
  std::size_t at[4];
  for (std::size_t kind = 0; kind < 4; ++kind) at[kind] = static_cast<std::size_t>(ints[5 + kind]);
  const auto bar_trades = static_cast<std::size_t>(ints[10]);
  if (n_ints != head + k + marks) {
    fail("expected " + std::to_string(head + k + marks) + " int64 words");
  }
  const std::size_t expected = 10 + px_ring_ + square_ring_ + 4 * (row_ring_ + marks + k) +
                               (kValues + 1) * (at[0] + at[1] + at[2] + at[3]) +
                               config_.history * features() + 9 + 3 * bar_trades;
  if (n_doubles != expected) fail("expected " + std::to_string(expected) + " float64 words");
  SymbolState s = fresh();
  s.session = ints[0];
  s.last_ts = ints[1];
  s.rows = ints[2];
  s.trades = ints[3];
  for (std::size_t j = 0; j < k; ++j) {
    s.passed[j] = static_cast<std::size_t>(ints[head + j]);
    if (s.passed[j] > marks) fail("a time window passed more marks than it holds");
  }
  s.mark_ts.assign(ints + head + k, ints + head + k + marks);
  const double* d = doubles;
  s.bid = *d++;
  s.ask = *d++;
  s.bid_sz = *d++;
  s.ask_sz = *d++;
  s.last_signed = *d++;
  s.prev_mid = *d++;
  for (double& c : s.cum) c = *d++;
  for (double& v : s.px) v = *d++;
  for (double& v : s.squares) v = *d++;
  auto take4 = [&d](std::array<double, 4>& a) {
    for (double& v : a) v = *d++;
  };
  for (auto& a : s.row_cum) take4(a);
  s.mark_cum.resize(marks);
  for (auto& a : s.mark_cum) take4(a);
  for (auto& a : s.base) take4(a);
  for (std::size_t kind = 0; kind < 4; ++kind) {
    s.at_last_ts[kind].resize(at[kind]);
    for (auto& a : s.at_last_ts[kind]) {
      for (double& v : a) v = *d++;
    }
  }
  for (float& v : s.history) v = static_cast<float>(*d++);
  s.bar_open = ints[9];
  s.bar_first_ts = ints[11];
  s.bar_last_ts = ints[12];
  for (double* v : {&s.bar_first, &s.bar_high, &s.bar_low, &s.bar_last, &s.bar_total}) {
    *v = *d++;
  }
  for (double& v : s.bar_book) v = *d++;
  for (auto* part : {&s.bar_size, &s.bar_dollar, &s.bar_signed}) {
    part->assign(d, d + bar_trades);
    d += bar_trades;
  }
  states_[symbol] = std::move(s);
}

void push_timed(Engine& engine, const Event* events, std::size_t n, std::int64_t* ns, double* row) {
  using clock = std::chrono::steady_clock;
  for (std::size_t k = 0; k < n; ++k) {
    const auto start = clock::now();
    engine.push(events[k], row);
    ns[k] = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count();
  }
}

}  // namespace tt::live
