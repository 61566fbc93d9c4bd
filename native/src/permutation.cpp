// Scatter shuffle: parallel bucket draw, counting scatter, Fisher-Yates inside buckets.
#include "ticktensor/permutation.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ticktensor/errors.hpp"

namespace tt {

namespace {

// SplitMix64: seeds the per-stream generators from (seed, stream, bucket).
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// xoshiro256**: a fast generator with a 2^256 period, good for shuffling (not for secrets).
class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t stream, std::uint64_t sub) {
    std::uint64_t state = seed ^ (stream * 0xD1B54A32D192ED03ULL) ^ (sub * 0x8CB92BA72F3D8DD7ULL);
    for (auto& word : s_) word = splitmix64(state);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, bound) without modulo bias (Lemire's multiply-and-reject).
  std::uint64_t below(std::uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
    auto low = static_cast<std::uint64_t>(m);
    if (low < bound) {
      const std::uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

constexpr std::int64_t kBucketTarget = 1 << 15;  // indices per bucket: 256 KiB of int64
constexpr int kMaxBucketBits = 16;
constexpr std::int64_t kBlock = 1 << 20;  // indices drawn per task in steps 1 and 2

}  // namespace

void random_permutation(std::int64_t* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                        ThreadPool& pool) {
  if (n < 0) throw ArgumentError("random_permutation: n must be >= 0");
  if (n == 0) return;
  int bits = 0;
  while (bits < kMaxBucketBits && (n >> bits) > kBucketTarget) ++bits;
  const std::size_t buckets = std::size_t{1} << bits;

  // 1. Bucket of every index (top bits of one draw), counted per block of indices. Blocks
  //    have a fixed size and their own stream, so the draw runs in parallel and the result
  //    does not depend on the number of threads.
  const std::int64_t n_blocks = (n + kBlock - 1) / kBlock;
  std::vector<std::uint16_t> bucket(static_cast<std::size_t>(n));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n_blocks) * buckets, 0);
  pool.parallel_for(static_cast<std::size_t>(n_blocks), [&](std::size_t begin, std::size_t end) {
    for (std::size_t k = begin; k < end; ++k) {
      Rng rng(seed, stream, ~std::uint64_t{0} - k);
      std::int64_t* count = counts.data() + k * buckets;
      const auto lo = static_cast<std::int64_t>(k) * kBlock;
      const std::int64_t hi = std::min(n, lo + kBlock);
      for (std::int64_t i = lo; i < hi; ++i) {
        const auto b = bits == 0 ? 0 : static_cast<std::uint16_t>(rng.next() >> (64 - bits));
        bucket[static_cast<std::size_t>(i)] = b;
        ++count[b];
      }
    }
  });

  // 2. Bucket b starts after every smaller bucket; inside it, block k's indices follow
  //    those of blocks before k. Each block then scatters its indices (in index order).
  std::vector<std::int64_t> offset(buckets + 1, 0);
  std::vector<std::int64_t> cursor(static_cast<std::size_t>(n_blocks) * buckets);
  for (std::size_t b = 0; b < buckets; ++b) {
    std::int64_t at = offset[b];
    for (std::int64_t k = 0; k < n_blocks; ++k) {
      cursor[static_cast<std::size_t>(k) * buckets + b] = at;
      at += counts[static_cast<std::size_t>(k) * buckets + b];
    }
    offset[b + 1] = at;
  }
  pool.parallel_for(static_cast<std::size_t>(n_blocks), [&](std::size_t begin, std::size_t end) {
    for (std::size_t k = begin; k < end; ++k) {
      std::int64_t* next = cursor.data() + k * buckets;
      const auto lo = static_cast<std::int64_t>(k) * kBlock;
      const std::int64_t hi = std::min(n, lo + kBlock);
      for (std::int64_t i = lo; i < hi; ++i) out[next[bucket[static_cast<std::size_t>(i)]]++] = i;
    }
  });

  // 3. Fisher-Yates inside every bucket, each with its own stream.
  pool.parallel_for(buckets, [&](std::size_t begin, std::size_t end) {
    for (std::size_t b = begin; b < end; ++b) {
      Rng local(seed, stream, b);
      std::int64_t* first = out + offset[b];
      const std::int64_t size = offset[b + 1] - offset[b];
      for (std::int64_t i = size - 1; i > 0; --i) {
        const auto j = static_cast<std::int64_t>(local.below(static_cast<std::uint64_t>(i) + 1));
        const std::int64_t tmp = first[i];
        first[i] = first[j];
        first[j] = tmp;
      }
    }
  });
}

}  // namespace tt
