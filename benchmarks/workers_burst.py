"""Reply latency under a burst of sessions on `hpcgym env --workers 2` (issue 42, E5).

    python benchmarks/workers_burst.py [--sessions 100] [--jobs 128] [--clients 4]

--sessions agents start at once, each an SJF agent asked at every decision in a session of its
own, half speaking 1.7 (redirected to their worker) and half 1.4 (forwarded by the front); they
run in --clients processes, each serving its agents from one poll loop. Every request's latency
is taken from its send to its first reply of any type (`pending` included: the protocol's promise
is an answer within one heartbeat). Printed: the worst, how many exceed the 1 s heartbeat, and
each client loop's worst lag (the measurement's own error).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import click
import msgpack
import zmq

sys.path.insert(0, str(Path(__file__).parent))
from service_latency import start_env  # noqa: E402


def client(address: str, first: int, count: int, jobs: int, out: multiprocessing.Queue) -> None:
    """Serve agents first..first+count-1 from one poll loop; put their latencies and the loop's worst lag."""
    ctx = zmq.Context()
    poller = zmq.Poller()
    agents: dict[zmq.Socket, dict] = {}
    for k in range(first, first + count):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        protocol = "1.7" if k % 2 else "1.4"
        agents[sock] = {"session": f"burst-{k}", "protocol": protocol, "sent": 0.0, "state": "hello", "done": False}
        poller.register(sock, zmq.POLLIN)
    latencies: dict[str, list[float]] = {"1.7": [], "1.4": []}
    lag, last = 0.0, time.monotonic()

    def send(sock: zmq.Socket, msg: dict) -> None:
        agents[sock]["sent"] = time.monotonic()
        sock.send_multipart([b"", msgpack.packb(msg)])

    for sock, a in agents.items():
        send(sock, {"type": "hello", "protocol": a["protocol"], "agent": "sjf", "kinds": ["select"],
                    "session": a["session"]})
    while not all(a["done"] for a in agents.values()):
        events = dict(poller.poll(5000))
        now = time.monotonic()
        lag, last = max(lag, now - last - (5.0 if not events else 0.0)), now
        if not events:
            stuck = Counter((a["protocol"], a.get("last")) for a in {id(a): a for a in agents.values()}.values()
                            if not a["done"])
            print(f"no reply for 5 s to {dict(stuck)} (protocol, last reply)", file=sys.stderr)
            break
        for sock in list(events):
            a = agents[sock]
            reply = msgpack.unpackb(sock.recv_multipart()[-1])
            if a["sent"]:
                latencies[a["protocol"]].append(now - a["sent"])
                a["sent"] = 0.0
            kind = a["last"] = reply["type"]
            if a.get("front") is sock:  # unasked, on the first socket: its worker failed
                print(f"on the first socket: {reply.get('reason', reply)}", file=sys.stderr)
                a["done"] = True
                continue
            if kind == "redirect":
                a["front"] = sock
                new = ctx.socket(zmq.DEALER)
                new.setsockopt(zmq.LINGER, 0)
                new.connect(reply["address"].replace("tcp://*", "tcp://127.0.0.1"))
                agents[new] = a
                poller.register(new, zmq.POLLIN)
                send(new, {"type": "hello", "protocol": a["protocol"], "agent": "sjf", "kinds": ["select"],
                           "session": a["session"]})
            elif kind == "welcome":
                send(sock, {"type": "reset", "seed": 1, "workload": {"generate_jobs": jobs}})
            elif kind == "pending":
                send(sock, {"type": "poll"})
            elif kind == "decision":
                obs = reply["observation"]["queue"]
                order = {j: r for j, r in zip(obs["id"], obs["requested"])}
                send(sock, {"type": "act", "decision": reply["decision"],
                            "action": min(reply["candidates"], key=lambda j: (order.get(j, 0), j))})
            elif kind == "episode_end":
                a["done"] = True
                if reply["reason"] != "completed":
                    print(f"episode_end: {reply['reason']}", file=sys.stderr)
            else:
                print("unexpected", reply, file=sys.stderr)
                a["done"] = True
    out.put((latencies, lag, sum(a["done"] for a in {id(a): a for a in agents.values()}.values())))
    ctx.destroy(0)


@click.command()
@click.option("--sessions", default=100, show_default=True)
@click.option("--jobs", default=128, show_default=True)
@click.option("--clients", default=4, show_default=True)
@click.option("--workers", default=2, show_default=True)
@click.option("--env-log", type=click.File("w"), default=None, help="where the env's stderr goes")
def main(sessions: int, jobs: int, clients: int, workers: int, env_log) -> None:
    stderr = env_log
    with tempfile.TemporaryDirectory(prefix="hpcgym-burst-") as folder:
        address = f"ipc://{folder}/env.ipc"
        env = start_env(address, "--workers", str(workers), "--max-agents", "100000", "--max-sessions", "100000",
                        stderr=stderr)
        try:
            out: multiprocessing.Queue = multiprocessing.Queue()
            share = -(-sessions // clients)
            procs = [multiprocessing.Process(target=client, args=(address, c * share, min(share, sessions - c * share),
                                                                  jobs, out)) for c in range(clients)]
            began = time.monotonic()
            for p in procs:
                p.start()
            results = [out.get() for _ in procs]
            for p in procs:
                p.join()
            wall = time.monotonic() - began
        finally:
            env.terminate()
            env.wait(10)
    print(f"load {os.getloadavg()[0]:.2f}; --workers {workers}; {sessions} sessions (half 1.7, half 1.4) of "
          f"{jobs} jobs; {sum(r[2] for r in results)} finished in {wall:.1f} s; client loops' worst lag "
          f"{max(r[1] for r in results):.3f} s")
    for protocol, how in (("1.7", "redirected"), ("1.4", "forwarded")):
        latencies = sorted(x for r in results for x in r[0][protocol])
        print(f"{how}: {len(latencies):,} replies, worst {latencies[-1]:.3f} s, p99 "
              f"{latencies[int(len(latencies) * 0.99)]:.3f} s, over 1 s: {sum(x > 1.0 for x in latencies)}")


if __name__ == "__main__":
    main()
