"""The env server as a shared service: another session's latency during a long reset, and the
cost of a decision over ipc:// beside the same decisions in process.

    python benchmarks/service_latency.py
    python benchmarks/service_latency.py --long-jobs 300000 --jobs 5000 --probes 20

1. Never blocked. An `hpcgym env` process; session A, an agent with no kinds, resets a generated
   workload of --long-jobs jobs (the whole episode runs inside that reset); meanwhile session B
   says hello, resets a 50-job episode and says bye, --probes times. Printed: B's hello and reset
   latencies (median and max), how many probes were answered before A's episode ended, and A's
   reset time.
2. Decisions. The SJF agent (`agents.runtime.run_agent`, the code behind `hpcgym agent sjf`) plays
   one episode of a --jobs-job generated workload against `hpcgym env` over ipc://, with standing
   orders (protocol 1.4, the default) and asked at every decision, then the same episode through
   `EnvService.handle` in this process (the messages `run_agent` sends: 1.8, the columns SJF reads). Printed per transport: decisions, how many the agent was
   asked (messages), decisions/s, the env's CPU per decision (over ipc:// read from /proc for the
   env process, all its threads) and the agent's (this process's CPU, the runtime's validation
   included), and the env's CPU per message.
3. Across cores. --agents `hpcgym agent sjf --no-orders` processes (asked at every decision), each
   playing the same --jobs-job generated episode in a session of its own: one after the other
   against `hpcgym env`, all at once against `hpcgym env`, and all at once against `hpcgym env
   --workers AGENTS`, forwarding every message through the front (`--no-redirect`) and with the
   agents redirected to their workers (protocol 1.6, the default). Printed: wall time, jobs per second over all agents, the speed-up over one
   after the other, and whether every episode's metrics equal `hpcgym run`'s.

Timings depend on the machine and what else runs there (the load average is printed): compare
rows of one run.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click
import msgpack
import zmq

from hpcgym.agents.base import PriorityAgent
from hpcgym.agents.runtime import run_agent
from hpcgym.environment.decisions import Decision
from hpcgym.environment.service import EnvService
from hpcgym.protocol.codec import decode, encode
from hpcgym.protocol.messages import PROTOCOL_VERSION

HPCGYM = str(Path(sys.executable).parent / "hpcgym")
HELLO = {"type": "hello", "protocol": "1.3", "agent": "bench", "kinds": []}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_env(address: str, *flags: str, stderr: Any = subprocess.DEVNULL) -> subprocess.Popen:
    env = subprocess.Popen([HPCGYM, "env", "--bind", address, "--max-jobs", "10000000", *flags],
                           stdout=subprocess.DEVNULL, stderr=stderr)
    sock = dealer(address)
    try:
        for _ in range(300):
            if ask(sock, HELLO, 0.1) is not None:
                ask(sock, {"type": "bye"})
                return env
        raise RuntimeError("hpcgym env did not start")
    finally:
        sock.close()


def dealer(address: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    return sock


def ask(sock: zmq.Socket, msg: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any] | None:
    sock.send_multipart([b"", msgpack.packb(msg)])
    if not sock.poll(int(timeout_s * 1000)):
        return None
    return msgpack.unpackb(sock.recv_multipart()[-1])


def never_blocked(address: str, long_jobs: int, probes: int) -> None:
    long = dealer(address)
    ask(long, {**HELLO, "session": "long"})
    ended: list[float] = []

    def long_reset() -> None:
        reply = ask(long, {"type": "reset", "workload": {"generate_jobs": long_jobs}}, 600)
        while reply is not None and reply["type"] == "pending":
            reply = ask(long, {"type": "poll"}, 600)
        ended.append(time.monotonic())

    began = time.monotonic()
    thread = threading.Thread(target=long_reset)
    thread.start()
    time.sleep(0.5)  # the long episode is under way
    hellos, resets, before_end = [], [], 0
    for k in range(probes):
        quick = dealer(address)
        t0 = time.monotonic()
        assert ask(quick, {**HELLO, "session": f"quick-{k}"})["type"] == "welcome"
        t1 = time.monotonic()
        end = ask(quick, {"type": "reset", "workload": {"generate_jobs": 50, "procs": 16}})
        t2 = time.monotonic()
        assert end["type"] == "episode_end", end
        ask(quick, {"type": "bye"})
        quick.close()
        hellos.append(t1 - t0)
        resets.append(t2 - t1)
        before_end += not ended
    thread.join()
    long.close()
    ms = lambda xs: f"median {statistics.median(xs) * 1000:.1f} ms, max {max(xs) * 1000:.1f} ms"  # noqa: E731
    print(f"1. a {long_jobs:,}-job reset by an agent with no kinds took {ended[0] - began:.1f} s; meanwhile "
          f"another session's hello: {ms(hellos)}; its 50-job reset: {ms(resets)}; "
          f"{before_end} of {probes} probes answered before the long episode ended")


def concurrent_agents(folder: Path, agents: int, jobs: int) -> None:
    reference = json.loads(subprocess.run([HPCGYM, "run", "--jobs", str(jobs), "--policy", "sjf", "--json"],
                                          capture_output=True, text=True, check=True).stdout)
    print(f"3. {agents} agents asked at every decision, each SJF on {jobs:,} generated jobs in its own session")
    print(f"   {'how':<44}{'wall':>9}{'jobs/s':>10}{'speed-up':>10}  episodes = hpcgym run")
    sequential = None
    for k, (how, workers, together, redirect) in enumerate((
            ("one after the other, 1 process", 1, False, True), ("at once, 1 process", 1, True, True),
            (f"at once, --workers {agents} --no-redirect", agents, True, False),
            (f"at once, --workers {agents}", agents, True, True))):
        address = f"ipc://{folder / f'agents-{k}.ipc'}"
        env = start_env(address, "--workers", str(workers), *([] if redirect else ["--no-redirect"]))
        try:
            command = [HPCGYM, "agent", "sjf", "--no-orders", "--connect", address, "--jobs", str(jobs), "--json",
                       "--timeout", "120"]
            t0 = time.perf_counter()
            outputs = []
            if together:
                procs = [subprocess.Popen([*command, "--session", f"s{k}"], stdout=subprocess.PIPE, text=True)
                         for k in range(agents)]
                outputs = [proc.communicate(timeout=3600)[0] for proc in procs]
            else:
                for k in range(agents):
                    outputs.append(subprocess.run([*command, "--session", f"s{k}"], capture_output=True, text=True,
                                                  timeout=3600).stdout)
            wall = time.perf_counter() - t0
        finally:
            env.terminate()
            env.wait(10)
        summaries = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
        same = all({k: v for k, v in s.items() if k in reference} == {k: v for k, v in reference.items() if k in s}
                   for s in summaries)
        sequential = sequential or wall
        print(f"   {how:<44}{wall:>8.1f}s{agents * jobs / wall:>10,.0f}{sequential / wall:>9.2f}x  "
              f"{'yes' if same else 'NO'}")


def play_socket(address: str, env: subprocess.Popen, jobs: int, orders: bool) -> tuple[int, int, float, float, float]:
    reset = {"workload": {"generate_jobs": jobs}, "options": {"policy": "sjf"}}
    asked = [0]

    def count(run: Any, decision: Decision) -> None:
        asked[0] += 1

    env0, agent0, t0 = cpu_seconds(env.pid), time.process_time(), time.perf_counter()
    run = run_agent(PriorityAgent("sjf"), address, name="bench-sjf", session=f"decisions-{orders}", reset=reset,
                    timeout=60, orders=orders, progress=count)
    wall = time.perf_counter() - t0
    return run.decisions, asked[0], wall, cpu_seconds(env.pid) - env0, time.process_time() - agent0


def play_in_process(jobs: int) -> tuple[int, int, float, float, float]:
    svc, agent = EnvService(), PriorityAgent("sjf")  # the messages `run_agent` sends
    svc.handle(b"me", encode({**HELLO, "protocol": PROTOCOL_VERSION, "kinds": ["select"]}))
    env_cpu = agent_cpu = 0.0
    decisions = 0
    t0 = time.perf_counter()
    c = time.process_time()
    (_, body), = svc.handle(b"me", encode({"type": "reset", "workload": {"generate_jobs": jobs},
                                           "options": {"policy": "sjf"}, "columns": agent.reads}))
    env_cpu += time.process_time() - c
    while True:
        c = time.process_time()
        reply = decode(body)
        if reply["type"] != "decision":
            break
        action = agent.act(Decision.from_message(reply))
        msg = encode({"type": "act", "decision": reply["decision"], "action": action})
        agent_cpu += time.process_time() - c
        decisions += 1
        c = time.process_time()
        (_, body), = svc.handle(b"me", msg)
        env_cpu += time.process_time() - c
    return decisions, decisions, time.perf_counter() - t0, env_cpu, agent_cpu


@click.command()
@click.option("--long-jobs", type=click.IntRange(min=1000), default=1_000_000, show_default=True,
              help="Jobs of the long reset of part 1.")
@click.option("--probes", type=click.IntRange(min=1), default=10, show_default=True,
              help="Hello + reset probes of another session during it.")
@click.option("--jobs", type=click.IntRange(min=100), default=10_000, show_default=True,
              help="Jobs of the generated workload of parts 2 and 3.")
@click.option("--agents", type=click.IntRange(min=1), default=2, show_default=True,
              help="Concurrent agents of part 3.")
@click.option("--parts", default="1,2,3", show_default=True, help="Which parts to run.")
def main(long_jobs: int, probes: int, jobs: int, agents: int, parts: str) -> None:
    """Another session's latency during a long reset; decisions/s and CPU per decision; agents
    at once over worker processes."""
    folder = Path(tempfile.mkdtemp(prefix="hpcgym-bench-", dir="/tmp"))
    address = f"ipc://{folder / 'env.ipc'}"
    env = start_env(address)
    try:
        print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
        if "3" in parts:
            concurrent_agents(folder, agents, jobs)
        if "1" in parts:
            never_blocked(address, long_jobs, probes)
        if "2" not in parts:
            return
        print(f"2. SJF on {jobs:,} generated jobs (SJF order), one session")
        print(f"   {'transport':<22}{'decisions':>10}{'asked':>8}{'decisions/s':>13}{'env CPU/decision':>18}"
              f"{'agent CPU/decision':>20}{'env CPU/message':>17}")
        for name, (n, asked, wall, env_cpu, agent_cpu) in (
                ("ipc://, orders", play_socket(address, env, jobs, True)),
                ("ipc://, every decision", play_socket(address, env, jobs, False)),
                ("in-process", play_in_process(jobs))):
            print(f"   {name:<22}{n:>10,}{asked:>8,}{n / wall:>13,.0f}{env_cpu / n * 1e6:>15.0f} us"
                  f"{agent_cpu / n * 1e6:>17.0f} us{env_cpu / asked * 1e6:>14.0f} us")
    finally:
        env.terminate()
        env.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
