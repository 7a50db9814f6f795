"""Conservative backfilling's passes compiled (numba): re-placing after every early end moves
hundreds of thousands of reservations on a real trace, too many for the interpreter.

A profile is `T[:n]`, `F[:n]`: segment k starts at T[k] with F[k] processors free until T[k + 1]
(the last lasts forever), equal neighbours merged. A reservation is a row of R: start, rank,
job index, size, estimate; rows sorted by (start, rank).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .backfill import FOREVER

START, RANK, INDEX, SIZE, EST = range(5)


@njit(cache=True)
def _insert(T, F, n, k, t, f):
    for j in range(n, k, -1):
        T[j], F[j] = T[j - 1], F[j - 1]
    T[k], F[k] = t, f


@njit(cache=True)
def _delete(T, F, n, k):
    for j in range(k, n - 1):
        T[j], F[j] = T[j + 1], F[j + 1]


@njit(cache=True)
def _carve(T, F, n, k, start, end, size):
    """`size` more free over [start, end) (negative: taken), k the first boundary not before
    start; returns the new length."""
    if k == n or T[k] != start:
        _insert(T, F, n, k, start, F[k - 1])
        n += 1
    stop = k + 1 + np.searchsorted(T[k + 1:n], end)
    if stop == n or T[stop] != end:
        _insert(T, F, n, stop, end, F[stop - 1])
        n += 1
    for j in range(k, stop):
        F[j] += size
    if stop < n and F[stop] == F[stop - 1]:
        _delete(T, F, n, stop)
        n -= 1
    if k > 0 and F[k] == F[k - 1]:
        _delete(T, F, n, k)
        n -= 1
    return n


@njit(cache=True)
def _add(T, F, n, start, end, size):
    return _carve(T, F, n, np.searchsorted(T[:n], start), start, end, size)


@njit(cache=True)
def _move(T, F, n, k, new, start, duration, size):
    """Move a reservation of `size` for `duration` from `start` to `new` (< start, the boundary
    at k): only the parts the two runs do not share change."""
    end = new + duration
    if end > start:
        n = _carve(T, F, n, k, new, start, -size)
        return _carve(T, F, n, k + np.searchsorted(T[k:n], end), end, start + duration, size)
    n = _add(T, F, n, start, start + duration, size)
    return _carve(T, F, n, k, new, end, -size)


@njit(cache=True)
def _least_free(T, F, n, start, end):
    """The fewest processors free in [start, end) (negative: overdrawn)."""
    return F[np.searchsorted(T[:n], start, "right") - 1:np.searchsorted(T[:n], end)].min()


@njit(cache=True)
def _fit(T, F, n, size, duration, held, before, since):
    """The segment at whose start `size` processors first stay free for `duration`, or -1.

    For a job holding [held, held + duration) only starts before `before` count, and its own
    processors are free to it from `held` on; no start before `since` fits (the caller knows)."""
    k = np.searchsorted(T[:n], since, "right") - 1 if since > T[0] else 0
    while k < n:
        start = T[k]
        if start >= before:
            return -1
        if F[k] < size:
            k += 1
            continue
        limit = min(start + duration, held)
        j = k + 1
        while j < n and T[j] < limit and F[j] >= size:
            j += 1
        if j == n or T[j] >= limit:
            return k
        k = j + 1
    raise AssertionError("the last segment of a profile has every processor free")


@njit(cache=True)
def _since(B, nb, size, duration, floor):
    """Blocked records B[:nb] (no start before, size, duration; latest first) say that no job as
    large and as long starts before that time: the latest such time for this job (>= floor)."""
    for b in range(nb):
        if B[b, 0] <= floor:
            break
        if B[b, 1] <= size and B[b, 2] <= duration:
            return B[b, 0]
    return floor


@njit(cache=True)
def _block(B, nb, size, duration, before):
    """Record that a job of `size` and `duration` cannot start before `before`, dropping the
    records it makes useless; returns the new count."""
    kept = 0
    for b in range(nb):
        if B[b, 1] < size or B[b, 2] < duration or B[b, 0] > before:
            B[kept] = B[b]
            kept += 1
    k = 0
    while k < kept and B[k, 0] > before:
        k += 1
    for b in range(kept, k, -1):
        B[b] = B[b - 1]
    B[k, 0], B[k, 1], B[k, 2] = before, size, duration
    return kept + 1


@njit(cache=True)
def _loosen(T, F, n, R, m, loose, horizon):
    """Take the reservations from row `loose` on that start before `horizon` out of the profile;
    returns the profile's length and the end of the loose rows."""
    stop = loose
    while stop < m and R[stop, START] < horizon:
        n = _add(T, F, n, R[stop, START], R[stop, START] + R[stop, EST], R[stop, SIZE])
        stop += 1
    return n, stop


