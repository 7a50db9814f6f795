"""`--policy NAME=SPEC` of `hpcgym compare`: what decides each decision kind in one policy, parsed
once and checked before any unit runs (docs/compare.md, "Policy syntax", lists the items)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from ...agents.runtime import BUILTIN_AGENTS, CHECKPOINT_SOURCES, MODULE_CLASS, AgentRef, builtin_kinds, resolve_agent
from ...environment.config import BACKFILL_MODES, BOOL_FIELDS, SimConfig, expand_preset
from ...environment.decisions import BACKFILL, INSPECT, KINDS, SELECT
from ...environment.errors import ConfigError, HpcgymError
from ...environment.priorities import POLICIES
from ...environment.spec import CONFIG_KEYS

#: Simulation options a policy may set, besides the priority policy.
OPTION_KEYS = CONFIG_KEYS
INT_OPTIONS = ("window", "max_interval", "max_rejections")
BOOL_OPTIONS = {name: {"true": True, "false": False} for name in BOOL_FIELDS}
ITEM_KEYS = ("priority", "agent", "cmd", "batsim", *CHECKPOINT_SOURCES) + tuple(k for k in OPTION_KEYS if k != "backfill") + KINDS

_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)=(.+)$", re.S)
_KINDS_PREFIX = re.compile(r"^((?:%s)(?:/(?:%s))*):" % ("|".join(KINDS), "|".join(KINDS)))


@dataclass(frozen=True)
class AgentSpec:
    """One agent process of a policy: the kinds it takes and what it is."""

    kinds: tuple[str, ...]   # empty: the kinds its class (or checkpoint) declares (Python agents only)
    source: str              # "builtin" (a built-in agent name), "python" (module:Class), "model", "sampled", "online", "tree", "cmd"
                             # or "batsim" (a Batsim scheduler program)
    target: str              # the priority name, module:Class, checkpoint path, or the command line

    @property
    def agent(self) -> str:
        """The agent's spec (what `load_agent` takes, for Python agents)."""
        return AgentRef(self.source, self.target).spec

    @property
    def label(self) -> str:
        return f"{'/'.join(self.kinds)}:{self.agent}" if self.kinds else self.agent

    def to_json(self) -> dict[str, Any]:
        return {"kinds": list(self.kinds), "source": self.source, "target": self.target}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentSpec:
        return cls(tuple(data["kinds"]), data["source"], data["target"])


@dataclass(frozen=True)
class PolicySpec:
    """A named policy: the env's priority and options, and the agents that take decision kinds."""

    name: str
    text: str
    priority: str = "fcfs"
    options: dict[str, Any] = field(default_factory=dict)
    agents: tuple[AgentSpec, ...] = ()

    @property
    def external(self) -> bool:
        """Whether an agent is an outside program (which can only run over the protocol)."""
        return any(a.source in ("cmd", "batsim") for a in self.agents)

    @property
    def batsim(self) -> AgentSpec | None:
        """The Batsim scheduler that decides everything in this policy, if it is one."""
        return next((a for a in self.agents if a.source == "batsim"), None)

    @property
    def slug(self) -> str:
        """The name made safe for a folder name."""
        return re.sub(r"[^A-Za-z0-9_.\-+]+", "-", self.name).strip("-.") or "policy"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "spec": self.text, "priority": self.priority, "options": dict(self.options),
                "agents": [a.to_json() for a in self.agents]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PolicySpec:
        return cls(data["name"], data["spec"], data["priority"], dict(data["options"]),
                   tuple(AgentSpec.from_json(a) for a in data["agents"]))


def parse_policy(text: str) -> PolicySpec:
    """Parse `NAME=SPEC` or `SPEC` (then the name is the spec itself)."""
    text = text.strip()
    match = _NAME.match(text)
    name, spec = (match.group(1), match.group(2).strip()) if match else (text, text)
    if not spec:
        raise ConfigError(f"policy {text!r} is empty; e.g. --policy fcfs+easy or --policy mine=select:my.mod:Agent")
    priority: str | None = None
    options: dict[str, Any] = {}
    agents: list[AgentSpec] = []
    for item in split_items(spec):
        kind_match, lowered = _KINDS_PREFIX.match(item), item.lower()
        if lowered in POLICIES:
            priority = _set_once("priority", priority, lowered, text)
        elif lowered in BACKFILL_MODES:
            _set_option(options, "backfill", lowered, text)
        elif lowered in BUILTIN_AGENTS:  # `reject-large` as `hpcgym agent` spells it: its own kinds
            agents.append(_agent(builtin_kinds(lowered), lowered, text))
        elif lowered.startswith("priority:"):
            value = item.split(":", 1)[1].strip().lower()
            if value not in POLICIES:
                raise ConfigError(f"policy {text!r}: unknown priority {value!r}; use one of {', '.join(POLICIES)}")
            priority = _set_once("priority", priority, value, text)
        elif lowered.startswith("backfill:") and item.split(":", 1)[1].strip().lower() in BACKFILL_MODES:
            _set_option(options, "backfill", item.split(":", 1)[1].strip().lower(), text)
        elif lowered.split(":", 1)[0] in OPTION_KEYS and lowered.split(":", 1)[0] != "backfill" and ":" in item:
            key, value = item.split(":", 1)
            _set_option(options, key.lower(), value.strip(), text)
        elif kind_match:
            kinds = tuple(kind_match.group(1).split("/"))
            agents.append(_agent(kinds, item[kind_match.end():].strip(), text))
        elif lowered.startswith("agent:"):
            agents.append(_agent((), item.split(":", 1)[1].strip(), text))
        elif lowered.startswith("cmd:"):
            agents.append(_agent((SELECT,), item, text))
        elif lowered.startswith("batsim:"):
            command = item.split(":", 1)[1].strip()
            if not command:
                raise ConfigError(f"policy {text!r}: batsim: needs the scheduler's command line, e.g. "
                                  "batsim:pybatsim easyBackfill -t 0 -s {addr}")
            agents.append(AgentSpec((), "batsim", command))
        elif lowered.startswith(tuple(f"{source}:" for source in CHECKPOINT_SOURCES)) or MODULE_CLASS.match(item):
            agents.append(_agent((), item, text))
        else:
            raise ConfigError(f"policy {text!r}: cannot read {_unread(item)}; items are a priority ({', '.join(POLICIES)}), "
                              f"a backfill mode ({', '.join(BACKFILL_MODES)}), KIND:AGENT (KIND among "
                              f"{', '.join(KINDS)}), agent:module:Class, model:PATH, sampled:PATH, online:PATH, tree:PATH, cmd:COMMAND, "
                              "batsim:COMMAND or OPTION:VALUE")
    if any(a.source == "batsim" for a in agents) and (priority or options or len(agents) > 1):
        raise ConfigError(f"policy {text!r}: a batsim: scheduler decides every job itself (with walltime kills); "
                          "give it alone, without a priority, backfill mode, option or other agent")
    policy = PolicySpec(name, spec, priority or "fcfs", options, tuple(agents))
    _check(policy)
    return policy


