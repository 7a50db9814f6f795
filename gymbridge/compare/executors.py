"""Where units of work run: local worker processes, or Ray tasks (Ray imported only when asked for).
A unit returns its result instead of writing files: its machine needs no access to the output folder."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from ...environment.errors import ConfigError, HpcgymError
from ...environment.processes import Workers
from .unit import run_unit

#: (unit id, task, sequence key, sequence SWF text)
Job = tuple[str, dict[str, Any], int, str]
Done = Callable[[str, dict[str, Any]], None]
EXECUTORS = ("local", "ray")
#: Seconds a local worker has to end: to exit when told, then to clean up after SIGTERM.
STOP_WITHIN_S = 10.0


def run_local(jobs: list[Job], workers: int, on_done: Done) -> None:
    """Run units in `workers` processes (1: here, in turn); a worker that dies fails its unit and is replaced."""
    if workers <= 1 or len(jobs) <= 1:
        for uid, task, _, text in jobs:
            on_done(uid, run_unit(task, text))
        return
    pool = Workers(_serve_units, [()] * min(workers, len(jobs)), "hpcgym-compare")
    queue, running = deque(jobs), {}   # running: worker -> the id of its unit
    try:
        while queue or running:
            for w in range(len(pool)):
                if w not in running and queue:
                    uid, task, _, text = queue.popleft()
                    pool.conns[w].send((task, text))
                    running[w] = uid
            for w, reply in pool.wait(list(running), None):
                if reply is None:
                    result = {"status": "error", "error": "the worker process running this unit failed: it died "
                                                          f"(exit code {pool.exit_code(w)})"}
                    pool.restart(w, ())
                else:
                    result = pickle.loads(reply)
                on_done(running.pop(w), result)
    except BaseException:
        # interrupted: the workers clean up on SIGTERM; nothing of theirs is recorded, so --resume reruns them
        pool.end(STOP_WITHIN_S, asked=False)
        raise
    for conn in pool.conns:
        conn.send(None)
    pool.end(STOP_WITHIN_S)


def _serve_units(conn: Connection) -> None:
    """A worker process running the units sent until None; SIGTERM raises, so a unit stops its env and agents."""
    signal.signal(signal.SIGTERM, _terminated)
    while (unit := conn.recv()) is not None:
        conn.send(run_unit(*unit))


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def ray_session(workers: int, address: str | None) -> Iterator[Any]:
    """`ray`, initialized: as it is, else on the cluster at `address`, else a local instance of `workers` CPUs."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install ray (or, in the clone, pip install -e '.[ray]')") from None
    owned = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"address": address} if address else {"num_cpus": max(1, workers)}
        try:
            ray.init(include_dashboard=False, logging_level="ERROR", **kwargs)
        except Exception as exc:  # Ray raises ConnectionError, AuthenticationError, RuntimeError...: one line
            if not address:
                raise
            raise HpcgymError(ray_unreachable(address, exc)) from None
        owned = True
    try:
        yield ray
    finally:
        if owned:
            ray.shutdown()


def ray_unreachable(address: str, exc: BaseException) -> str:
    """Why joining the cluster at `address` failed, and what to do: likeliest, Ray sends its token to a local
    cluster only, never to an address it is given."""
    why = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    hint = ("; a cluster started by `ray start` uses token authentication: export RAY_AUTH_MODE=token here, with "
            "the cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN (`ray get-auth-token` on the head node "
            "prints it)" if os.environ.get("RAY_AUTH_MODE", "").lower() != "token" else
            "; check that the cluster is up (`ray status` on its head node) and that this machine has its token")
    return f"cannot join the Ray cluster at {address}: {why[:300]}{hint}"


def run_ray(jobs: list[Job], workers: int, address: str | None, on_done: Done) -> None:
    """Run units as Ray tasks (where `ray_session` says)."""
    with ray_session(workers, address) as ray:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_unit)
        # each sequence is shipped once, however many policies use it
        texts = {key: ray.put(text) for key, text in {key: text for _, _, key, text in jobs}.items()}
        refs = {remote.remote(task, texts[key]): uid for uid, task, key, _ in jobs}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    try:
                        result = ray.get(ref)
                    except Exception as exc:  # the task's worker died (killed, out of memory): that unit failed
                        result = {"status": "error", "error": f"the Ray task running this unit failed: "
                                                              f"{type(exc).__name__}: {exc}"}
                    on_done(refs[ref], result)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
