"""Conformance checkers for other implementations of the protocol: `check_env` plays a scripted session against a
running env, `check_agent` judges an agent's recorded traffic; both return `Check`s, never raising."""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import zmq

from .codec import MAX_MESSAGE_BYTES, decode, encode
from .messages import (ERROR_CODES, KIND_TAKEN, MAJOR, MAX_ERROR_CHARS, PROTOCOL_VERSION, REPLIES, REQUESTS,
                       ProtocolError, redirect_target, validate)
from .tables import (ALWAYS, JOB_RECORDS, JOB_TABLES, METRICS, OBSERVATION, OPTIONAL, QUEUE, START_KIND_CODES,
                     WITH_PREDICTOR, names)

KINDS = ("select", "inspect", "backfill", "kill")
SELECT_KILL = "select_kill"  # 1.4: the joint select+kill decision (section 1)
AGENT_KINDS = (*KINDS, SELECT_KILL)
#: Reset options under which hpcgym serves every kind (conservative backfilling refuses select agents, commit_pick
#: the joint kind): a reset refused with bad_request under an env's own defaults is asked again with them.
SERVING_OPTIONS = {"backfill": "easy", "commit_pick": False, "keep_shadow": False}
# The documented tables (tables.py): what a 1.0 env must send, what is checked only where sent, and the columns that
# 1.4 (to agents in episodes with a predictor) and 1.5 (the queued jobs' group, executable, memory) added.
METRICS_KEYS = names(METRICS, sent=ALWAYS)
JOB_COLUMNS = names(JOB_RECORDS, sent=ALWAYS)
OPTIONAL_METRICS_KEYS = names(METRICS, sent=OPTIONAL)
OBSERVATION_KEYS = names(OBSERVATION, since="1.0")
PREDICTION_COLUMNS = {table: names(columns, sent=WITH_PREDICTOR) for table, columns in JOB_TABLES.items()}
QUEUE_JOB_COLUMNS = names(QUEUE, since="1.5")
ENV_KEYS = ("kinds", "policies", "rewards", "defaults", "limits", "on_agent_lost")
LIMIT_KEYS = ("max_message_bytes", "heartbeat_s", "decision_timeout_s")
PENDING_KEYS = ("decision", "kind", "time", "candidates", "can_wait")
DEFAULT_ENV_WORKLOAD: dict[str, Any] = {"jobs": 24}  # what check_env asks for: a short window of the env's default
CONTROLLER_ID = b"hpcgym-conformance-controller"


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str = ""

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.detail}"


def validate_reply(message: Any, strict: bool = True) -> dict[str, Any]:
    """`messages.validate` against REPLIES; not `strict`: unknown reply fields are ignored, as
    section 8 asks of readers talking to a newer minor version."""
    return validate(message, REPLIES, ignore_unknown=not strict)


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _outcome(reply: dict[str, Any]) -> str:
    """A reply as a check's reason: never empty, an error with its code and message."""
    if reply.get("type") == "error":
        return f"error {reply.get('code')!r}: {_short(reply.get('message'))}"
    if reply.get("type") == "episode_end":
        return f"episode_end {reply.get('reason')!r}"
    return _short(reply) if reply else "no reply"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _wrong(*cases: tuple[Any, str]) -> list[str]:
    """The problems of the (wrong, problem) pairs that are wrong."""
    return [problem for wrong, problem in cases if wrong]


def _of_type(value: Any, type_name: str) -> bool:
    """Whether a value has a table's type (section 3: float metrics are sent as floats, also when whole)."""
    return isinstance(value, float) if type_name == "float" else _is_int(value)


# =========================================================================== check_env
class _Abort(Exception):
    """The env stopped answering: the remaining checks cannot run."""


class _Client:
    """One socket to the env (DEALER with the empty delimiter, by default)."""

    def __init__(self, ctx: zmq.Context, address: str, timeout: float, socket_type: int = zmq.DEALER) -> None:
        self.ctx, self.address, self.timeout, self.socket_type = ctx, address, timeout, socket_type
        self.sock = self._connect(address)
        self.front: zmq.Socket | None = None
        self.redirected_to: str | None = None  # the address a redirect named (1.6)

    def _connect(self, address: str) -> zmq.Socket:
        sock = self.ctx.socket(self.socket_type)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES + 1024)
        sock.connect(address)
        return sock

    def follow(self, given: str) -> None:
        """Go on at the address a `redirect` named (1.6), the first socket kept open as the protocol asks."""
        address = redirect_target(self.address, given)
        self.front, self.sock, self.redirected_to = self.sock, self._connect(address), address

    def send(self, body: bytes | dict[str, Any], *, delimiter: bool = True) -> None:
        data = body if isinstance(body, bytes) else encode(body)  # a REQ socket adds the delimiter itself
        self.sock.send_multipart([b"", data] if delimiter and self.socket_type != zmq.REQ else [data])

    def recv(self) -> list[bytes] | None:
        return self.sock.recv_multipart() if self.sock.poll(int(self.timeout * 1000)) else None

    def close(self) -> None:
        self.sock.close(0)
        if self.front is not None:
            self.front.close(0)


