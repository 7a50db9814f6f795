"""The Gymnasium env's episodes on a running `hpcgym env`, with `InProcessEpisodes`' interface and trajectories."""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Any

from ..environment.decisions import Action, Decision
from ..environment.errors import HpcgymError
from ..environment.spec import EpisodeSpec
from ..protocol.messages import PROTOCOL_VERSION

_session_numbers = itertools.count(1)


class RemoteEnvError(HpcgymError):
    """The remote env refused a request or ended the episode early."""


class RemoteEpisodeEnded(RemoteEnvError):
    """The remote env ended the episode before its jobs ran to the end."""


class RemoteEpisodes:
    """One connection to an `hpcgym env`, playing one episode at a time."""

    def __init__(self, address: str, timeout: float, kinds: tuple[str, ...], others: Mapping[str, Any]) -> None:
        """kinds: the decisions handed back; others: {kind: Agent} answered here."""
        from ..agents.runtime import Connection  # here: an in-process env never loads ZeroMQ

        self.address, self.kinds, self.others = address, kinds, others
        self.metrics: dict[str, Any] | None = None  # the last episode's, once it completed
        self._decision_id: int | None = None
        self._conn = Connection(address, timeout)
        session = f"gym-{os.getpid()}-{next(_session_numbers)}-{os.urandom(4).hex()}"
        try:
            self._reply(self._conn.request({"type": "hello", "protocol": PROTOCOL_VERSION,
                                            "agent": f"gym-{'+'.join(kinds)}", "kinds": [*kinds, *others],
                                            "session": session}), "welcome")
        except BaseException:
            self._conn.close()
            raise

    def reset(self, spec: EpisodeSpec) -> tuple[Decision | None, float]:
        """Start an episode; its first decision of our kinds (None: none arose) and the reward before it."""
        self.metrics = None
        return self._advance(self._conn.request({"type": "reset", **spec.reset_message()}))

    def act(self, action: Action) -> tuple[Decision | None, float]:
        """Answer the pending decision; the next one (None: the end) and the reward since."""
        return self._advance(self._conn.request({"type": "act", "decision": self._decision_id, "action": action}))

    def close(self) -> None:
        """Say bye (waiting at most a second) and close the connection."""
        try:
            self._conn.timeout = min(self._conn.timeout, 1.0)
            self._conn.request({"type": "bye"})
        except HpcgymError:
            pass
        finally:
            self._conn.close()

    def _advance(self, reply: dict[str, Any]) -> tuple[Decision | None, float]:
        conn, kinds = self._conn, self.kinds
        earned = 0.0
        while True:
            t = self._reply(reply, "decision", "pending", "episode_end")
            if t == "pending":
                reply = conn.request({"type": "poll"})
            elif t == "decision":
                earned += reply["reward"]
                decision = Decision.from_message(reply)
                if decision.kind in kinds:
                    self._decision_id = reply["decision"]
                    return decision, earned
                reply = conn.request({"type": "act", "decision": reply["decision"],
                                      "action": self.others[decision.kind].act(decision)})
            else:
                if reply["reason"] != "completed":
                    raise RemoteEpisodeEnded(f"the remote episode ended early: {reply['reason']}")
                earned += reply["reward"]
                self.metrics = dict(reply["metrics"])
                return None, earned

    def _reply(self, reply: dict[str, Any], *types: str) -> str:
        t = reply["type"]
        if t == "error":
            hint = ("; a decision kept longer than the env's --decision-timeout is lost"
                    if reply["code"] == "stale_decision" else "")
            raise RemoteEnvError(f"the env at {self.address} refused: {reply['code']}: {reply['message']}{hint}")
        if t not in types:
            raise RemoteEnvError(f"unexpected reply {t!r} from {self.address}; expected {' or '.join(types)}")
        return t
