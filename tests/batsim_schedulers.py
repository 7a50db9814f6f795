"""Batsim schedulers for tests/test_batsim.py, speaking Batsim 4's JSON protocol on a raw ZeroMQ
REP socket (no pybatsim needed):

    python tests/batsim_schedulers.py MODE [LOG] -s ADDRESS

MODE `wake-reject-kill` (each event it receives is appended to LOG as one JSON line):
- a job as large as the cluster is rejected;
- a job requesting more than 300 s starts at once if it fits, and the scheduler asks to be called
  60 s later; at that call it kills every job requesting more than 300 s that started before;
- any other job starts, first come first served, on the lowest free hosts when it fits.
MODE `fcfs` only starts jobs, first come first served, on the lowest free hosts (the cheapest
scheduler: benchmarks/batsim_speed.py). MODE `crash` exits with status 3 on the first message; `garbage` answers it with text that is not
JSON; `silent` never answers.
"""

from __future__ import annotations

import json
import sys
import time

import zmq


def hosts_text(hosts: list[int]) -> str:
    return " ".join(str(h) for h in hosts)


class WakeRejectKill:
    def __init__(self, wake_reject_kill: bool = True) -> None:
        self.wake_reject_kill = wake_reject_kill
        self.free: list[int] = []
        self.size = 0
        self.waiting: list[dict] = []
        self.running: dict[str, dict] = {}

    def handle(self, now: float, events: list[dict]) -> list[dict]:
        out: list[dict] = []

        def say(kind: str, data: dict) -> None:
            out.append({"timestamp": now, "type": kind, "data": data})

        for event in events:
            kind, data = event["type"], event["data"]
            if kind == "SIMULATION_BEGINS":
                self.size = data["nb_compute_resources"]
                self.free = list(range(self.size))
            elif kind == "JOB_SUBMITTED":
                job = data["job"]
                if not self.wake_reject_kill:
                    self.waiting.append(job)
                elif job["res"] == self.size:
                    say("REJECT_JOB", {"job_id": job["id"]})
                elif job["walltime"] > 300 and job["res"] <= len(self.free):
                    self._start(job, now, say)
                    say("CALL_ME_LATER", {"timestamp": now + 60})
                else:
                    self.waiting.append(job)
            elif kind == "JOB_COMPLETED":
                self.free = sorted(self.free + self.running.pop(data["job_id"])["hosts"])
            elif kind == "JOB_KILLED":
                for name in data["job_progress"]:
                    self.free = sorted(self.free + self.running.pop(name)["hosts"])
            elif kind == "REQUESTED_CALL":
                long_ones = [name for name, job in self.running.items() if job["walltime"] > 300 and job["start"] < now]
                if long_ones:
                    say("KILL_JOB", {"job_ids": long_ones})
        while self.waiting and self.waiting[0]["res"] <= len(self.free):
            self._start(self.waiting.pop(0), now, say)
        return out

    def _start(self, job: dict, now: float, say) -> None:
        hosts, self.free = self.free[:job["res"]], self.free[job["res"]:]
        self.running[job["id"]] = {**job, "hosts": hosts, "start": now}
        say("EXECUTE_JOB", {"job_id": job["id"], "alloc": hosts_text(hosts)})


def main(argv: list[str]) -> int:
    address = argv[argv.index("-s") + 1]
    mode = argv[0]
    log = open(argv[1], "a") if mode == "wake-reject-kill" else None
    scheduler = WakeRejectKill(wake_reject_kill=mode != "fcfs")
    socket = zmq.Context.instance().socket(zmq.REP)
    socket.bind(address)
    while True:
        message = json.loads(socket.recv())
        if mode == "crash":
            print("crash: this scheduler fails on purpose", file=sys.stderr)
            return 3
        if mode == "garbage":
            socket.send(b"hello, this is not JSON")
            continue
        if mode == "silent":
            time.sleep(3600)
        if log is not None:
            for event in message["events"]:
                log.write(json.dumps(event) + "\n")
            log.flush()
        socket.send(json.dumps({"now": message["now"],
                                "events": scheduler.handle(message["now"], message["events"])}).encode())
        if any(e["type"] == "SIMULATION_ENDS" for e in message["events"]):
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
