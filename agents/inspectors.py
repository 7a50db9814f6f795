"""Built-in `inspect` agents, which accept or reject each pick of the `select` decider (what a
rejection does: docs/semantics.md section 4; the agents: docs/agents.md)."""

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
