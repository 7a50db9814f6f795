"""`hpcgym protocol check-env ADDRESS` and `check-agent "CMD {addr}"`: conformance checks of other implementations,
a line per check (PASS/FAIL name: detail), exit 1 on a failure; the codec's vectors are in protocol/vectors/."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click


def _report(results, as_json: bool) -> None:
    failed = [r for r in results if not r.passed]
    if as_json:
        click.echo(json.dumps([{"name": r.name, "passed": r.passed, "detail": r.detail} for r in results]))
    else:
        for r in results:
            click.echo(r.line())
        click.echo(f"{len(results) - len(failed)} of {len(results)} checks passed", err=True)
    sys.exit(1 if failed or not results else 0)


#: The workload check-agent's env serves by default (generated, so no file is needed).
DEFAULT_AGENT_WORKLOAD: dict[str, Any] = {"generate_jobs": 64, "procs": 64}


def check_agent_against_reference(command: str | Sequence[str], timeout: float = 30.0, *,
                                  workload: dict[str, Any] | None = None,
                                  options: dict[str, Any] | None = None) -> list:
    """`check_agent` against the reference env serving `workload` (default: a small generated one)."""
    from ..environment.server import serve
    from ..environment.service import EnvService
    from ..protocol.conformance import EnvUnderTest, check_agent

    service = EnvService({"workload": dict(DEFAULT_AGENT_WORKLOAD if workload is None else workload),
                          "options": dict(options or {})}, decision_timeout=max(timeout, 1.0))
    return check_agent(command, EnvUnderTest(service, serve), timeout)


def _workload(text: str | None):
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object (the reset's workload map)")
    return value


@click.group("protocol")
def protocol() -> None:
    """Check an env or an agent of another implementation against protocol/PROTOCOL.md."""


@protocol.command("check-env")
@click.argument("addr")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds to wait for each reply.")
@click.option("--workload", help='The reset\'s workload map as JSON (default: {"jobs": 24}, a short window).')
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON array.")
def check_env_command(addr, timeout, workload, as_json) -> None:
    """Play a scripted client session against the env at ADDR and check every reply."""
    from ..protocol.conformance import check_env

    _report(check_env(addr, timeout, workload=_workload(workload)), as_json)


@protocol.command("check-agent")
@click.argument("cmd")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="Seconds the agent has to finish its episode(s) and exit.")
@click.option("--workload", help='The env\'s default workload map as JSON '
                                 '(default: {"generate_jobs": 64, "procs": 64}).')
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON array.")
def check_agent_command(cmd, timeout, workload, as_json) -> None:
    """Serve an in-process env to the agent command CMD ({addr} is replaced by its address)."""
    _report(check_agent_against_reference(cmd, timeout, workload=_workload(workload)), as_json)
