// Embedding the live feature engine in C++ (no Python): a quotes-clock spec, events pushed
// one at a time, each row printed as it comes.
//
//   g++ -std=c++17 -O2 -ffp-contract=off -I native/include examples/live_embed.cpp \
//       native/src/live_features.cpp -o live_embed && ./live_embed
//
// Reads events from stdin, one per line: `q TS SYMBOL BID ASK BID_SZ ASK_SZ` or
// `t TS SYMBOL PRICE SIZE SIDE` (SYMBOL a number; `nan` for a null), and prints each row's
// features (mid, spread_bps, log_return, volatility_20, volume_1s, vwap_distance_5, time_of_day)
// with 17 significant digits.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "ticktensor/live_features.hpp"

int main() {
  using namespace tt::live;
  Config config{Clock::quotes,
                {{Op::mid, Window::own, 0},
                 {Op::spread_bps, Window::own, 0},
                 {Op::log_ret, Window::own, 1},
                 {Op::volatility, Window::own, 20},
                 {Op::volume, Window::ns, 1'000'000'000},
                 {Op::vwap_distance, Window::rows, 5},
                 {Op::time_of_day, Window::own, 0}},
                0,
                86'400'000'000'000};
  Engine engine(config);
  std::vector<double> row(engine.features());
  std::string kind;
  std::int64_t ts = 0;
  std::uint32_t symbol = 0;
  while (std::cin >> kind >> ts >> symbol) {
    while (engine.symbols() <= symbol) engine.add_symbol();
    Event e{ts, symbol, kind == "q" ? EventKind::quote : EventKind::trade, {}, 0, nullptr};
    const int values = kind == "q" ? 4 : 3;
    for (int k = 0; k < values; ++k) {
      std::string text;
      std::cin >> text;
      e.v[k] = text == "nan" ? std::numeric_limits<double>::quiet_NaN() : std::stod(text);
    }
    if (engine.push(e, row.data()) != Verdict::row) continue;
    for (std::size_t j = 0; j < row.size(); ++j) {
      std::printf(j ? " %.17g" : "%.17g", row[j]);
    }
    std::printf("\n");
  }
  return 0;
}