class _EnvChecker:
    def __init__(self, address: str, timeout: float, workload: dict[str, Any] | None, max_decisions: int) -> None:
        self.address, self.timeout, self.max_decisions = address, timeout, max_decisions
        self.workload = dict(DEFAULT_ENV_WORKLOAD if workload is None else workload)
        self.results: list[Check] = []
        self.replies, self.strict = 0, True  # strict: the env speaks this version (else later checks are skipped)
        self.bad_replies: list[str] = []
        self.reward: str | None = None
        self.seen_ids: set[int] = set()
        self.serving: dict[str, Any] = {}  # SERVING_OPTIONS once the env refused a reset without them
        self.session = f"conformance-{os.getpid()}-{secrets.token_hex(3)}"
        self.token: str | None = None  # the session's, from the first welcome (1.3)
        self.private = False           # the env said its sessions are private (1.3)
        self.ctx = zmq.Context()
        self.clients: list[_Client] = []
        self.redirected_twice: str | None = None  # a redirect came at a redirect's address (1.7: never)

    # ------------------------------------------------------------------ plumbing
    def check(self, name: str, passed: bool, detail: str = "") -> bool:
        self.results.append(Check(name, bool(passed), detail))
        return bool(passed)

    def client(self, socket_type: int = zmq.DEALER, address: str | None = None) -> _Client:
        c = _Client(self.ctx, address or self.address, self.timeout, socket_type)
        self.clients.append(c)
        return c

    def ask(self, c: _Client, body: bytes | dict[str, Any], what: str, *, delimiter: bool = True) -> dict[str, Any]:
        """Send one request, return its reply (checked against the reply table)."""
        c.send(body, delimiter=delimiter)
        frames = c.recv()
        if frames is None:
            self.check(f"answers:{what}", False, f"no reply within {self.timeout:g} s; stopping")
            raise _Abort
        reply = self.parse(frames[-1], what)
        if reply.get("type") == "redirect" and c.front is not None:
            self.redirected_twice = f"{what}: a redirect at the address a redirect named ({c.redirected_to})"
        if reply.get("type") == "redirect" and c.front is None and isinstance(body, dict) and body["type"] == "hello":
            c.follow(str(reply.get("address")))  # an env of several workers (1.6): the hello again there
            return self.ask(c, body, what, delimiter=delimiter)
        return reply

    def parse(self, data: bytes, what: str) -> dict[str, Any]:
        self.replies += 1
        try:
            msg = decode(data)
        except ProtocolError as err:
            self.bad_replies.append(f"reply to {what}: {err}")
            self.check(f"answers:{what}", False, f"the reply is not a msgpack map ({err}); stopping")
            raise _Abort from None
        try:
            validate_reply(msg, self.strict)
        except ProtocolError as err:
            self.bad_replies.append(f"reply to {what}: {err.code}: {err.message}")
            if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
                self.check(f"answers:{what}", False, f"unusable reply {_short(msg)}; stopping")
                raise _Abort from None
        return msg

    def reset(self, c: _Client, fields: dict[str, Any], what: str) -> dict[str, Any]:
        """The settled reply to a reset, asked again with `SERVING_OPTIONS` if refused with bad_request."""
        def request() -> dict[str, Any]:
            options = {**fields.get("options", {}), **self.serving}
            return {"type": "reset", **fields, **({"options": options} if options else {})}

        reply = self.settle(c, self.ask(c, request(), what), what)
        if reply.get("type") == "error" and reply.get("code") == "bad_request" and not self.serving:
            self.serving = SERVING_OPTIONS  # for the later resets too
            reply = self.settle(c, self.ask(c, request(), what), what)
        return reply

    def settle(self, c: _Client, reply: dict[str, Any], what: str) -> dict[str, Any]:
        """Poll while the env answers `pending` (within the time-out)."""
        deadline = time.monotonic() + self.timeout
        while reply.get("type") == "pending" and time.monotonic() < deadline:
            reply = self.ask(c, {"type": "poll"}, f"poll after {what}")
        return reply

    def refused(self, name: str, code: str, c: _Client, body: bytes | dict[str, Any], what: str,
                standing: dict[str, Any] | None = None, *, recoverable: bool = True) -> dict[str, Any] | None:
        """Ask `body`; check that the reply is an error with `code`, `recoverable` and `pending`
        repeating `standing`. The reply if so, else None."""
        reply = self.ask(c, body, what)
        if reply.get("type") != "error":
            self.check(name, False, f"expected error {code}, got {_short(reply)}")
            return None
        pending = reply.get("pending")
        want = None if standing is None else {k: standing[k] for k in PENDING_KEYS}
        got = {k: pending.get(k) for k in PENDING_KEYS} if want is not None and isinstance(pending, dict) else pending
        problems = _wrong((reply.get("code") != code, f"code {reply.get('code')!r}, expected {code!r}"),
                          (reply.get("recoverable") is not recoverable,
                           f"recoverable {reply.get('recoverable')!r}, expected {recoverable}"),
                          (got != want, f"pending {_short(got)}, expected "
                           + ("nil (nothing stands)" if want is None else f"the standing decision {_short(want)}")))
        detail = "; ".join(problems) if problems else (
            f"{code}, recoverable={recoverable}, pending={'nil' if standing is None else standing['decision']}")
        return reply if self.check(name, not problems, detail) else None

    # ------------------------------------------------------------------ the script
    def run(self) -> list[Check]:
        try:
            self.script()
        except _Abort:
            pass
        except zmq.ZMQError as exc:
            self.check("transport", False, f"ZeroMQ error: {exc}")
        except Exception as exc:  # a reply shaped so oddly that the script cannot go on
            self.check("script", False, f"the checker could not go on: {type(exc).__name__}: {exc}")
        finally:
            self.check("replies_valid", not self.bad_replies,
                       f"{self.replies} replies checked against the reply table"
                       + (f"; {len(self.bad_replies)} invalid, first: {self.bad_replies[0]}"
                          if self.bad_replies else ""))
            for c in self.clients:
                c.close()
            self.ctx.term()
        return self.results

    def hello(self, name: str = "conformance", kinds: Sequence[str] = ("select",), protocol: str = PROTOCOL_VERSION,
              session: str | None = None) -> dict[str, Any]:
        """A hello into `session`, else into the checker's session with its token once the env gave one."""
        return {"type": "hello", "protocol": protocol, "agent": name, "kinds": list(kinds), "session": session or
                self.session, **({"token": self.token} if self.token and session is None else {})}

    def script(self) -> None:
        a = self.client()
        # -------- before hello
        self.refused("hello_required", "not_allowed", a, {"type": "poll"}, "poll before hello")
        # -------- another major version, on its own connection
        b = self.client()
        self.refused("version_mismatch", "version_mismatch", b, {**self.hello("conformance-v99"), "protocol": "99.0"},
                     "hello 99.0", recoverable=False)
        # -------- hello
        r = self.ask(a, self.hello(), "hello")
        if not self.check_welcome(r):
            return
        if isinstance(r.get("token"), str) and r["token"]:
            self.token = r["token"]
        if self.private:  # 1.3: joining a session that has agents takes its token
            intruder = {**self.hello("conformance-intruder", ()), "token": "not-the-token"}
            self.refused("private_session", "not_allowed", self.client(), intruder, "hello with a wrong token")
        self.refused("hello_twice", "not_allowed", a, self.hello(), "second hello")
        c = self.client()
        self.refused("kind_taken", KIND_TAKEN, c, self.hello("conformance-rival"), "hello for a taken kind")
        # -------- a reset the env cannot do
        r = self.refused("reset_bad_request", "bad_request", a, {"type": "reset", "options": {"no_such_option": 1}},
                         "reset with an unknown option")
        if r is not None:
            message, said = str(r.get("message")), f"message: {_short(r.get('message'))}"
            self.check("bad_request_names_key", "no_such_option" in message, said)
            if self.strict:  # 1.3: the known keys listed include policy, an option like the others
                self.check("bad_request_lists_policy", "policy" in message, said)
        # keys inside `workload` are not message fields: bad_request, not bad_field (section 3)
        self.refused("reset_bad_request_nested", "bad_request", a, {"type": "reset", "workload": {
            **self.workload, "no_such_key": 1}}, "reset with an unknown workload key")
        if self.strict:  # 1.4: a reward spec too long or too deeply scaled is bad_request (not internal),
            # and an error quotes at most MAX_ERROR_CHARS (section 5)
            self.refused("reward_spec_bounded", "bad_request", a, {"type": "reset", "reward": "2*" * 1000 + "bsld"},
                         "reset with a 2 KB reward spec")
            r = self.ask(c, {**self.hello("conformance-long-kind"), "kinds": ["k" * 200_000]},
                         "hello with a 200 KB kind")
            self.check("error_message_bounded", r.get("type") == "error"
                       and len(str(r.get("message", ""))) <= MAX_ERROR_CHARS,
                       f"{_outcome(r)[:80]} ({len(str(r.get('message', ''))):,} characters)")
        # -------- episode 1: the first decision and wrong answers to it
        r = self.reset(a, {"seed": 1, "workload": self.workload}, "reset")
        if not self.check("reset_decision", r.get("type") == "decision" and r.get("kind") == "select",
                          f"the reply to reset is {r.get('kind')} (episode {r.get('episode')}, decision "
                          f"{r.get('decision')})" if r.get("type") == "decision" else f"the reply to reset is "
                          f"{_outcome(r)}"):
            return
        first_episode = r.get("episode")
        self.seen_ids.add(r["decision"])
        self.check_decision_shape(r)
        d = r
        r = self.ask(a, {"type": "poll"}, "poll while a decision is pending")
        self.check("poll_repeats_decision", r.get("type") == "decision" and r.get("decision") == d["decision"],
                   f"poll while decision {d['decision']} stands answered {r.get('type')} {r.get('decision', '')}")
        self.wrong_answers(a, d)
        r = self.ask(a, {"type": "poll"}, "poll after the wrong answers")
        self.check("nothing_changed", r.get("type") == "decision" and r.get("decision") == d["decision"]
                   and r.get("time") == d["time"] and r.get("candidates") == d["candidates"],
                   f"after the refused requests the standing decision is {r.get('decision')} "
                   f"(expected {d['decision']}, unchanged)")
        r = self.settle(a, self.ask(a, {"type": "act", "decision": d["decision"], "action": d["candidates"][0]},
                                    "act"), "act")
        self.check("act_accepted", r.get("type") in ("decision", "episode_end")
                   and (r.get("type") != "decision" or r.get("decision") != d["decision"]),
                   f"act on decision {d['decision']} answered {r.get('type')} {r.get('decision', '')}")
        if r.get("type") == "decision":
            self.seen_ids.add(r["decision"])
        # -------- a reset while episode 1 runs
        reset = {"type": "reset", "seed": 2, "workload": self.workload, "records": True,
                 **({"options": dict(self.serving)} if self.serving else {}),
                 **({"reward": self.reward} if self.reward is not None else {})}
        r = self.ask(a, reset, "reset during an episode")
        if r.get("type") == "episode_end":
            ok = r.get("episode") == first_episode and str(r.get("reason", "")).startswith("reset by")
            self.check("reset_ends_episode", ok,
                       f"episode_end of episode {r.get('episode')}, reason {r.get('reason')!r}")
            r = self.ask(a, {"type": "poll"}, "poll after the reset's episode_end")
        else:
            self.check("reset_ends_episode", r.get("type") in ("decision", "pending"),
                       f"the reply is {r.get('type')} (the old episode's end was not reported; allowed)")
        r = self.settle(a, r, "reset")
        self.check("new_episode", r.get("type") == "decision" and _is_int(first_episode)
                   and r.get("episode") == first_episode + 1 and r.get("decision") not in self.seen_ids,
                   f"decision {r.get('decision')} of episode {r.get('episode')} after episode {first_episode} "
                   f"(decision ids seen before: {sorted(self.seen_ids)[:6]})")
        # -------- episode 2 to its end
        end = self.play(a, r)
        if end is None:
            return
        self.check_end(end, first_episode + 1 if _is_int(first_episode) else None)
        last = end.get("_last_decision")
        # -------- after the end
        if last is not None:
            self.refused("stale_after_end", "stale_decision", a,
                         {"type": "act", "decision": last["decision"], "action": last["candidates"][0]},
                         "act after episode_end")
        self.refused("bad_message_no_pending", "bad_message", a, b"\xc1", "garbage after episode_end")
        # -------- other envelopes
        self.envelopes()
        self.redirect_address(a)
        if self.strict:  # 1.4: the prediction option is checked like every option, its columns go to a 1.4 agent
            self.newer_columns("predictions", "prediction", "1.3", PREDICTION_COLUMNS, {"prediction": "running"}, 1,
                               "the prediction columns, one per job", {
                                   "prediction_bad_request_unknown": {"prediction": "oracle"},
                                   "prediction_bad_request_model_path": {
                                       "prediction": "learned:/nonexistent/hpcgym-model.json"}})
            self.select_kill()  # 1.4: the joint select+kill decision
            self.newer_columns("job_columns", "job", "1.4", {"queue": QUEUE_JOB_COLUMNS}, {}, None,
                               "group, executable and memory, one per job")  # 1.5
        # -------- bye
        r = self.ask(a, {"type": "bye"}, "bye")
        self.check("bye", r.get("type") == "bye", f"bye answered {r.get('type')}")
        self.refused("forgotten_after_bye", "not_allowed", a, {"type": "poll"}, "poll after bye")

    def check_welcome(self, r: dict[str, Any]) -> bool:
        if r.get("type") != "welcome":
            return self.check("welcome", False, f"hello answered {_short(r)}")
        protocol, env = r.get("protocol"), r.get("env")
        problems = []
        if not isinstance(protocol, str) or protocol.split(".")[0] != MAJOR:
            problems.append(f"protocol {protocol!r} is not {MAJOR}.x")
        else:
            self.strict = protocol == PROTOCOL_VERSION
        if isinstance(env, dict) and isinstance(env.get("rewards"), dict) and "bsld" in env["rewards"]:
            self.reward = "bsld"
        if r.get("session") != self.session:
            problems.append(f"session {r.get('session')!r}, expected {self.session!r}")
        if isinstance(env, dict):
            self.private = env.get("sessions") == "private"
            kinds, limits, defaults = env.get("kinds"), env.get("limits"), env.get("defaults")
            problems += [f"env lacks {k!r}" for k in ENV_KEYS if k not in env]
            problems += [f"env.limits lacks {k!r}" for k in LIMIT_KEYS if isinstance(limits, dict) and k not in limits]
            problems += _wrong(
                (isinstance(kinds, list) and not set(KINDS) <= set(kinds),
                 f"env.kinds {kinds} lacks some of {list(KINDS)}"),
                (self.strict and SELECT_KILL not in (kinds or []), f"env.kinds lacks {SELECT_KILL!r} (1.4)"),
                (env.get("on_agent_lost") not in ("fallback", "end"),
                 f"env.on_agent_lost {env.get('on_agent_lost')!r}"),
                (self.strict and not (isinstance(defaults, dict) and isinstance(defaults.get("options"), dict)
                                      and "policy" in defaults["options"]),
                 "env.defaults.options lacks 'policy' (1.3: the defaults have a reset's shape)"),
                (self.private and not (isinstance(r.get("token"), str) and r["token"]),
                 "private sessions but no token in the welcome"),
                ("workers" in env and not (_is_int(env["workers"]) and env["workers"] >= 2),
                 f"env.workers {env.get('workers')!r} is not a number of worker processes (1.7: at least 2)"))
        return self.check("welcome", not problems,
                          "; ".join(problems)
                          or f"protocol {protocol}, session {r.get('session')!r}, env keys complete")

    def check_decision_shape(self, d: dict[str, Any]) -> None:
        obs = d.get("observation", {})
        problems = [f"observation lacks {k!r}" for k in OBSERVATION_KEYS if k not in obs]
        for table, columns in JOB_TABLES.items():
            t = obs.get(table)
            if not isinstance(t, dict):
                problems.append(f"observation.{table} is not a map")
                continue
            missing = [c for c in names(columns, since="1.0") if not isinstance(t.get(c), list)]
            mistyped = [f"{c.name} ({c.type})" for c in columns if isinstance(t.get(c.name), list)
                        and not all(_of_type(v, c.type) for v in t[c.name])]
            lengths = {len(v) for v in t.values() if isinstance(v, list)}
            problems += _wrong((missing, f"observation.{table} lacks columns {missing}"),
                               (mistyped, f"observation.{table} columns hold values of another type: {mistyped}"),
                               (len(lengths) > 1,
                                f"observation.{table} columns have different lengths {sorted(lengths)}"))
        queue_ids = obs.get("queue", {}).get("id") if isinstance(obs.get("queue"), dict) else None
        problems += _wrong(
            (obs.get("time") != d.get("time"), f"observation.time {obs.get('time')} != decision time {d.get('time')}"),
            (d.get("candidates") != queue_ids,
             f"select candidates {_short(d.get('candidates'))} are not the queue window ids {_short(queue_ids)}"),
            (not d.get("candidates"), "select with no candidates"),
            (not all(_is_int(j) for j in d.get("candidates", [])), "candidates are not all integers"))
        self.check("decision_shape", not problems, "; ".join(problems) or
                   f"{len(d.get('candidates', []))} candidates, observation tables columnar")

    def wrong_answers(self, a: _Client, d: dict[str, Any]) -> None:
        did, cands = d["decision"], d["candidates"]
        obs = d.get("observation", {})
        known = list(cands) + list(obs.get("queue", {}).get("id", [])) + list(obs.get("running", {}).get("id", []))
        outsider = max([j for j in known if _is_int(j)] + [0]) + 1000
        act = {"type": "act", "decision": did}
        cases: dict[str, Any] = {  # each named after the error code the env must answer with
            "stale_decision": {**act, "decision": did + 1000, "action": cands[0]},
            "stale_decision_old": {**act, "decision": did - 1, "action": cands[0]},
            "invalid_action_not_candidate": {**act, "action": outsider},
            "invalid_action_bool_for_select": {**act, "action": True},
            "invalid_action_repeated_job": {**act, "action": [cands[0], cands[0]]},
            "bad_field_action_type": {**act, "action": "first"},
            "bad_field_decision_type": {**act, "decision": str(did), "action": cands[0]},
            "bad_field_missing_action": act,
            "bad_field_unknown_field": {**act, "action": cands[0], "why": "x"},
            "unknown_type": {"type": "step", "action": cands[0]},
            "bad_message_missing_type": {"decision": did, "action": cands[0]},
            "bad_message_garbage": b"\xc1\xc1\xc1",
            "bad_message_truncated": encode({**act, "action": cands[0]})[:-1],
            "bad_message_trailing": encode({"type": "poll"}) + b"\x00",
            "bad_message_not_a_map": encode(["act", did, cands[0]]),
            "bad_message_int_key": b"\x82\xa4type\xa4poll\x01\x02",
        }
        if self.strict:  # 1.4: a standing order must rank every candidate once, and be a map of 'order' only
            cases.update(invalid_action_order_twice={**act, "action": {"order": [*cands, cands[0]]}},
                         bad_field_order_key={**act, "action": {"rank": list(cands)}})
        for name, body in cases.items():
            self.refused(name, next(c for c in ERROR_CODES if name.startswith(c)), a, body, name, d)

    def play(self, a: _Client, r: dict[str, Any]) -> dict[str, Any] | None:
        """Answer decisions until the episode ends: with the first candidate, or to an env of this
        version with a standing order (1.4), which must then ask again only for a candidate outside it."""
        problems: list[str] = []
        last = None
        n = ordered = 0
        order: set[Any] = set()
        deadline = time.monotonic() + max(60.0, 10 * self.timeout)
        while r.get("type") in ("decision", "pending") and n < self.max_decisions and time.monotonic() < deadline:
            if r["type"] == "pending":
                r = self.ask(a, {"type": "poll"}, "poll during the episode")
                continue
            n += 1
            cands, before = r.get("candidates") or [None], last or {}
            problems += _wrong(
                (r.get("decision") in self.seen_ids,
                 f"decision id {r.get('decision')} was used before in this session"),
                (last is not None and not r.get("step", 0) > before["step"],
                 f"step {r.get('step')} after {before.get('step')}"),
                (last is not None and not r.get("time", 0) >= before["time"],
                 f"time {r.get('time')} after {before.get('time')}"),
                (r.get("kind") != "select", f"a {r.get('kind')!r} decision for an agent that took only select"),
                (order and set(cands) <= order,
                 f"decision {r.get('decision')} was sent although the standing order ranks all its candidates"))
            self.seen_ids.add(r.get("decision"))
            last = r
            ordered += self.ordered_count(r, problems)
            action: Any = {"order": list(cands)} if self.strict and None not in cands else cands[0]
            order = set(cands) if isinstance(action, dict) else set()
            r = self.ask(a, {"type": "act", "decision": r["decision"], "action": action}, "act")
        if r.get("type") == "episode_end":
            ordered += self.ordered_count(r, problems)
        self.check("decisions_in_order", not problems,
                   f"{n} decisions answered" + (f", {ordered} more by standing orders" if ordered else "")
                   + (f"; {len(problems)} problems, first: {problems[0]}" if problems else ""))
        if r.get("type") != "episode_end":
            self.check("episode_end", False, f"after {n} decisions the env answered {_short(r)}")
            return None
        r["_last_decision"] = last
        return r

    @staticmethod
    def ordered_count(r: dict[str, Any], problems: list[str]) -> int:
        """A reply's `ordered` (1.4): absent, or how many decisions a standing order answered."""
        ordered = r.get("ordered", 0)
        if not _is_int(ordered) or ordered < (1 if "ordered" in r else 0):
            problems.append(f"{r.get('type')} has ordered {ordered!r}; expected a positive integer or no field")
            return 0
        return ordered

    def check_end(self, end: dict[str, Any], episode: int | None) -> None:
        self.check("episode_end",
                   end.get("reason") == "completed" and (episode is None or end.get("episode") == episode),
                   f"episode {end.get('episode')} ended: {end.get('reason')!r}" if end.get("type") == "episode_end"
                   else f"the episode ended with {_outcome(end)}")
        self.check("reward_is_float", isinstance(end.get("reward"), float),
                   f"episode_end reward {end.get('reward')!r} (an env sends rewards as floats, section 3)")
        metrics = end.get("metrics") or {}
        missing = [k for k in METRICS_KEYS if k not in metrics]
        mistyped = [f"{c.name} ({c.type})" for c in METRICS if c.name in metrics and not _of_type(metrics[c.name], c.type)]
        self.check("metrics_keys", not missing and not mistyped,
                   f"missing {missing}, of another type {mistyped}" if missing or mistyped
                   else f"{len(METRICS_KEYS)} documented metrics, jobs={metrics.get('jobs')}")
        jobs = end.get("jobs")
        if not isinstance(jobs, dict):
            self.check("records", False, f"reset asked records: true; jobs is {_short(jobs)}")
        else:
            missing = [k for k in JOB_COLUMNS if not isinstance(jobs.get(k), list)]
            lengths = {len(v) for v in jobs.values() if isinstance(v, list)}
            ok = not missing and lengths == {metrics.get("jobs")}
            self.check("records", ok, f"missing columns {missing}, lengths {sorted(lengths)}, jobs "
                                      f"{metrics.get('jobs')}" if not ok else f"{len(JOB_COLUMNS)} columns of "
                                      f"{metrics.get('jobs')} jobs")
            if "start_kind" in jobs:
                kinds = jobs["start_kind"]
                bad = [k for k in kinds if type(k) is not int or k not in START_KIND_CODES] \
                    if isinstance(kinds, list) else [kinds]
                self.check("start_kind", not bad, f"values not in {list(START_KIND_CODES)}: {_short(bad)}" if bad
                           else f"{len(kinds)} codes in {list(START_KIND_CODES)}")
        shares = [metrics[k] for k in OPTIONAL_METRICS_KEYS if k in metrics]
        if shares:
            ok = (len(shares) == len(OPTIONAL_METRICS_KEYS)
                  and all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in shares)
                  and abs(sum(shares) - 1.0) <= 1e-9)
            self.check("start_shares", ok, f"{dict(zip(OPTIONAL_METRICS_KEYS, shares))}"
                       + ("" if ok else f": expected all of {list(OPTIONAL_METRICS_KEYS)} as floats summing to 1"))
        reward = end.get("reward")
        if self.reward == "bsld" and isinstance(metrics.get("mean_bsld"), (int, float)):
            want = -float(metrics["mean_bsld"])
            self.check("end_reward", isinstance(reward, (int, float)) and not isinstance(reward, bool)
                       and abs(reward - want) <= 1e-9 * max(1.0, abs(want)),
                       f"reward {reward!r} with the bsld spec (minus mean_bsld: {want!r})")
        else:
            self.check("end_reward", isinstance(reward, float), f"reward {reward!r} (reward spec {self.reward!r})")

    def envelopes(self) -> None:
        """A DEALER without the delimiter frame and a REQ socket are served too (section 2)."""
        c = self.client()
        c.send(self.hello("conformance-bare", ()), delimiter=False)
        frames = c.recv()
        if frames is not None and self.parse(frames[-1], "single-frame hello").get("type") == "redirect":
            c.follow(str(decode(frames[-1]).get("address")))  # 1.6: at the worker's address, the same
            c.send(self.hello("conformance-bare", ()), delimiter=False)
            frames = c.recv()
        if frames is None:
            self.check("single_frame_envelope", False, f"no reply within {self.timeout:g} s")
        else:
            r = self.parse(frames[-1], "single-frame hello")
            self.check("single_frame_envelope", len(frames) == 1 and r.get("type") == "welcome",
                       f"{len(frames)} frame(s), {r.get('type')}")
            c.send({"type": "bye"}, delimiter=False)
            if c.recv() is None:
                self.check("answers:single-frame bye", False, "no reply")
        q = self.client(zmq.REQ)
        r = self.ask(q, self.hello("conformance-req", ()), "REQ hello")
        ok = r.get("type") == "welcome"
        r = self.ask(q, {"type": "bye"}, "REQ bye")
        self.check("req_socket", ok and r.get("type") == "bye", f"REQ hello/bye answered welcome/{r.get('type')}")

    def redirect_address(self, a: _Client) -> None:
        """1.6: a worker's address serves only the sessions the env sent there (nothing to check
        where the env did not redirect)."""
        if a.redirected_to is None:
            return
        self.refused("redirect_serves_only_its_sessions", "not_allowed", self.client(address=a.redirected_to),
                     {**self.hello("conformance-elsewhere", ()), "session": f"{self.session}-elsewhere"},
                     "hello at a redirect's address for another session")
        self.check("redirect_once", self.redirected_twice is None, self.redirected_twice or "welcome or error there")
        if not self.strict:
            return
        # 1.7: a session redirected with a token is taken at the worker's address only with that token
        session, token = f"{self.session}-token", secrets.token_hex(16)
        owner, greeting = self.client(), {**self.hello("conformance-owner", ()), "session": session, "token": token}
        owner.send(greeting)
        frames = owner.recv()
        if frames is None or self.parse(frames[-1], "hello with a token").get("type") != "redirect":
            return  # not redirected this time (no worker ready, say): nothing to check
        owner.follow(str(decode(frames[-1]).get("address")))
        intruder = self.client(address=owner.sock.getsockopt(zmq.LAST_ENDPOINT).decode())
        self.refused("redirect_needs_the_hellos_token", "not_allowed", intruder,
                     self.hello("conformance-intruder", (), session=session),
                     "hello without the token at the redirect's address")
        r = self.ask(owner, greeting, "hello with the token at the redirect's address")
        self.check("redirect_takes_the_hellos_token", r.get("type") == "welcome", f"answered {_short(r)}")
        self.ask(owner, {"type": "bye"}, "bye at the redirect's address")

    def select_client(self, protocol: str, what: str) -> Any:
        """A select agent speaking `protocol`, welcomed in a session of its own; None (the failed
        check recorded) when the env does not welcome it."""
        c, name = self.client(), what.replace("_", "-")
        r = self.ask(c, self.hello(f"conformance-{name}", protocol=protocol,
                                   session=f"{self.session}-{name}-{protocol}"), f"hello {protocol} for {what}")
        return c if self.check(f"{what}_welcome_{protocol}", r.get("type") == "welcome", f"answered {_short(r)}") \
            else None

    def newer_columns(self, what: str, label: str, older: str, columns: dict[str, tuple[str, ...]],
                      options: dict[str, Any], least: int | None, sent: str,
                      refused: dict[str, dict[str, Any]] | None = None) -> None:
        """Columns a minor version added go to an agent of this version (with reset `options`), one integer (>= `least`)
        per job, not to an `older` one; `refused`: reset options refused with bad_request first."""
        for protocol in (PROTOCOL_VERSION, older):
            c = self.select_client(protocol, what)
            if c is None:
                continue
            for name, given in (refused or {}).items() if protocol == PROTOCOL_VERSION else ():
                self.refused(name, "bad_request", c, {"type": "reset", "workload": self.workload, "options": given},
                             f"reset with {given}")
            r = self.reset(c, {"seed": 1, "workload": self.workload, **({"options": options} if options else {})},
                           f"reset for the {label} columns")
            obs = r.get("observation") if r.get("type") == "decision" else None
            problems = [] if isinstance(obs, dict) else [f"the reset answered {_short(r)}"]
            for table, names_ in columns.items() if isinstance(obs, dict) else ():
                t = obs.get(table) if isinstance(obs.get(table), dict) else {}
                rows = len(t.get("id") or [])
                for column in names_:
                    values = t.get(column)
                    if protocol != PROTOCOL_VERSION:
                        if values is not None:
                            problems.append(f"{table}.{column} sent to a {protocol} agent")
                    elif not (isinstance(values, list) and len(values) == rows
                              and all(_is_int(v) and (least is None or v >= least) for v in values)):
                        problems.append(f"{table}.{column} is {_short(values)}, not {rows} integers"
                                        + (f" >= {least}" if least is not None else ""))
            self.check(f"{label}_columns_{protocol}", not problems, "; ".join(problems) or (
                sent if protocol == PROTOCOL_VERSION else f"no {label} columns for a {protocol} agent"))
            self.ask(c, {"type": "bye"}, f"bye after {what}")

    def select_kill(self) -> None:
        """1.4: the joint kind's candidates are the queue window's ids then running ids, a list is
        refused with invalid_action, and the episode plays out."""
        c = self.client()
        r = self.ask(c, self.hello("conformance-select-kill", [SELECT_KILL], session=f"{self.session}-select-kill"),
                     "hello select_kill")
        if not self.check("select_kill_welcome", r.get("type") == "welcome", f"answered {_short(r)}"):
            return
        d = self.reset(c, {"seed": 1, "workload": self.workload}, "reset select_kill")
        problems, n = [], 0
        while d.get("type") == "decision" and n < self.max_decisions:
            n += 1
            obs, cands = d.get("observation") or {}, d.get("candidates") or []
            queued = (obs.get("context") or {}).get("queued")
            if d.get("kind") != SELECT_KILL or not _is_int(queued):
                problems.append(f"decision {d.get('decision')}: kind {d.get('kind')!r}, context.queued {queued!r}")
                break
            if cands[:queued] != (obs.get("queue") or {}).get("id") \
                    or not set(cands[queued:]) <= set((obs.get("running") or {}).get("id") or []):
                problems.append(f"decision {d.get('decision')}: candidates {_short(cands)} are not the queue window's "
                                f"ids then running ids")
            if n == 1 and cands:
                self.refused("select_kill_list_refused", "invalid_action", c,
                             {"type": "act", "decision": d["decision"], "action": cands[:1]}, "select_kill list", d)
            action = cands[0] if queued or not d.get("can_wait") else None
            d = self.settle(c, self.ask(c, {"type": "act", "decision": d["decision"], "action": action},
                                        "act select_kill"), "act select_kill")
        self.check("select_kill_decisions", not problems and d.get("type") == "episode_end"
                   and d.get("reason") == "completed", "; ".join(problems)
                   or f"{n} decisions, then {_outcome(d)}")
        self.ask(c, {"type": "bye"}, "bye after select_kill")


