"""Where units of work run: local worker processes, or Ray tasks (Ray is imported only here, and
only when asked for). Each unit is independent and self-contained: its env, its driver and its
agent processes live in one worker process (one Ray task), and it returns its result instead of
writing files, so the machine that runs it needs no access to the output folder.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from ...environment.errors import ConfigError
from .unit import run_unit

#: (unit id, task, sequence key, sequence SWF text)
Job = tuple[str, dict[str, Any], int, str]
Done = Callable[[str, dict[str, Any]], None]
EXECUTORS = ("local", "ray")


def run_local(jobs: list[Job], workers: int, on_done: Done) -> None:
    """Run units in `workers` processes (1: in this process, one after the other)."""
    if workers <= 1 or len(jobs) <= 1:
        for uid, task, _, text in jobs:
            on_done(uid, run_unit(task, text))
        return
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that holds ZeroMQ contexts/threads
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx, initializer=_worker_init)
    try:
        futures = {pool.submit(_pool_unit, task, text): uid for uid, task, _, text in jobs}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                on_done(futures[future], _result(future.result, "worker process"))
    except BaseException:
        # Interrupted (Ctrl-C): drop the queued units and stop the running ones now. Their workers
        # clean up (agent processes, temporary files) on SIGTERM; nothing of theirs is recorded, so
        # --resume runs them again.
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in set(multiprocessing.active_children()) - before:
            proc.terminate()
        raise
    pool.shutdown(wait=True)


def _worker_init() -> None:
    """Workers leave Ctrl-C to the parent, which ends them with SIGTERM: that becomes an exception
    here, so a unit under way stops its env and agents on the way out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def _pool_unit(task: dict[str, Any], text: str) -> dict[str, Any]:
    try:
        return run_unit(task, text)
    except SystemExit:
        # SIGTERM from the parent: run_unit has cleaned up on the way out; leave now (the pool's
        # worker loop would otherwise take the next unit)
        os._exit(1)


@contextlib.contextmanager
def ray_session(workers: int, address: str | None) -> Iterator[Any]:
    """The `ray` module, initialized: the Ray instance already initialized in this process, else
    the cluster at `address`, else a new local instance with `workers` CPUs (shut down after)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install ray (or, in the clone, pip install -e '.[ray]')") from None
    owned = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"address": address} if address else {"num_cpus": max(1, workers)}
        ray.init(include_dashboard=False, logging_level="ERROR", **kwargs)
        owned = True
    try:
        yield ray
    finally:
        if owned:
            ray.shutdown()


def run_ray(jobs: list[Job], workers: int, address: str | None, on_done: Done) -> None:
    """Run units as Ray tasks (where `ray_session` says)."""
    with ray_session(workers, address) as ray:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_unit)
        texts: dict[int, Any] = {}
        refs = {}
        for uid, task, key, text in jobs:
            if key not in texts:
                texts[key] = ray.put(text)  # each sequence is shipped once, however many policies use it
            refs[remote.remote(task, texts[key])] = uid
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    on_done(refs[ref], _result(lambda r=ref: ray.get(r), "Ray task"))
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise


def _result(get: Callable[[], dict[str, Any]], what: str) -> dict[str, Any]:
    try:
        return get()
    except Exception as exc:  # the worker died (killed, out of memory): that unit failed, the rest go on
        return {"status": "error", "error": f"the {what} running this unit failed: {type(exc).__name__}: {exc}"}
