"""A deliberately plain FCFS+EASY replay, written independently of the simulator.

It is the oracle of test_fidelity.py: the simulator must produce the very same schedule on real
traces. (benchmarks/replay.py times hpcgym against its own yardstick, benchmarks/reference_sim.py.)
It follows the rules of docs/semantics.md: finishes before submits, one pass per instant, a
running job past its estimate is expected to end now, and the extra processors count every job
ending by the shadow time.
"""

from __future__ import annotations

import heapq


def textbook_easy(procs: int, submit: list[int], run: list[int], size: list[int], est: list[int]) -> list[int]:
    """Start time of every job (jobs given in submit order) under FCFS with EASY backfilling."""
    n = len(submit)
    start = [-1] * n
    free = procs
    waiting: list[int] = []
    ends: list[tuple[int, int]] = []  # heap of (actual end, job)
    running: set[int] = set()
    nxt = 0
    while nxt < n or ends:
        now = min(submit[nxt] if nxt < n else float("inf"), ends[0][0] if ends else float("inf"))
        while ends and ends[0][0] == now:
            _, j = heapq.heappop(ends)
            running.discard(j)
            free += size[j]
        while nxt < n and submit[nxt] == now:
            waiting.append(nxt)
            nxt += 1

        def launch(j: int) -> None:
            nonlocal free
            start[j] = now
            free -= size[j]
            running.add(j)
            heapq.heappush(ends, (now + run[j], j))

        while waiting and size[waiting[0]] <= free:
            launch(waiting.pop(0))
        if not waiting:
            continue
        head = waiting[0]
        # shadow time: when, by estimate, enough processors are back for the head
        by_est_end = sorted((max(start[j] + est[j], now), j) for j in running)
        avail, shadow = free, None
        for t, j in by_est_end:
            if shadow is not None and t > shadow:
                break
            avail += size[j]
            if shadow is None and avail >= size[head]:
                shadow = t
        extra = avail - size[head]
        for j in list(waiting[1:]):
            if size[j] > free:
                continue
            if now + est[j] <= shadow:
                waiting.remove(j)
                launch(j)
            elif size[j] <= extra:
                waiting.remove(j)
                launch(j)
                extra -= size[j]
    return start
