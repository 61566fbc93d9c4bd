// Uniformly random permutations of [0, n), fast and cache-friendly, deterministic in the seed.
#pragma once

#include <cstdint>

#include "ticktensor/thread_pool.hpp"

namespace tt {

// Writes a uniformly random permutation of [0, n) to out[0..n).
//
// A scatter shuffle: every index draws one of K buckets (K a power of two, about 32 Ki
// indices per bucket, so a bucket fits in L2), indices are scattered to their bucket in
// order, then each bucket gets its own Fisher-Yates shuffle, in parallel on `pool`.
// Multinomial bucket sizes plus uniform shuffles inside buckets give a uniform permutation.
// The result depends only on (n, seed, stream): every bucket has its own random stream,
// so the pool's size and scheduling do not change it.
void random_permutation(std::int64_t* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                        ThreadPool& pool);

}  // namespace tt
