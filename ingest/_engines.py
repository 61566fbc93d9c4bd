"""Engines that run an ingest job's tasks: inline, local threads or processes, or Ray."""

from __future__ import annotations

import abc
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from typing import Any, Literal, TypeVar

from ticktensor.errors import ConfigError

__all__ = ["Engine", "InlineEngine", "PoolEngine", "RayEngine", "ThreadEngine", "make_engine"]

T = TypeVar("T")
R = TypeVar("R")


class Engine(abc.ABC):
    """Runs independent tasks; results come back as they complete (any order)."""

    @abc.abstractmethod
    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        """Yield ``fn(task)`` for every task; the first task error is raised here."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release workers."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InlineEngine(Engine):
    """Runs tasks one by one in this process (``--workers 1``; easy to debug)."""

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        for task in tasks:
            yield fn(task)

    def close(self) -> None:
        """Nothing to release."""


class _ExecutorEngine(Engine):
    """Tasks submitted to a ``concurrent.futures`` executor, yielded as they finish."""

    _pool: Executor

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        pending: set[Future[R]] = {self._pool.submit(fn, t) for t in tasks}
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
        finally:
            for fut in pending:
                fut.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class ThreadEngine(_ExecutorEngine):
    """A pool of threads in this process: the local default.

    The heavy steps of both phases (CSV parsing, casts, sorts, Parquet and zstd
    encoding, hashing, polars) run in C++ with the GIL released, so threads use every
    core without the cost of processes: a spawned worker imports pyarrow, polars and
    zarr (about a second of CPU) and pickles every result back.
    """

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ticktensor-ingest")

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        if len(tasks) == 1:  # nothing to run beside it: no thread to start and wait for
            yield fn(tasks[0])
            return
        yield from super().map_unordered(fn, tasks)


class PoolEngine(_ExecutorEngine):
    """A local pool of worker processes (spawned: safe with the threads pyarrow starts).

    For readers whose decoding is Python-bound (the GIL would serialize threads).
    """

    def __init__(self, workers: int) -> None:
        self._pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn")
        )


class RayEngine(Engine):
    """Ray tasks on the cluster at ``RAY_ADDRESS``, or on a local Ray started for the job."""

    def __init__(self, workers: int) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--engine ray needs Ray: pip install 'ticktensor[ray]'") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            address = os.environ.get("RAY_ADDRESS")
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if not address:
                kwargs["num_cpus"] = workers
            ray.init(address=address or None, **kwargs)

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        remote = self._ray.remote(fn)
        pending = [remote.remote(t) for t in tasks]
        try:
            while pending:
                done, pending = self._ray.wait(pending, num_returns=1)
                for ref in done:
                    yield self._ray.get(ref)
        finally:
            for ref in pending:
                self._ray.cancel(ref)

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()


def make_engine(kind: Literal["local", "processes", "ray"], workers: int) -> Engine:
    """The engine for ``--engine`` and ``--workers`` (``workers <= 1`` runs inline).

    ``local`` runs threads of this process, ``processes`` spawned worker processes (for
    readers whose decoding holds the GIL), ``ray`` Ray tasks.
    """
    if kind == "ray":
        return RayEngine(workers)
    if kind not in ("local", "processes"):
        raise ConfigError(f"engine must be 'local', 'processes' or 'ray', got {kind!r}")
    if workers <= 1:
        return InlineEngine()
    return ThreadEngine(workers) if kind == "local" else PoolEngine(workers)
