"""Built-in `inspect` agents: they see each pick of the `select` decider and accept or reject it.

What a rejection does (docs/semantics.md, section 4): the picked jobs' rejection counts go up by
one and the scheduling pass ends there, with nothing started, nothing reserved and no
backfilling; the queue is looked at again at the next event or after `max_interval` (600 s),
whichever comes first. The simulation asks only while some picked job has fewer than
`max_rejections` (72) rejections, so no job is held back for ever: past the cap its picks are
accepted without asking.

- AcceptAllInspector (`accept-all`): accepts every pick, so the schedule is the one without an
  inspector. The inspector to start with when an episode must wait for an `inspect` agent
  (`hpcgym agent ... --require inspect`), and the baseline of SchedInspector-style experiments.
- RejectLargeInspector (`reject-large`): rejects a pick that does not fit the free processors
  now while a smaller waiting job of the visible queue would; accepts everything else. A simple,
  predictable rule for trying the inspect kind, not a better scheduler: under EASY a rejection
  gives up that instant's reservation and the backfilling behind it (tests/test_inspectors.py
  works an example by hand), and a learned inspector should beat it.
"""

from __future__ import annotations

from ..environment.decisions import INSPECT, Decision
from .base import Agent


class AcceptAllInspector(Agent):
    """Accept every pick."""

    kinds = (INSPECT,)

    def act(self, decision: Decision) -> bool:
        return True


class RejectLargeInspector(Agent):
    """Reject a pick that does not fit now (its jobs need more processors than are free) while
    some other job of the visible queue fits the free processors; accept otherwise."""

    kinds = (INSPECT,)

    def act(self, decision: Decision) -> bool:
        obs = decision.observation
        free = int(obs["free"])
        queue = obs["queue"]
        size = dict(zip(queue["id"], queue["size"]))
        picks = {int(j) for j in decision.context["jobs"]}
        if not picks <= size.keys() or sum(int(size[j]) for j in picks) <= free:
            return True  # (a pick outside the visible queue cannot be judged: accepted)
        return not any(int(s) <= free for j, s in size.items() if int(j) not in picks)
