"""RLScheduler's heuristic loop, re-stated apart from the simulator: the oracle of
test_rlscheduler_rules.py.

Read from DIR-LAB/deep-batch-scheduler, HPCSimPickJobs.py (`schedule_curr_sequence_reset`,
`skip_for_resources_greedy`, `moveforward_for_resources_backfill_greedy`, `moveforward_for_job`),
not copied:

- the queue is sorted by the policy's score (a stable sort, so equal scores keep arrival order)
  and its first job is the head; the head starts as soon as it fits, and the next head is picked
  at once, at the same time;
- while the head does not fit, time moves one event at a time: the next arrival if it comes no
  later than the next end of a running job, else that end (the running list is sorted by end
  with a stable sort, so of the jobs ending in the same second the one started first goes first);
  the head stays the head whatever arrives;
- with backfilling, when the head does not fit its reservation time is computed once: the end by
  request of the running job (in order of those ends) whose processors let it fit; then, before
  every event, the queue is scanned in submit order and every job that fits now and ends by
  request strictly before that time starts;
- with the queue empty, time moves the same way until a job arrives.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable


def rlscheduler_starts(procs: int, submit: list[int], run: list[int], size: list[int], requested: list[int],
                       key: Callable[[int], tuple], backfill: bool = False) -> list[int]:
    """Start time of every job (given in arrival order) with the queue ordered by `key(job)`."""
    n = len(submit)
    start = [-1] * n
    free = procs
    now = submit[0]
    queue = [0]
    arrived = 1
    ends: list[tuple[int, int, int]] = []  # heap of (end, start number, job)
    started = 0

    def next_event() -> None:
        nonlocal free, now, arrived
        if arrived < n and (not ends or submit[arrived] <= ends[0][0]):
            now = max(now, submit[arrived])
            queue.append(arrived)
            arrived += 1
        else:
            end, _, job = heapq.heappop(ends)
            now = max(now, end)
            free += size[job]

    def launch(job: int) -> None:
        nonlocal free, started
        start[job] = now
        free -= size[job]
        heapq.heappush(ends, (now + run[job], started, job))
        started += 1
        queue.remove(job)

    while True:
        queue.sort(key=key)
        head = queue[0]
        if size[head] > free and backfill:
            reserved = _reservation(now, free, size[head], [(start[j] + requested[j], size[j]) for *_, j in ends])
        while size[head] > free:
            if backfill:
                for job in sorted(queue, key=submit.__getitem__):
                    if now + requested[job] < reserved and size[job] <= free:
                        launch(job)
            next_event()
        launch(head)
        if not queue:
            if arrived >= n:
                return start
            while not queue:
                next_event()


def _reservation(now: int, free: int, need: int, running: list[tuple[int, int]]) -> int:
    """When `need` processors are free by the running jobs' requests (ends in the past stay there)."""
    reserved = now
    for end, procs in sorted(running, key=lambda r: r[0]):
        free += procs
        reserved = end
        if free >= need:
            break
    return reserved
