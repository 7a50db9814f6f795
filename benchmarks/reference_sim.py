"""A textbook FCFS replay with no, EASY or conservative backfilling: the yardstick of replay.py.

Written for the benchmark, apart from hpcgym's simulator and from the tests' oracle, the plain
way a course or a paper states the rules (hpcgym's docs/semantics.md, sections 3 to 6):

- at one instant all finishes come first, then all submits, then one scheduling pass;
- reservations use the requested time; a running job past it is expected to end now;
- none: start jobs in FCFS order while the first one fits;
- EASY: the first waiting job gets a reservation at the shadow time; later jobs start now if they
  fit and end by then or use only the processors the reservation leaves over;
- conservative: at every pass the free-processor profile is rebuilt from the running jobs and
  every waiting job is placed again, first those with a reservation (in order of it), then the
  new ones in FCFS order, each at the earliest time it fits for its whole estimate; jobs placed
  at the current time start.

Nothing is incremental here, so conservative backfilling costs (queue length)^2 per event.
"""

from __future__ import annotations

import heapq


def replay(procs: int, ids: list[int], submit: list[int], run: list[int], size: list[int],
           requested: list[int], backfill: str) -> list[int]:
    """Start time of every job (jobs given in submit order)."""
    n = len(submit)
    fcfs = {j: r for r, j in enumerate(sorted(range(n), key=lambda j: (submit[j], ids[j])))}
    start = [-1] * n
    state = {"free": procs}
    waiting: list[int] = []
    running: dict[int, int] = {}        # job -> estimated end
    finishing: list[tuple[int, int]] = []  # heap of (actual end, job)
    reserved: dict[int, int] = {}       # conservative: job -> reserved start

    def launch(job: int, now: int) -> None:
        start[job] = now
        state["free"] -= size[job]
        running[job] = now + requested[job]
        heapq.heappush(finishing, (now + run[job], job))
        waiting.remove(job)

    following = 0
    while following < n or finishing:
        now = min(submit[following] if following < n else float("inf"),
                  finishing[0][0] if finishing else float("inf"))
        while finishing and finishing[0][0] == now:
            _, job = heapq.heappop(finishing)
            del running[job]
            state["free"] += size[job]
        while following < n and submit[following] == now:
            waiting.append(following)
            following += 1
        waiting.sort(key=fcfs.__getitem__)
        if not waiting:
            continue
        if backfill == "conservative":
            _conservative(now, procs, waiting, running, reserved, size, requested, fcfs, state, launch)
            continue
        while waiting and size[waiting[0]] <= state["free"]:
            launch(waiting[0], now)
        if waiting and backfill == "easy":
            _easy(now, waiting, running, size, requested, state, launch)
    return start


def _easy(now, waiting, running, size, requested, state, launch) -> None:
    head = waiting[0]
    ends = sorted((max(end, now), size[job]) for job, end in running.items())
    available, shadow = state["free"], None
    for end, procs in ends:
        if shadow is not None and end > shadow:
            break
        available += procs
        if shadow is None and available >= size[head]:
            shadow = end
    extra = available - size[head]
    for job in list(waiting[1:]):
        if size[job] > state["free"]:
            continue
        if now + requested[job] <= shadow:
            launch(job, now)
        elif size[job] <= extra:
            extra -= size[job]
            launch(job, now)


def _conservative(now, procs, waiting, running, reserved, size, requested, fcfs, state, launch) -> None:
    # the profile: [time, free processors from then on], rebuilt from scratch
    profile = [[now, state["free"]]]
    for end, job_size in sorted((max(end, now), size[job]) for job, end in running.items()):
        if end == profile[-1][0]:
            profile[-1][1] += job_size
        else:
            profile.append([end, profile[-1][1] + job_size])
    order = sorted(reserved, key=lambda j: (reserved[j], fcfs[j])) + [j for j in waiting if j not in reserved]
    placed = {}
    for job in order:
        begin = _earliest_fit(profile, size[job], requested[job])
        _take(profile, begin, begin + requested[job], size[job])
        placed[job] = begin
    reserved.clear()
    for job in order:
        if placed[job] == now and size[job] <= state["free"]:
            launch(job, now)
        else:
            reserved[job] = placed[job]


def _earliest_fit(profile: list[list[int]], need: int, length: int) -> int:
    """The first profile time from which `need` processors stay free for `length` seconds."""
    for k, (begin, _) in enumerate(profile):
        for t, free in profile[k:]:
            if t >= begin + length:
                return begin
            if free < need:
                break
        else:
            return begin
    raise AssertionError("every processor is free after the last running job ends")


def _take(profile: list[list[int]], begin: int, end: int, need: int) -> None:
    """Reserve `need` processors over [begin, end), splitting segments at both ends."""
    for edge in (begin, end):
        k = 0
        while k + 1 < len(profile) and profile[k + 1][0] <= edge:
            k += 1
        if profile[k][0] != edge:
            profile.insert(k + 1, [edge, profile[k][1]])
    for point in profile:
        if begin <= point[0] < end:
            point[1] -= need