@njit(cache=True)
def _room(T, F, n, G, ng, room):
    """The most processors free in any gained run G[:ng], at least `room`."""
    for g in range(ng):
        lo = np.searchsorted(T[:n], G[g, 0], "right") - 1
        hi = np.searchsorted(T[:n], G[g, 1])
        for j in range(lo, hi):
            room = max(room, F[j])
    return room


@njit(cache=True)
def _replace(T, F, n, R, m, now, free, until, running, due, nd):
    """Re-place the reservations in order, in place, as re-placing every job from scratch into a
    profile of the running jobs would; returns the profile's length, the count of due jobs and
    whether any reservation moved. Only what can move is searched:
    - a stale reservation (in the past: a running job outlived its estimate) is placed first,
      exactly, among the running jobs and the stale ones before it; only where its new run
      reaches past its old end (lost_from..lost_to) can the profile be overdrawn;
    - a job whose run meets overdrawn time is placed afresh, with every job reserved to start
      before the end of its fit taken out of the profile first (`loose`, up to `horizon`);
    - any other job stays or moves earlier, only into time that gained processors (before
      `until`, at most `room` free there), and not where a job no larger and no shorter found no
      place (`failed`).
    """
    stale = 0
    while stale < m and R[stale, START] < now:
        stale += 1
    lost_from, lost_to = FOREVER, now
    if stale:
        XT = np.empty(len(running) + 2 * stale + 4, np.int64)
        XF = np.empty_like(XT)
        XT[0], XF[0], xn = now, free, 1
        for r in range(len(running)):
            t = max(running[r, 0], now)
            if t == XT[xn - 1]:
                XF[xn - 1] += running[r, 1]
            else:
                XT[xn], XF[xn] = t, XF[xn - 1] + running[r, 1]
                xn += 1
        for k in range(stale):
            t, s, e = R[k, START], R[k, SIZE], R[k, EST]
            j = _fit(XT, XF, xn, s, e, FOREVER, FOREVER, 0)
            new = XT[j]
            xn = _carve(XT, XF, xn, j, new, new + e, -s)
            if t + e > now:
                n = _add(T, F, n, now, t + e, s)
            n = _add(T, F, n, new, new + e, -s)
            until = max(until, min(new, t + e))
            if new + e > t + e:
                lost_from, lost_to = min(lost_from, max(new, t + e)), max(lost_to, new + e)
            R[k, START] = new
            if new == now:
                due[nd] = R[k, INDEX]
                nd += 1
    room = 0
    G = np.empty((m + 2, 2), np.int64)  # runs that gained processors since `room` was brought up to date
    ng = 0
    if until > now:
        G[0, 0], G[0, 1], ng = now, until, 1
    B = np.empty((m + 1, 3), np.int64)  # failed searches (Blocked records)
    nb = 0
    moved = stale > 0
    horizon, loose = now, stale  # R[k + 1:loose], if any, are out of the profile
    for k in range(stale, m):
        t, s, e = R[k, START], R[k, SIZE], R[k, EST]
        if k >= loose:  # held in the profile
            if t < lost_to and t + e > lost_from and _least_free(T, F, n, t, t + e) < 0:
                horizon = t + e
                n, loose = _loosen(T, F, n, R, m, k, horizon)
                fits = _least_free(T, F, n, t, t + e) >= s
            else:
                if t == now:
                    due[nd] = R[k, INDEX]
                    nd += 1
                    continue
                if s > room:
                    room = _room(T, F, n, G, ng, room)
                    ng = 0
                    if s > room:
                        continue
                since = now
                for b in range(nb):
                    if B[b, 1] <= s and B[b, 2] <= e:
                        since = B[b, 0]
                        break
                before = min(until, t)
                if since >= before:
                    continue
                # fewer than s free just before t (it would have started there): a run that
                # reaches that time cannot start, so only runs ending before it are searched
                reach = before
                j = np.searchsorted(T[:n], t) - 1
                if F[j] < s and T[j] - e < before:
                    reach = T[j] - e + 1
                    if reach <= since:
                        continue
                j = _fit(T, F, n, s, e, t, reach, since)
                if j < 0:
                    nb = _block(B, nb, s, e, before)
                    continue
                start = T[j]
                n = _move(T, F, n, j, start, t, e, s)
                until = max(until, t + e)
                G[ng, 0], G[ng, 1] = max(start + e, t), t + e
                ng += 1
                R[k, START] = start
                moved = True
                if start == now:
                    due[nd] = R[k, INDEX]
                    nd += 1
                continue
        else:  # loose (out of the profile): judged against its old place
            fits = True
            if _least_free(T, F, n, t, t + e) < s:
                if t + e > horizon:
                    horizon = t + e
                    n, loose = _loosen(T, F, n, R, m, loose, horizon)
                fits = _least_free(T, F, n, t, t + e) >= s
        new = t
        if not fits:  # placed afresh, with the jobs its fit reaches taken out first
            since = _since(B, nb, s, e, now)
            j = _fit(T, F, n, s, e, FOREVER, FOREVER, since)
            while T[j] + e > horizon:
                horizon = T[j] + e
                n, loose = _loosen(T, F, n, R, m, loose, horizon)
                j = _fit(T, F, n, s, e, FOREVER, FOREVER, since)
            new = T[j]
        elif t > now:  # or earlier, as a held job
            if s > room:
                room = _room(T, F, n, G, ng, room)
                ng = 0
            before = min(until, t)
            since = _since(B, nb, s, e, now)
            if s <= room and since < before:
                j = _fit(T, F, n, s, e, t, before, since)
                if j < 0:
                    nb = _block(B, nb, s, e, before)
                else:
                    new = T[j]
        n = _add(T, F, n, new, new + e, -s)
        if new != t:  # the part of its old place it left gained processors
            lo, hi = (t, min(new, t + e)) if new > t else (max(new + e, t), t + e)
            until = max(until, hi)
            G[ng, 0], G[ng, 1] = lo, hi
            ng += 1
            R[k, START] = new
            moved = True
        if new == now:
            due[nd] = R[k, INDEX]
            nd += 1
    return n, nd, moved


