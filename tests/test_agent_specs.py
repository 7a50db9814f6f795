"""One resolver reads agent specs (`agents.runtime.resolve_agent`) for every command: a spelling
names the same agent in `load_agent`, `hpcgym compare` and `hpcgym distill`, and a mistake gets
the same one line whichever command was given it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hpcgym.agents.runtime import AgentRef, load_agent, resolve_agent
from hpcgym.environment.errors import HpcgymError
from hpcgym.gymbridge.cli import main
from hpcgym.gymbridge.compare.policy import parse_policy

# spelling -> what it names (prefixes in any case, spaces around the path ignored)
SPELLINGS = {
    "model:runs/ppo/model.pt": AgentRef("model", "runs/ppo/model.pt"),
    "MODEL: runs/ppo/model.pt": AgentRef("model", "runs/ppo/model.pt"),
    "online:runs/ppo/model.pt": AgentRef("online", "runs/ppo/model.pt"),
    "Sampled:runs/ppo/model.pt": AgentRef("sampled", "runs/ppo/model.pt"),
    "tree:runs/irl/irl-d10.npz": AgentRef("tree", "runs/irl/irl-d10.npz"),
    "tests.agents_for_tests:SlowSJF": AgentRef("python", "tests.agents_for_tests:SlowSJF"),
    "cmd:./my_agent {addr} --join": AgentRef("cmd", "./my_agent {addr} --join"),
}

# a mistake -> the one line every command gives for it
MISTAKES = {
    "model:": "model: needs a checkpoint path, e.g. model:runs/ppo/model.pt",
    "tree:": "tree: needs a tree file path, e.g. tree:runs/irl/irl-d10.npz",
    "sampled:": "sampled: needs a checkpoint path, e.g. sampled:runs/ppo/model.pt",
    "cmd:./my_agent --join": "the command './my_agent --join' has no {addr} placeholder",
    "no-such-agent": "unknown agent 'no-such-agent': use a built-in name (fcfs,",
}


def cli(*args: str) -> str:
    """The output of a command that must fail with one line and exit status 2."""
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    return result.output


@pytest.mark.parametrize("spec", SPELLINGS)
def test_a_spelling_names_one_agent_in_every_command(spec):
    assert resolve_agent(spec, programs=True) == SPELLINGS[spec]
    (agent,) = parse_policy(f"p=select:{spec}").agents
    assert (agent.source, agent.target) == (SPELLINGS[spec].source, SPELLINGS[spec].target)


def test_built_in_names_are_read_in_any_case():
    assert resolve_agent(" SJF") == AgentRef("builtin", "sjf")
    assert type(load_agent("Knapsack")) is type(load_agent("knapsack"))


@pytest.mark.parametrize("spec", MISTAKES)
def test_a_mistake_gets_the_same_line_from_compare_and_distill(spec, tmp_path, traces_dir):
    trace = str(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz")
    compared = cli("compare", "--trace", trace, "--policy", f"p=select:{spec}", "--out", str(tmp_path / "c"))
    distilled = cli("distill", spec, "--trace", trace, "--train-jobs", "50", "--test-jobs", "50",
                    "--out", str(tmp_path / "d"))
    assert MISTAKES[spec] in compared and MISTAKES[spec] in distilled
    assert compared.split(f"policy 'p=select:{spec}': ", 1)[1] == distilled.removeprefix("error: ")


def test_a_program_is_refused_where_no_program_can_run():
    """`hpcgym agent` serves a Python agent; before the resolver, cmd: was imported as Python's
    own `cmd` module ("module 'cmd' has no attribute ...")."""
    with pytest.raises(HpcgymError, match="is a program asked over the protocol, which only hpcgym compare"):
        load_agent("cmd:./my_agent {addr} --join")
    out = cli("agent", "cmd:./my_agent {addr} --join", "--connect", "tcp://127.0.0.1:9")
    assert "only hpcgym compare and hpcgym distill run for you" in out


def test_a_missing_file_is_named_with_what_writes_it(tmp_path, traces_dir):
    missing = tmp_path / "missing.npz"
    with pytest.raises(HpcgymError, match="no tree file at .* takes a file written by `hpcgym distill`"):
        load_agent(f"tree:{missing}")
    out = cli("compare", "--trace", str(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz"),
              "--policy", f"p=select:tree:{missing}", "--out", str(tmp_path / "c"))
    assert f"no tree file at {missing} (tree:PATH takes a file written by `hpcgym distill`)" in out
