"""A teacher program in any language for DAgger (`hpcgym distill cmd:...`): it answers every decision of an env
here, its answer the label, and the env's `steer` applies the tree's choice instead (docs/irl.md)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Any

from ...agents.base import Agent
from ...agents.distill import Label, Teacher, action_label
from ...environment.config import SimConfig
from ...environment.decisions import Action, Decision
from ...environment.errors import HpcgymError
from ...environment.swf import write_swf
from ...environment.workload import Workload


class ProgramTeacher(Teacher):
    """`cmd:COMMAND LINE` ({addr}: the env's address) taking `kinds`, labelled by its actions."""

    def __init__(self, command: str, kinds: Sequence[str], window: int, decision_timeout: float = 30.0) -> None:
        if "{addr}" not in command:
            raise HpcgymError(f"teacher program {command!r} has no {{addr}}: the env's address goes there, "
                              "e.g. cmd:./my_agent {addr} --join")
        self.command, self.kinds, self.window = command, tuple(kinds), int(window)
        self.decision_timeout = decision_timeout
        self._answer: tuple[Decision, Action] | None = None

    def label(self, decision: Decision) -> Label:
        if self._answer is None or self._answer[0] is not decision:
            raise HpcgymError("the teacher program was not asked about this decision: a program teacher labels "
                              "only decisions of its own episodes (ProgramTeacher.run)")
        return action_label(decision, self._answer[1], self.window)

    def run(self, workload: Workload, config: SimConfig, policy: str, agent: Agent) -> tuple[dict[str, Any], float]:
        from ..compare.policy import parse_policy
        from ..compare.unit import UnitFailed, ipc_folder, run_protocol

        failed: list[BaseException] = []

        def steer(decision: Decision, answer: Action) -> Action:
            self._answer = (decision, answer)
            try:
                return agent.act(decision)
            except BaseException as exc:  # noqa: BLE001 - raised below; the env must not stall
                failed.append(exc)
                return answer

        spec = parse_policy(f"teacher={policy},{'/'.join(self.kinds)}:cmd:{self.command}")
        task = {"seed": config.seed, "options": config.to_options(), "procs": workload.procs, "cwd": os.getcwd(),
                "decision_timeout": self.decision_timeout}
        tmp = ipc_folder("hpcgym-teacher-")
        try:
            write_swf(tmp / "jobs.swf", workload)
            result = run_protocol(spec, task, tmp / "jobs.swf", tmp, steer)
        except UnitFailed as exc:
            raise HpcgymError(f"teacher program {self.command!r}: {exc}") from None
        finally:
            self._answer = None
            shutil.rmtree(tmp, ignore_errors=True)
        if failed:
            raise failed[0]
        return result["summary"], sum(sum(times) for times in result["latency"].values())  # env-side
