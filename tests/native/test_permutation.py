"""The native random permutation: a permutation, deterministic in (seed, stream), uniform."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.kernels import ThreadPool, random_permutation


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 200_000),
    seed=st.integers(0, 2**64 - 1),
    stream=st.integers(0, 2**64 - 1),
    threads=st.integers(1, 4),
)
def test_is_a_permutation_independent_of_threads(
    n: int, seed: int, stream: int, threads: int
) -> None:
    p = random_permutation(n, seed, stream, pool=ThreadPool(threads))
    assert p.dtype == np.int64
    assert np.array_equal(np.sort(p), np.arange(n))
    assert np.array_equal(p, random_permutation(n, seed, stream, pool=ThreadPool(1)))


def test_seed_and_stream_change_the_order() -> None:
    pool = ThreadPool(2)
    base = random_permutation(100_000, 1, 0, pool=pool)
    assert not np.array_equal(base, random_permutation(100_000, 2, 0, pool=pool))
    assert not np.array_equal(base, random_permutation(100_000, 1, 1, pool=pool))


def test_all_orders_of_four_items_are_equally_likely() -> None:
    # 24,000 fixed seeds: deterministic, and a chi-square of 23 degrees of freedom stays
    # far below 80 for a uniform shuffle (p < 1e-7); a biased one (e.g. the naive swap
    # with any position) lands in the hundreds.
    pool = ThreadPool(1)
    counts = Counter(
        tuple(random_permutation(4, seed, 0, pool=pool).tolist()) for seed in range(24_000)
    )
    assert set(counts) == set(itertools.permutations(range(4)))
    chi2 = sum((c - 1000) ** 2 / 1000 for c in counts.values())
    assert chi2 < 80, chi2


def test_positions_are_uniform_across_buckets() -> None:
    # Large enough for many buckets: where index 0 and the last index land is uniform.
    pool = ThreadPool(2)
    n = 1 << 17
    firsts = np.array([random_permutation(n, s, 0, pool=pool)[:4] for s in range(200)])
    assert firsts.min() >= 0
    # Mean of uniform positions is (n-1)/2 with sd n/sqrt(12*800): 6 sd margin.
    assert abs(firsts.mean() - (n - 1) / 2) < 6 * n / np.sqrt(12 * firsts.size)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n must be >= 0"):
        random_permutation(-1, 0, pool=ThreadPool(1))
    with pytest.raises(ValueError, match="seed and stream"):
        random_permutation(3, -1, pool=ThreadPool(1))
