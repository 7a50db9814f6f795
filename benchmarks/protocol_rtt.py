"""Protocol round trips: decisions per second and round-trip times of a trivial agent.

    python benchmarks/protocol_rtt.py                      # in-process, ipc:// and tcp:// loopback
    python benchmarks/protocol_rtt.py --decisions 50000 --profile /tmp/rtt-prof

The agent always picks the first candidate. The workload keeps the queue long so every
decision carries a full 128-job window: a generated Lublin workload on a 1-processor cluster
(every job waits behind the one running), measured after a warm-up that lets the queue grow
past the window. Each measured decision is one round trip: encode the `act`, hand it to the
env, the env applies it and builds the next decision, decode the reply.

- in-process: `EnvService.handle` called directly (encode and decode included, no socket);
- ipc:// and tcp:// (loopback): the env is `hpcgym env` in its own process, the agent a DEALER
  socket in this one; `ipc/runtime` repeats ipc:// through `agents.runtime.Connection`, which
  also validates every reply as the Python agents do;
- echo: the floor of the transport, an ipc:// server process that does no work and answers
  every request with the same encoded decision (the agent still decodes it).

Timings depend on the machine and on what else runs there (the load average is printed):
compare rows of one run, not runs of different machines. --repeat keeps the fastest run per
transport; --pin (Linux) puts the env and the agent on CPUs 0 and 1. With --profile DIR one
more ipc:// run goes under cProfile on both sides and the heaviest functions are printed
(the .prof files stay in DIR).
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np
import zmq

from hpcgym.protocol.codec import decode, encode

PEER = b"bench-agent"
#: The env process: `hpcgym env ...`, optionally under cProfile (stats written when it stops).
ENV_MAIN = """
import sys
from hpcgym.gymbridge.cli import main
out, args = sys.argv[1], sys.argv[2:]
if out:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
try:
    main(args, standalone_mode=False)
finally:
    if out:
        prof.disable()
        prof.dump_stats(out)
"""


def reset_message(jobs: int, procs: int, window: int, seed: int) -> dict[str, Any]:
    return {"type": "reset", "seed": seed, "workload": {"generate_jobs": jobs, "procs": procs},
            "options": {"window": window}}


class InProcess:
    """The env's request handler called directly: bytes in, bytes out."""

    def __init__(self) -> None:
        from hpcgym.environment.service import EnvService

        self.service = EnvService()

    def round_trip(self, body: bytes) -> bytes:
        return self.service.handle(PEER, body)[0][1]

    def close(self) -> None:
        pass


class Socket:
    """A DEALER socket to an env process (the protocol's envelope: empty frame, body)."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)
        self.timeout_ms = int(timeout * 1000)

    def round_trip(self, body: bytes) -> bytes:
        self.sock.send_multipart([b"", body])
        if not self.sock.poll(self.timeout_ms):
            raise RuntimeError("the env did not answer")
        return self.sock.recv_multipart()[-1]

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


class Runtime:
    """The Python agents' own connection (`agents.runtime.Connection`: validates every reply)."""

    def __init__(self, address: str) -> None:
        from hpcgym.agents.runtime import Connection

        self.conn = Connection(address, timeout=30.0)

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self.conn.request(msg)

    def close(self) -> None:
        self.conn.close()


