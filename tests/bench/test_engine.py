"""Reading a loader's stats() whatever keys its engine reports."""

from __future__ import annotations

from ticktensor.bench.engine import cache_budget_bytes, cache_hit_rate, flatten, new_stats


def test_flatten_and_new_keys() -> None:
    stats = {"batches": 3, "wait_s": 0.1, "cache": {"hits": 9, "misses": 1, "budget_bytes": 4096}}
    assert flatten(stats) == {
        "batches": 3,
        "wait_s": 0.1,
        "cache.hits": 9,
        "cache.misses": 1,
        "cache.budget_bytes": 4096,
    }
    assert new_stats(stats) == {"cache.hits": 9, "cache.misses": 1, "cache.budget_bytes": 4096}


def test_cache_hit_rate_from_a_rate_or_from_counts() -> None:
    assert cache_hit_rate({"cache": {"hit_rate": 0.5, "hits": 9, "misses": 1}}) == 0.5
    assert (
        cache_hit_rate({"cache_hits": 3, "cache_misses": 1}) is None
    )  # names end in hits/misses only
    assert cache_hit_rate({"cache": {"hits": 3, "misses": 1}}) == 0.75
    assert cache_hit_rate({"cache": {"hits": 0, "misses": 0}}) is None
    assert cache_hit_rate({"batches": 1}) is None


def test_cache_budget() -> None:
    assert cache_budget_bytes({"cache": {"budget_bytes": 10}}) == 10.0
    assert cache_budget_bytes({"batches": 1}) is None
