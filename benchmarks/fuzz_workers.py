"""20,000 fuzzed messages against `hpcgym env --workers 2`, unfiltered (issue 42's must-show).

    python benchmarks/fuzz_workers.py [--messages 20000] [--parallel 32] [--seed 0]

The suite's fuzzer (tests/test_worker_admission.py: `fuzzed`, `conversation`, `checked_replies`)
sends --messages requests in clients of 10, --parallel at a time, each client at the front, at
the front as a forwarded 1.4 agent, at a worker's address without a redirect, or redirected there.
Counted instead of asserted: hangs (no reply within 10 s), `internal` errors, malformed replies,
and crashes (worker processes that died or were replaced); then a fresh agent at each worker
plays a whole episode.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from service_latency import ask, dealer, start_env  # noqa: E402
from tests.test_server_hardening import worker_pids  # noqa: E402
from tests.test_worker_admission import checked_replies, conversation, fuzzed, sjf_episode  # noqa: E402


@click.command()
@click.option("--messages", default=20_000, show_default=True)
@click.option("--parallel", default=32, show_default=True)
@click.option("--seed", default=0, show_default=True)
def main(messages: int, parallel: int, seed: int) -> None:
    outcomes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="hpcgym-fuzz-") as folder:
        bind = f"ipc://{folder}/env.ipc"
        env = start_env(bind, "--workers", "2", "--max-agents", "100000", "--max-sessions", "100000")
        try:
            workers = sorted(worker_pids(env.pid))
            opened: list = []  # kept open: the front places a session by its worker's connected agents

            def claimed_at_each_worker(prefix: str) -> dict[str, str]:
                held: dict[str, str] = {}
                for k in range(40):
                    opened.append(dealer(bind))
                    reply = ask(opened[-1], {"type": "hello", "protocol": "1.7", "agent": "a", "kinds": ["select"],
                                             "session": f"{prefix}-{k}"})
                    held.setdefault(reply["address"], f"{prefix}-{k}")
                    if len(held) == 2:
                        return held
                raise AssertionError(f"40 sessions went to one worker: {held}")

            addresses = list(claimed_at_each_worker("claimed"))

            def client(serial: int) -> None:
                rng = random.Random(seed * 1_000_003 + serial)
                try:
                    sockets = conversation(rng, bind, addresses, serial)
                except AssertionError as exc:
                    outcomes[f"setup: {str(exc)[:80]}"] += 1
                    return
                try:
                    for _ in range(10):
                        body = fuzzed(rng)
                        try:
                            checked_replies(sockets[0], body)
                            outcomes["answered"] += 1
                        except AssertionError as exc:
                            text = str(exc)
                            kind = "hang" if text.startswith("no reply") else \
                                "internal" if "internal" in text else "other"
                            outcomes[kind] += 1
                            print(f"{kind}: {text[:300]}", flush=True)
                            if kind == "hang":
                                return
                finally:
                    for sock in sockets:
                        sock.close()

            began = time.monotonic()
            with ThreadPoolExecutor(parallel) as pool:
                list(pool.map(client, range(messages // 10)))
            took = time.monotonic() - began
            now = sorted(worker_pids(env.pid))
            crashes = len(set(workers) - set(now))
            played = 0
            for address, name in claimed_at_each_worker("after").items():  # a fresh agent plays at each worker
                agent = dealer(address)
                welcome = ask(agent, {"type": "hello", "protocol": "1.7", "agent": "a", "kinds": ["select"],
                                      "session": name})
                end = sjf_episode(agent, 3) if welcome["type"] == "welcome" else welcome
                played += end.get("reason") == "completed"
                if end.get("reason") != "completed":
                    print(f"{name} at {address}: {end}")
        finally:
            env.terminate()
            env.wait(10)
    print(f"{messages:,} fuzzed messages in {took:.0f} s, {parallel} clients at a time: {dict(outcomes)}; "
          f"worker processes that died: {crashes}; fresh episodes completed after: {played}/2")


if __name__ == "__main__":
    main()