def check_env(address: str, timeout: float = 10.0, *, workload: dict[str, Any] | None = None,
              max_decisions: int = 100_000) -> list[Check]:
    """Run the scripted client session against the env at `address`; one Check per property.
    `workload`: the resets' workload map (default: a 24-job window); the episode is played out."""
    return _EnvChecker(address, timeout, workload, max_decisions).run()


# =========================================================================== check_agent
@dataclass
class _Event:
    peer: bytes
    request: bool
    body: bytes | None = None       # requests: the raw body
    message: Any = None             # the decoded message (requests: None if it did not decode)
    error: ProtocolError | None = None  # requests: why it is not a valid request


class _Recorder:
    """Wraps an EnvService's handle/tick to record traffic; the agent's first reset or join is
    answered `pending` here, as by a slow env, so every agent is seen handling `pending`."""

    def __init__(self, service: Any) -> None:
        self.events: list[_Event] = []
        self.lock = threading.Lock()
        self.service = service
        self._handle, self._tick = service.handle, service.tick
        service.handle, service.tick = self.handle, self.tick
        self.held: dict[bytes, bytes] = {}
        self.delayed: set[bytes] = set()

    def handle(self, peer: bytes, body: bytes) -> list[tuple[bytes, bytes]]:
        event = _Event(peer, True, body)
        try:
            event.message = decode(body)
            validate(event.message, REQUESTS)
        except ProtocolError as err:
            event.error = err
        with self.lock:
            self.events.append(event)
        kind = event.message.get("type") if event.error is None else None
        if peer != CONTROLLER_ID and kind in ("reset", "join") and peer not in self.delayed \
                and peer in getattr(self.service, "peers", {}):
            self.delayed.add(peer)
            self.held[peer] = body
            return self._record([(peer, encode({"type": "pending"}))])
        if peer in self.held and kind in ("poll", "join"):
            body = self.held.pop(peer)   # the slow reset (or join) is answered now
        else:
            self.held.pop(peer, None)
        return self._record(self._handle(peer, body))

    def tick(self) -> list[tuple[bytes, bytes]]:
        return self._record(self._tick())

    def _record(self, replies: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        with self.lock:
            self.events += [_Event(peer, False, None, decode(data)) for peer, data in replies]
        return replies

    def snapshot(self) -> list[_Event]:
        with self.lock:
            return list(self.events)


class _Controller(threading.Thread):
    """Starts episodes for an agent that joins instead of resetting (a driver with no kinds)."""

    def __init__(self, address: str, recorder: _Recorder, timeout: float, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.address, self.recorder, self.timeout, self.stop_event = address, recorder, timeout, stop
        self.episodes = 0
        self.error: str | None = None

    def agent_state(self) -> tuple[str | None, int, bool]:
        """(the agent's session, how many times it asked to join, whether it said bye)."""
        session, joins, bye = None, 0, False
        for ev in self.recorder.snapshot():
            if ev.peer == CONTROLLER_ID or not ev.request or ev.error is not None:
                continue
            kind = ev.message["type"]
            if kind == "hello":
                session = ev.message.get("session", "default")
            elif kind == "join":
                joins += 1
            elif kind == "bye":
                bye = True
        return session, joins, bye

    def run(self) -> None:
        ctx = zmq.Context()
        ctx.setsockopt(zmq.IDENTITY, CONTROLLER_ID)  # its socket's, so the recorder tells its traffic apart
        client, hello_session = _Client(ctx, self.address, self.timeout), None

        def ask(msg: dict[str, Any]) -> dict[str, Any] | None:
            client.send(msg)
            if (frames := client.recv()) is None:
                self.error = f"the env did not answer the controller's {msg['type']}"
                return None
            return decode(frames[-1])

        try:
            while not self.stop_event.is_set():
                session, joins, bye = self.agent_state()
                if bye:
                    break
                if joins <= self.episodes or session is None:
                    self.stop_event.wait(0.02)
                    continue
                if hello_session is None:
                    hello_session = session
                    r = ask({"type": "hello", "protocol": PROTOCOL_VERSION, "agent": "conformance-controller",
                             "kinds": [], "session": session})
                    if r is None or r.get("type") != "welcome":
                        self.error = self.error or f"the controller's hello was refused: {r}"
                        break
                r = ask({"type": "reset"})
                self.episodes += 1
                while r is not None and r.get("type") == "pending" and not self.stop_event.is_set():
                    r = ask({"type": "poll"})
                if r is None or r.get("type") != "episode_end":
                    self.error = self.error or f"the controller's reset ended with {r}"
                    break
            if hello_session is not None:
                ask({"type": "bye"})
        finally:
            client.close()
            ctx.term()


def _fits(decision: dict[str, Any], action: Any) -> str | None:
    """Why `action` cannot answer `decision` (None: it can)."""
    kind, cands = decision.get("kind"), decision.get("candidates") or []
    if kind == "inspect":
        return None if isinstance(action, bool) else f"inspect needs true or false, got {_short(action)}"
    if kind == "select":
        if isinstance(action, dict):  # a standing order (1.4): every candidate, once each
            ranked = action.get("order")
            if list(action) != ["order"] or not isinstance(ranked, list) or sorted(map(str, ranked)) != \
                    sorted(map(str, cands)) or len(set(map(str, ranked))) != len(ranked):
                return f"select order {_short(action)} does not rank every candidate {_short(cands, 80)} once"
            return None
        ids = [] if action is None else action if isinstance(action, list) else [action]
        if not ids:
            return None if decision.get("can_wait") else "nil/empty select while can_wait is false"
    elif kind == SELECT_KILL:
        if isinstance(action, list):
            return f"select_kill takes one job id or nil, got a list {_short(action)}"
        if action is None:
            return None if decision.get("can_wait") else "nil select_kill while can_wait is false"
        ids = [action]
    else:
        if action is None:
            return None
        ids = [action]
    bad = [j for j in ids if not _is_int(j)]
    if bad:
        return f"{kind} action names non-integers {_short(bad)}"
    outside = [j for j in ids if j not in cands]
    if outside:
        return f"{kind} action names job(s) {outside} not among the candidates {_short(cands, 80)}"
    return f"{kind} action names a job twice: {ids}" if len(set(ids)) != len(ids) else None


def _analyse(events: list[_Event], peer: bytes) -> dict[str, list[str] | int | bool]:
    """Walk one agent's traffic in order; collect violations per property."""
    v: dict[str, Any] = {k: [] for k in ("hello", "valid", "one_at_a_time", "echo", "on_pending", "candidates",
                                          "poll", "errors", "after_bye")}
    v.update(requests=0, answered=0, ends=[], bye_sent=False, first=None, kinds=[], replies=Counter())
    outstanding = False
    standing: dict[str, Any] | None = None
    last_reply: str | None = None
    for ev in events:
        if ev.peer != peer:
            continue
        if ev.request:
            v["requests"] += 1
            msg = ev.message if ev.error is None else None
            kind = msg["type"] if msg else None
            if v["first"] is None:
                v["first"] = kind or f"invalid ({ev.error.code})"
            if v["bye_sent"]:
                v["after_bye"].append(f"{kind or 'invalid request'} after bye")
            if outstanding:
                v["one_at_a_time"].append(f"{kind or 'a request'} sent before the reply to the previous one")
            outstanding = True
            if ev.error is not None:
                v["valid"].append(f"{ev.error.code}: {ev.error.message} (body {ev.body[:40]!r})")
            if last_reply == "pending" and kind not in ("poll", "join", "bye"):
                v["poll"].append(f"sent {kind or 'an invalid request'} after pending instead of poll")
            if kind == "hello":
                proto = msg["protocol"]
                if proto.split(".")[0] != MAJOR or len(proto.split(".")) != 2:
                    v["hello"].append(f"protocol {proto!r} is not {MAJOR}.x")
                kinds = msg["kinds"]
                if not all(isinstance(k, str) and k in AGENT_KINDS for k in kinds) \
                        or len(set(map(str, kinds))) != len(kinds):
                    v["hello"].append(f"kinds {kinds!r} are not distinct names among {', '.join(AGENT_KINDS)}")
                v["kinds"] = kinds
            elif kind == "act":
                if standing is None:
                    v["on_pending"].append(f"act on decision {msg['decision']} with no decision pending "
                                           f"(last reply: {last_reply})")
                elif msg["decision"] != standing["decision"]:
                    v["echo"].append(f"act names decision {msg['decision']}, the pending one is {standing['decision']}")
                else:
                    why = _fits(standing, msg["action"])
                    if why:
                        v["candidates"].append(f"decision {standing['decision']}: {why}")
                    v["answered"] += 1
            elif kind == "bye":
                v["bye_sent"] = True
            if kind not in (None, "hello") and v["first"] != "hello" and not v["hello"]:
                v["hello"].append(f"the first request was {v['first']}, not hello")
        else:
            outstanding, msg = False, ev.message
            last_reply = msg.get("type")
            v["replies"][last_reply] += 1
            if last_reply in ("decision", "error", "episode_end"):  # what stands after it
                standing = {"decision": msg, "error": msg.get("pending") or None}.get(last_reply)
            if last_reply == "error":
                v["errors"].append(f"{msg.get('code')}: {msg.get('message')}")
            elif last_reply == "episode_end":
                v["ends"].append(msg.get("reason"))
    return v


def _agent_checks(v: dict[str, Any], proc_rc: int | None, timed_out: bool, elapsed: float, tail: str,
                  controller: _Controller | None) -> list[Check]:
    def joined(items: list[str]) -> str:
        return f"{len(items)} violation(s), first: {items[0]}" + (f"; then: {items[1]}" if len(items) > 1 else "")

    def rule(name: str, key: str, fine: str, ok: bool = True) -> Check:
        return Check(name, ok and not v[key], joined(v[key]) if v[key] else fine)

    replies = v["replies"]
    hello_ok = v["first"] == "hello" and replies["welcome"] > 0
    out = [Check("exits_0", not timed_out and proc_rc == 0,
                 f"still running after {elapsed:.1f} s (killed)" if timed_out else
                 f"exit status {proc_rc}" + (f"; stderr: {tail}" if proc_rc and tail else "")),
           rule("hello", "hello", f"protocol 1.x, kinds {v['kinds']}" if hello_ok else
                f"first request: {v['first']}, welcomed: {replies['welcome'] > 0}", hello_ok),
           rule("valid_requests", "valid", f"{v['requests']} requests, all valid", v["requests"] > 0),
           rule("one_request_at_a_time", "one_at_a_time", "each request waited for its reply"),
           rule("echoes_decision_ids", "echo", f"{v['answered']} acts echoed the pending decision"),
           rule("acts_only_on_pending", "on_pending", "no act without a pending decision"),
           rule("candidate_actions", "candidates", "every action fits its decision's kind and candidates"),
           rule("polls_after_pending", "poll", f"{replies['pending']} pending replies, each followed by poll"
                if replies["pending"] else "never asked again after pending (no pending seen)", replies["pending"] > 0),
           rule("no_error_replies", "errors", "the env refused nothing")]
    out.append(Check("answers_decisions", v["answered"] > 0 or not v["kinds"],
                     f"{replies['decision']} decisions received, {v['answered']} answered"))
    ends = v["ends"]
    completed = bool(ends) and all(r == "completed" for r in ends)
    detail = f"{len(ends)} episode(s): {', '.join(map(str, ends[:3]))}" if ends else "no episode_end received"
    if controller is not None:
        detail += f" (the agent joined; the checker reset {controller.episodes} episode(s)" + \
                  (f", controller: {controller.error})" if controller.error else ")")
    return out + [Check("finishes_episode", completed, detail),
                  rule("says_bye", "after_bye", "bye sent and answered" if v["bye_sent"] else "never said bye",
                       v["bye_sent"] and replies["bye"] > 0)]


@dataclass
class EnvUnderTest:
    """The env check_agent serves: `service.handle(peer, body)`/`tick()` answer requests and
    `serve(service, address, ready=event)` runs it on a socket until `service.stop`."""

    service: Any
    serve: Callable[..., None]


def check_agent(command: str | Sequence[str], env: EnvUnderTest, timeout: float = 30.0) -> list[Check]:
    """Serve `env` to the agent `command` (``{addr}`` replaced by the env's ipc:// address) and
    check the agent's side of the protocol; the agent must finish within `timeout` seconds."""
    tmp, service, ready = tempfile.mkdtemp(prefix="hpcgym-conf-"), env.service, threading.Event()
    addr, recorder, failure = f"ipc://{tmp}/env.sock", _Recorder(service), []

    def serving() -> None:
        try:
            env.serve(service, addr, ready=ready)
        except BaseException as exc:  # reported as a check below
            failure.append(exc)
            ready.set()

    server = threading.Thread(target=serving, name="hpcgym-conformance-env", daemon=True)
    server.start()
    ready.wait(10)
    stop = threading.Event()
    try:
        if failure:
            return [Check("env_started", False, f"the in-process env did not start: {failure[0]}")]
        argv = (shlex.split(command.replace("{addr}", addr)) if isinstance(command, str)
                else [str(a).replace("{addr}", addr) for a in command])
        if not argv:
            return [Check("agent_started", False, "empty command")]
        began = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL)
        except OSError as exc:
            return [Check("agent_started", False, f"cannot start {argv[0]!r}: {exc}")]
        controller = _Controller(addr, recorder, timeout, stop)
        controller.start()
        timed_out = False
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            _, stderr = proc.communicate()
        elapsed = time.monotonic() - began  # what the details report, not the time-out
        stop.set()
        controller.join(timeout=5)
        events = recorder.snapshot()
        peers = [p for p in dict.fromkeys(ev.peer for ev in events if ev.request) if p != CONTROLLER_ID]
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        if not peers:
            return [Check("connects", False, (f"the agent sent no request within {elapsed:.1f} s (killed)"
                                              if timed_out else f"the agent exited after {elapsed:.1f} s "
                                                                "without sending a request")
                          + (f"; stderr: {tail}" if tail else "")),
                    Check("exits_0", not timed_out and proc.returncode == 0,
                          "killed after the time-out" if timed_out else f"exit status {proc.returncode}")]
        results: list[Check] = []
        for peer in peers:
            checks = _agent_checks(_analyse(events, peer), proc.returncode, timed_out, elapsed, tail,
                                   controller if controller.episodes else None)
            results += [Check(f"{c.name}[{peer.hex()[:8]}]", c.passed, c.detail) for c in checks] \
                if len(peers) > 1 else checks
        return results
    finally:
        stop.set()
        service.stop = True
        server.join(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)