def measure(transport: Any, n: int, warmup: int, reset: dict[str, Any], window: int,
            profile: cProfile.Profile | None = None) -> dict[str, Any]:
    """Play until `n` decisions with a full window have been timed; returns the statistics."""
    if isinstance(transport, Runtime):
        ask: Callable[[dict[str, Any]], dict[str, Any]] = transport.request
        rtt_one = transport.request
    else:
        def ask(msg: dict[str, Any]) -> dict[str, Any]:
            return decode(transport.round_trip(encode(msg)))

        rtt_one = ask
    hello = ask({"type": "hello", "protocol": "1.0", "agent": "bench-first", "kinds": ["select"]})
    assert hello["type"] == "welcome", hello
    seed = reset["seed"]
    reply = ask(reset)
    times = np.empty(n, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    sizes = np.empty(n, dtype=np.int64)
    done = skipped = 0
    episodes = 1
    wall = 0.0
    perf_ns = time.perf_counter_ns
    while done < n:
        if reply["type"] == "pending":
            reply = ask({"type": "poll"})
            continue
        if reply["type"] != "decision":  # the episode ended: start another one
            seed += 1
            episodes += 1
            reply = ask({**reset, "seed": seed})
            continue
        msg = {"type": "act", "decision": reply["decision"], "action": reply["candidates"][0]}
        timed = skipped >= warmup and len(reply["candidates"]) >= window
        if not timed:
            skipped += 1
            reply = ask(msg)
            continue
        if profile is not None:
            profile.enable()
        t0 = perf_ns()
        reply = rtt_one(msg)
        t1 = perf_ns()
        if profile is not None:
            profile.disable()
        times[done] = t1 - t0
        queue[done] = reply.get("observation", {}).get("queue_length", 0)
        sizes[done] = len(encode(reply))
        wall += (t1 - t0) / 1e9
        done += 1
    ask({"type": "bye"})
    us = times / 1000.0
    return {"decisions": n, "per_s": n / wall, "median_us": float(np.median(us)),
            "p99_us": float(np.percentile(us, 99)), "mean_us": float(us.mean()), "min_queue": int(queue.min()),
            "reply_bytes": int(np.median(sizes)), "episodes": episodes, "warmup": skipped}


class EnvProcess:
    """`hpcgym env --bind ADDRESS` in its own process."""

    #: CPUs the env process is pinned to (--pin), None: not pinned.
    cpus: set[int] | None = None

    def __init__(self, address: str, profile_out: str = "") -> None:
        self.address = address
        cpus = self.cpus
        self.proc = subprocess.Popen([sys.executable, "-c", ENV_MAIN, profile_out, "env", "--bind", address],
                                     stderr=subprocess.PIPE, text=True,
                                     preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        deadline = time.monotonic() + 30
        line = self.proc.stderr.readline()  # "hpcgym env listening on ..." once bound
        if "listening" not in line or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"the env did not start: {line}")
        time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


ECHO_MAIN = """
import sys, zmq
address, payload = sys.argv[1], open(sys.argv[2], "rb").read()
ctx = zmq.Context()
sock = ctx.socket(zmq.ROUTER)
sock.bind(address)
print("listening", file=sys.stderr, flush=True)
while True:
    frames = sock.recv_multipart()
    if frames[-1] == b"stop":
        break
    sock.send_multipart([frames[0], b"", payload])
sock.close(0)
ctx.term()
"""


def sample_decision(reset: dict[str, Any], warmup: int, window: int) -> bytes:
    """The encoded decision the echo server repeats: the first one the timed part would see."""
    env = InProcess()
    reply = decode(env.round_trip(encode({"type": "hello", "protocol": "1.0", "agent": "s", "kinds": ["select"]})))
    reply = decode(env.round_trip(encode(reset)))
    skipped = 0
    while skipped < warmup or len(reply["candidates"]) < window:
        reply = decode(env.round_trip(encode({"type": "act", "decision": reply["decision"],
                                              "action": reply["candidates"][0]})))
        skipped += 1
    return encode(reply)


def measure_echo(address: str, payload: bytes, n: int, tmp: str) -> dict[str, Any]:
    """Round trips to a server that does no work: sockets, framing and the agent's decode."""
    path = Path(tmp) / "echo-payload.msgpack"
    path.write_bytes(payload)
    cpus = EnvProcess.cpus
    proc = subprocess.Popen([sys.executable, "-c", ECHO_MAIN, address, str(path)], stderr=subprocess.PIPE, text=True,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    proc.stderr.readline()
    sock = Socket(address)
    times = np.empty(n, dtype=np.int64)
    try:
        body = encode({"type": "act", "decision": 1, "action": 1})
        for _ in range(200):
            decode(sock.round_trip(body))
        perf_ns = time.perf_counter_ns
        for k in range(n):
            t0 = perf_ns()
            reply = decode(sock.round_trip(encode({"type": "act", "decision": k, "action": 1})))
            times[k] = perf_ns() - t0
        sock.sock.send_multipart([b"", b"stop"])
    finally:
        sock.close()
        proc.wait(10)
    us = times / 1000.0
    return {"decisions": n, "per_s": n / (times.sum() / 1e9), "median_us": float(np.median(us)),
            "p99_us": float(np.percentile(us, 99)), "mean_us": float(us.mean()),
            "min_queue": reply["observation"]["queue_length"], "reply_bytes": len(payload), "episodes": 0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def top_functions(stats: pstats.Stats, limit: int) -> str:
    out = io.StringIO()
    stats.stream = out
    stats.sort_stats("tottime").print_stats(limit)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return "\n".join(lines[start:])


def run_one(name: str, n: int, warmup: int, reset: dict[str, Any], window: int, tmp: str,
            profile_dir: Path | None, agent_prof: cProfile.Profile | None) -> tuple[str, dict[str, Any]]:
    """One timed run over one transport: (row label, statistics)."""
    if name == "inproc":
        return "in-process", measure(InProcess(), n, warmup, reset, window)
    if name in ("ipc", "ipc/runtime"):
        address = f"ipc://{tmp}/{name.replace('/', '-')}.sock"
    elif name == "tcp":
        address = f"tcp://127.0.0.1:{free_port()}"
    else:
        raise click.BadParameter(f"unknown transport {name!r}", param_hint="--transports")
    profiled = profile_dir is not None and name == "ipc"
    if profiled:
        profile_dir.mkdir(parents=True, exist_ok=True)
    env = EnvProcess(address, str(profile_dir / "env-ipc.prof") if profiled else "")
    try:
        transport = Runtime(address) if name == "ipc/runtime" else Socket(address)
        try:
            label = "ipc:// (runtime)" if name == "ipc/runtime" else f"{name}://"
            return label, measure(transport, n, warmup, reset, window, agent_prof if profiled else None)
        finally:
            transport.close()
    finally:
        env.stop()


def run_all(wanted: list[str], n: int, warmup: int, reset: dict[str, Any], window: int, tmp: str, repeat: int,
            profile_dir: Path | None, agent_prof: cProfile.Profile | None) -> tuple[dict[str, dict[str, Any]], str]:
    """Every transport `repeat` times (the fastest run of each kept), then the profiled run."""
    rows: dict[str, dict[str, Any]] = {}
    env_prof_path = ""
    payload = b""
    for name in wanted:
        for _ in range(repeat):
            if name == "echo":
                payload = payload or sample_decision(reset, warmup, window)
                label, result = "ipc:// echo (floor)", measure_echo(f"ipc://{tmp}/echo.sock", payload, n, tmp)
            else:
                label, result = run_one(name, n, warmup, reset, window, tmp, None, None)
            if label not in rows or result["per_s"] > rows[label]["per_s"]:
                rows[label] = result
    if profile_dir is not None:  # an extra, untimed run: profiling slows both sides down
        run_one("ipc", n, warmup, reset, window, tmp, profile_dir, agent_prof)
        env_prof_path = str(profile_dir / "env-ipc.prof")
    return rows, env_prof_path


@click.command()
@click.option("--decisions", "n", type=click.IntRange(min=100), default=20_000, show_default=True,
              help="Timed decisions per transport.")
@click.option("--warmup", type=click.IntRange(min=0), default=1_000, show_default=True,
              help="Decisions answered before timing starts (the queue grows meanwhile).")
@click.option("--jobs", type=click.IntRange(min=100),
              help="Jobs of the generated Lublin workload (default: decisions + warm-up + 1000).")
@click.option("--procs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Cluster size (small: the queue stays long).")
@click.option("--window", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--transports", default="inproc,ipc,tcp,ipc/runtime,echo", show_default=True,
              help="Comma-separated: inproc, ipc, tcp, ipc/runtime, echo (an ipc:// server that answers "
                   "every request with the same decision bytes: the transport's floor).")
@click.option("--profile", "profile_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Profile the ipc:// case (env process and agent) into this folder and print the top functions.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs per transport (a fresh env each); the table shows the fastest run of each.")
@click.option("--pin", is_flag=True, help="Linux: pin the env process to CPU 0 and this process to CPU 1.")
@click.option("--top", type=int, default=18, show_default=True, help="Functions listed per profile.")
def main(n, warmup, jobs, procs, window, seed, transports, profile_dir, repeat, pin, top) -> None:
    """Decisions per second and round trips of a trivial agent, in-process and over sockets."""
    if pin:
        EnvProcess.cpus = {0}
        os.sched_setaffinity(0, {1})
    jobs = jobs or n + warmup + 1000
    reset = reset_message(jobs, procs, window, seed)
    wanted = [t.strip() for t in transports.split(",") if t.strip()]
    tmp = tempfile.mkdtemp(prefix="hpcgym-rtt-")
    agent_prof = cProfile.Profile() if profile_dir else None
    try:
        rows, env_prof_path = run_all(wanted, n, warmup, reset, window, tmp, repeat, profile_dir, agent_prof)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"trivial agent (first candidate), {window}-job window: generated Lublin, {jobs} jobs on {procs} "
          f"processor(s), seed {seed}; {n} timed decisions per run after >= {warmup} warm-up, "
          f"fastest of {repeat} run(s); python {sys.version.split()[0]}, zmq {zmq.zmq_version()}, "
          f"{os.cpu_count()} CPUs{' (pinned: env 0, agent 1)' if pin else ''}, "
          f"load average {os.getloadavg()[0]:.2f}")
    header = f"{'transport':<22}{'decisions/s':>12}{'median us':>11}{'p99 us':>9}{'mean us':>9}" \
             f"{'reply B':>9}{'min queue':>10}{'episodes':>9}"
    print(header)
    print("-" * len(header))
    for name, r in rows.items():
        print(f"{name:<22}{r['per_s']:>12,.0f}{r['median_us']:>11.1f}{r['p99_us']:>9.1f}{r['mean_us']:>9.1f}"
              f"{r['reply_bytes']:>9,}{r['min_queue']:>10}{r['episodes']:>9}")
    base = rows.get("in-process")
    if base:
        for name, r in rows.items():
            if name != "in-process":
                print(f"{name.strip():<22} throughput {r['per_s'] / base['per_s']:.2f}x in-process, "
                      f"median round trip {r['median_us'] / base['median_us']:.2f}x")
    ipc = rows.get("ipc://")
    if ipc:
        verdict = "met" if ipc["per_s"] >= 10_000 else "NOT met"
        print(f"target >= 10,000 decisions/s over ipc://: {verdict} ({ipc['per_s']:,.0f}/s)")
    if profile_dir is not None and agent_prof is not None:
        agent_path = profile_dir / "agent-ipc.prof"
        agent_prof.dump_stats(str(agent_path))
        for label, path in (("env process (ipc://)", env_prof_path), ("agent process (ipc://)", str(agent_path))):
            if path and Path(path).is_file():
                print(f"\n== profile: {label}, by own time ({path})")
                print(top_functions(pstats.Stats(path), top))


if __name__ == "__main__":
    main()
