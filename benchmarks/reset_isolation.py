"""Another session's episodes beside six resets with an unsatisfiable `sjf_range` (issue 42, E3).

    python benchmarks/reset_isolation.py [--workers 2] [--episodes 4] [--rounds 2]

An `hpcgym env`; an honest SJF agent (asked at every decision) plays --episodes 256-job episodes
in its own session, alone and then beside six sessions each resetting 2,000-job windows with
`sjf_range` [1e9, 2e9] (up to 200 SJF simulations a reset, none passes; a refused reset is sent
again), the two arms alternating for --rounds. Printed per arm: the honest episodes' wall time,
and the ratio attacked/alone; after each attacked arm the six agents say bye: the slowest bye's
answer and the env's CPU (all its processes) in the second that starts one second after the byes.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import click
import msgpack

from hpcgym.agents.base import PriorityAgent
from hpcgym.agents.runtime import run_agent

sys.path.insert(0, str(Path(__file__).parent))
from service_latency import ask, dealer, start_env  # noqa: E402

HELLO = {"type": "hello", "protocol": "1.7", "agent": "heavy", "kinds": []}
HEAVY = {"type": "reset", "workload": {"jobs": 2000, "sample": 1, "sjf_range": [1e9, 2e9]}}


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and every descendant alive now (Linux /proc)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def honest(address: str, episodes: int) -> float:
    began = time.monotonic()
    run_agent(PriorityAgent("sjf"), address, name="honest", session="honest", orders=False, episodes=episodes,
              reset={"workload": {"generate_jobs": 256}}, timeout=120)
    return time.monotonic() - began


def attacked(address: str, env_pid: int, episodes: int, heavy: int) -> tuple[float, float, float]:
    """The honest episodes' wall time beside `heavy` sjf_range resets; the slowest bye's answer
    (s) and the env's CPU seconds in the second from 1 s after the byes."""
    stop = threading.Event()
    byes: list[float] = []

    def attacker(k: int) -> None:
        sock = dealer(address)
        welcome = ask(sock, {**HELLO, "session": f"heavy-{k}"})
        if welcome["type"] == "redirect":  # --workers: the session's worker serves it at its own address
            sock.close()
            sock = dealer(welcome["address"].replace("tcp://*", "tcp://127.0.0.1"))
            welcome = ask(sock, {**HELLO, "session": welcome["session"]})
        assert welcome["type"] == "welcome", welcome
        sock.send_multipart([b"", msgpack.packb({**HEAVY, "workload": {**HEAVY["workload"], "sample": k + 1}})])
        while not stop.is_set():
            if sock.poll(50):
                reply = msgpack.unpackb(sock.recv_multipart()[-1])
                if reply["type"] == "error":  # refused (none passed, or over its CPU time): again
                    sock.send_multipart([b"", msgpack.packb(HEAVY)])
                elif reply["type"] == "pending":
                    sock.send_multipart([b"", msgpack.packb({"type": "poll"})])
        t0 = time.monotonic()
        sock.send_multipart([b"", msgpack.packb({"type": "bye"})])
        while sock.poll(10_000):
            if msgpack.unpackb(sock.recv_multipart()[-1])["type"] == "bye":
                byes.append(time.monotonic() - t0)
                break
        sock.close()

    threads = [threading.Thread(target=attacker, args=(k,)) for k in range(heavy)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the resets are under way
    wall = honest(address, episodes)
    stop.set()
    for t in threads:
        t.join()
    time.sleep(1.0)
    cpu = tree_cpu(env_pid)
    time.sleep(1.0)
    return wall, max(byes) if len(byes) == heavy else float("inf"), tree_cpu(env_pid) - cpu


@click.command()
@click.option("--workers", default=1, show_default=True, help="hpcgym env --workers")
@click.option("--episodes", default=4, show_default=True)
@click.option("--rounds", default=2, show_default=True)
@click.option("--heavy", default=6, show_default=True, help="sessions resetting with the sjf_range")
def main(workers: int, episodes: int, rounds: int, heavy: int) -> None:
    with tempfile.TemporaryDirectory(prefix="hpcgym-iso-") as folder:
        address = f"ipc://{folder}/env.ipc"
        env = start_env(address, "--workers", str(workers))
        try:
            print(f"load {os.getloadavg()[0]:.2f}; hpcgym env --workers {workers}; {episodes} honest 256-job episodes "
                  f"per arm; {heavy} sjf_range resets beside")
            alone, beside = [], []
            for r in range(rounds):
                alone.append(honest(address, episodes))
                wall, bye, cpu = attacked(address, env.pid, episodes, heavy)
                beside.append(wall)
                print(f"round {r}: alone {alone[-1]:.2f} s, beside {wall:.2f} s ({wall / alone[-1]:.1f}x); slowest "
                      f"bye {bye:.3f} s; env CPU 1-2 s after the byes {cpu:.2f} s", flush=True)
            print(f"ratio (median of rounds): {statistics.median(b / a for a, b in zip(alone, beside)):.2f}x")
        finally:
            env.terminate()
            env.wait(10)


if __name__ == "__main__":
    main()