def _unread(item: str) -> str:
    """What to name in an unreadable item: in `sjf+eazy` the unknown `eazy`, with the closest known word."""
    known, words = [*POLICIES, *BACKFILL_MODES, *BUILTIN_AGENTS], [w.strip() for w in re.split(r"[,+]", item)]
    unknown = [w for w in words if w.lower() not in known]
    if len(words) == 1 or not unknown:
        return repr(item)
    close = difflib.get_close_matches(unknown[0].lower(), known, n=1)
    return repr(unknown[0]) + (f" (did you mean {close[0]!r}?)" if close else "")


def split_items(spec: str) -> list[str]:
    """Split at each `,` or `+` that is followed by the start of a new item."""
    items, current = [], []
    for i, ch in enumerate(spec):
        if ch in ",+" and current and _starts_item(spec[i + 1:]):
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    items.append("".join(current).strip())
    if any(not item for item in items):
        raise ConfigError(f"policy spec {spec!r} has an empty item (two separators in a row?)")
    return items


def _starts_item(rest: str) -> bool:
    rest = rest.lstrip()
    word = re.match(r"^([A-Za-z0-9_.\-]+)(?=[,+]|$)", rest)
    if word and word.group(1).lower() in set(POLICIES) | set(BACKFILL_MODES) | set(BUILTIN_AGENTS):
        return True
    if _KINDS_PREFIX.match(rest):
        return True
    key = re.match(r"^([A-Za-z_]+):", rest)
    if key and key.group(1).lower() in ITEM_KEYS:
        return True
    module_class = re.match(r"^([A-Za-z_][\w.]*:[A-Za-z_]\w*)(?=[,+]|$)", rest)
    return module_class is not None


def _agent(kinds: tuple[str, ...], what: str, text: str) -> AgentSpec:
    if len(set(kinds)) != len(kinds):
        raise ConfigError(f"policy {text!r}: kind named twice in {'/'.join(kinds)}")
    try:
        ref = resolve_agent(what, programs=True)
    except HpcgymError as exc:
        raise ConfigError(f"policy {text!r}: {exc}") from None
    if ref.source == "cmd" and not kinds:
        kinds = (SELECT,)
    if ref.source == "builtin":
        takes = "/".join(builtin_kinds(what))
        if "/".join(kinds) != takes:
            raise ConfigError(f"policy {text!r}: the built-in agent {what!r} takes {takes} only; write {takes}:{what}")
    return AgentSpec(kinds, ref.source, ref.target)


def _set_once(what: str, old: str | None, new: str, text: str) -> str:
    if old is not None and old != new:
        raise ConfigError(f"policy {text!r} names two {what} policies: {old} and {new}")
    return new


def _set_option(options: dict[str, Any], key: str, value: str, text: str) -> None:
    if key in options:
        raise ConfigError(f"policy {text!r} sets {key} twice")
    if key == "max_rejections" and value.lower() == "none":
        options[key] = None
    elif key in INT_OPTIONS:
        try:
            options[key] = int(value)
        except ValueError:
            raise ConfigError(f"policy {text!r}: {key} wants an integer, got {value!r}") from None
    elif key in BOOL_OPTIONS:
        try:
            options[key] = BOOL_OPTIONS[key][value.lower()]
        except KeyError:
            raise ConfigError(f"policy {text!r}: {key} wants true or false, got {value!r}") from None
    else:
        options[key] = value


def _check(policy: PolicySpec) -> None:
    taken: dict[str, str] = {}
    for agent in policy.agents:
        for kind in agent.kinds:
            if kind in taken:
                raise ConfigError(f"policy {policy.text!r}: kind {kind} is taken by two agents "
                                  f"({taken[kind]} and {agent.label})")
            taken[kind] = agent.label
    try:
        config = SimConfig(**expand_preset(policy.options))
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"policy {policy.text!r}: {exc}") from None
    if config.backfill == "conservative" and set(taken) & {SELECT, INSPECT, BACKFILL}:
        raise ConfigError(f"policy {policy.text!r}: conservative backfilling places every job by the built-in "
                          "priority; agents for select, inspect or backfill need easy or none")
    if len([a for a in policy.agents if not a.kinds]) > 0 and len(policy.agents) > 1:
        raise ConfigError(f"policy {policy.text!r}: with several agents, name the kinds of each "
                          "(e.g. select:my.mod:Picker,inspect:my.mod:Inspector)")