@njit(cache=True)
def plan_pass(P, n, R, m, now, free, until, released, running, new, due, resort):
    """One conservative pass over profile P[:, :n] and reservations R[:m]: the processors
    `released` ((start, end, size) rows) given back, the past cut off, the reservations re-placed
    (when a release or a stale one changed the profile), and the `new` jobs (rank, index, size,
    estimate rows, in rank order) placed. The jobs placed at `now` are written to `due`, in order.
    Returns the profile's and the reservations' new lengths and the number of due jobs."""
    T, F = P[0], P[1]
    for r in range(len(released)):
        n = _add(T, F, n, released[r, 0], released[r, 1], released[r, 2])
    k = np.searchsorted(T[:n], now, "right") - 1
    if k > 0:
        for j in range(k, n):
            T[j - k], F[j - k] = T[j], F[j]
        n -= k
    T[0] = now
    unsorted = resort
    if resort:
        _sort(R, m)
    nd = 0
    if m and (R[0, START] < now or until > now):
        n, nd, unsorted = _replace(T, F, n, R, m, now, free, until, running, due, nd)
    else:
        while nd < m and R[nd, START] == now:
            due[nd] = R[nd, INDEX]
            nd += 1
    B = np.empty((len(new) + 1, 3), np.int64)  # a job placed at t: no larger, longer one starts before t
    nb = 0
    for q in range(len(new)):
        s, e = new[q, 2], new[q, 3]
        j = _fit(T, F, n, s, e, FOREVER, FOREVER, _since(B, nb, s, e, now))
        t = T[j]
        n = _carve(T, F, n, j, t, t + e, -s)
        nb = _block(B, nb, s, e, t)
        R[m, START], R[m, RANK], R[m, INDEX], R[m, SIZE], R[m, EST] = t, new[q, 0], new[q, 1], s, e
        m += 1
        unsorted = True
        if t == now:
            due[nd] = new[q, 1]
            nd += 1
    if unsorted:
        _sort(R, m)
    return n, m, nd


@njit(cache=True)
def _sort(R, m):
    """Insertion sort of R[:m] by (start, rank): rows are nearly in order (moves are few and short)."""
    for k in range(1, m):
        t, r = R[k, START], R[k, RANK]
        j = k
        while j > 0 and (R[j - 1, START] > t or (R[j - 1, START] == t and R[j - 1, RANK] > r)):
            j -= 1
        if j < k:
            i, s, e = R[k, INDEX], R[k, SIZE], R[k, EST]
            for h in range(k, j, -1):
                R[h, START], R[h, RANK], R[h, INDEX], R[h, SIZE], R[h, EST] = \
                    R[h - 1, START], R[h - 1, RANK], R[h - 1, INDEX], R[h - 1, SIZE], R[h - 1, EST]
            R[j, START], R[j, RANK], R[j, INDEX], R[j, SIZE], R[j, EST] = t, r, i, s, e


@njit(cache=True)
def drop(R, m, now, started):
    """Remove the reservations of the `started` jobs (all placed at `now`: they lead R); returns
    the new length."""
    k = 0
    while k < m and R[k, START] <= now:
        k += 1
    kept = 0
    for r in range(m):
        if r >= k or R[r, INDEX] not in started:
            R[kept] = R[r]
            kept += 1
    return kept
