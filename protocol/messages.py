"""Message types of the step/act protocol and their validation (PROTOCOL.md sections 4-6): a
refused message raises `ProtocolError` naming the first problem, so a peer learns what was wrong."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .tables import JOB_TABLES

PROTOCOL_VERSION = "1.8"
MAJOR = PROTOCOL_VERSION.split(".")[0]

# Error codes (PROTOCOL.md section 6). Only version_mismatch and shutdown are not recoverable.
BAD_MESSAGE = "bad_message"          # not msgpack, not a map, no string `type`
UNKNOWN_TYPE = "unknown_type"
BAD_FIELD = "bad_field"              # a field is missing, of the wrong type or out of range
TOO_LARGE = "too_large"
VERSION_MISMATCH = "version_mismatch"
NOT_ALLOWED = "not_allowed"          # valid message, wrong moment (e.g. act before hello)
STALE_DECISION = "stale_decision"    # act for a decision that is not pending (old, repeated)
INVALID_ACTION = "invalid_action"    # the action does not fit the pending decision
BAD_REQUEST = "bad_request"          # reset/join asks for something impossible (bad trace, option)
KIND_TAKEN = "kind_taken"
SHUTDOWN = "shutdown"
INTERNAL = "internal"

ERROR_CODES = (BAD_MESSAGE, UNKNOWN_TYPE, BAD_FIELD, TOO_LARGE, VERSION_MISMATCH, NOT_ALLOWED,
               STALE_DECISION, INVALID_ACTION, BAD_REQUEST, KIND_TAKEN, SHUTDOWN, INTERNAL)
UNRECOVERABLE = frozenset({VERSION_MISMATCH, SHUTDOWN})


class ProtocolError(Exception):
    """A request the env refuses; becomes an `error` reply. `retry_s` (1.7) marks a refusal that
    passes (no worker ready, a cap full): the same request may succeed after that many seconds."""

    def __init__(self, code: str, message: str, retry_s: float | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.retry_s = code, message, retry_s

    @property
    def recoverable(self) -> bool:
        return self.code not in UNRECOVERABLE


@dataclass(frozen=True)
class Field:
    name: str
    types: tuple[type, ...]
    required: bool = True


def _int(name: str, required: bool = True) -> Field:
    return Field(name, (int,), required)


def _str(name: str, required: bool = True) -> Field:
    return Field(name, (str,), required)


NIL = type(None)

#: Requests an agent sends, with their fields.
REQUESTS: dict[str, tuple[Field, ...]] = {
    "hello": (_str("protocol"), _str("agent"), Field("kinds", (list,)), _str("session", False), _str("token", False)),
    "reset": (Field("workload", (dict,), False), _int("seed", False), Field("options", (dict,), False),
              _str("reward", False), Field("require", (list,), False), Field("records", (bool,), False),
              Field("columns", (dict,), False)),
    "join": (Field("columns", (dict,), False),),
    "poll": (),
    "act": (_int("decision"), Field("action", (int, list, bool, NIL, dict))),
    "records": (_int("episode"), _int("page")),
    "bye": (),
}

#: Replies the env sends (documented and checked by the conformance vectors and the checkers).
REPLIES: dict[str, tuple[Field, ...]] = {
    "welcome": (_str("protocol"), _str("session"), Field("env", (dict,)), _str("token", False)),
    "redirect": (_str("address"), _str("session")),
    "decision": (_int("episode"), _int("decision"), _int("step"), _int("time"), _str("kind"),
                 Field("observation", (dict,)), Field("candidates", (list,)), Field("can_wait", (bool,)),
                 Field("reward", (float, int)), _int("ordered", False)),
    "pending": (_int("episode", False),),
    "episode_end": (_int("episode"), _str("reason"), Field("metrics", (dict,)), Field("reward", (float, int)),
                    Field("jobs", (dict, NIL), False), _int("records_pages", False), _int("ordered", False)),
    "records": (_int("episode"), _int("page"), _int("pages"), Field("jobs", (dict,))),
    "error": (_str("code"), _str("message"), Field("recoverable", (bool,)), Field("pending", (dict, NIL)),
              Field("retry_s", (float, int), False)),
    "bye": (),
}


_ABSENT = object()


def validate(message: Any, table: dict[str, tuple[Field, ...]] = REQUESTS, *,
             ignore_unknown: bool = False) -> dict[str, Any]:
    """Check a decoded message against `table`; return it, or raise ProtocolError. With `ignore_unknown` fields the
    table does not list are dropped, as PROTOCOL.md section 8 asks of a reader facing a newer minor version."""
    if not isinstance(message, dict):
        raise ProtocolError(BAD_MESSAGE, f"a message must be a map, got {type(message).__name__}")
    kind = message.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(BAD_MESSAGE, "a message needs a string field 'type'")
    fields = table.get(kind)
    if fields is None:
        raise ProtocolError(UNKNOWN_TYPE, f"unknown message type {kind!r}; expected one of {', '.join(table)}")
    present = 1  # `type`
    for f in fields:
        value = message.get(f.name, _ABSENT)
        if value is _ABSENT:
            if f.required:
                raise ProtocolError(BAD_FIELD, f"{kind}: missing field {f.name!r}")
            continue
        present += 1
        if not isinstance(value, f.types) or (value is True or value is False) and bool not in f.types:
            wanted = " or ".join("nil" if t is NIL else t.__name__ for t in f.types)
            raise ProtocolError(BAD_FIELD, f"{kind}: field {f.name!r} must be {wanted}, got {_describe(value)}")
    if len(message) > present:  # fields the table does not list
        known = {f.name for f in fields} | {"type"}
        if ignore_unknown:
            return {k: v for k, v in message.items() if k in known}
        raise ProtocolError(BAD_FIELD, f"{kind}: unknown field(s) {', '.join(sorted(str(k) for k in message if k not in known))}")
    if table is REQUESTS:
        if kind == "act" and isinstance(message["action"], dict):
            _check_order(message["action"])
        elif "columns" in message:
            _check_columns(kind, message["columns"])
    return message


def _check_order(action: dict[Any, Any]) -> None:
    """The one map an action may be (1.4): a standing order of job ids."""
    if list(action) != ["order"] or not isinstance(action["order"], list) or not action["order"]:
        raise ProtocolError(BAD_FIELD, "act: a map action must be a standing order {'order': [job ids, best first]} "
                                       f"(protocol 1.4), got {_describe(action)}")


def _check_columns(kind: str, columns: dict[Any, Any]) -> None:
    """`columns` (1.8): per job table, the only columns the agent reads (`id` always comes)."""
    for name, wanted in columns.items():
        known = JOB_TABLES.get(name) if isinstance(name, str) else None
        names = {c.name for c in known} if known else set()
        if not known or not isinstance(wanted, list) or not all(isinstance(c, str) and c in names for c in wanted):
            raise ProtocolError(BAD_FIELD, f"{kind}: columns maps a job table ({', '.join(JOB_TABLES)}) to names of "
                                           f"its columns (PROTOCOL.md section 6), got {_describe({name: wanted})}")


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


#: The longest error message the env sends, in characters: what it quotes of a request is cut to
#: fit (a 700 KB `kinds` list must not come back as a 1 MB reply).
MAX_ERROR_CHARS = 600


def shorten(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text`, or its beginning marked as cut: `limit` characters in all, whatever the length of the count in the mark
    (a fixed room for it let a cut text of 100,000 characters and more come to 601 and more)."""
    if len(text) <= limit:
        return text
    mark = f"... ({len(text):,} characters in all)"
    return text[:limit - len(mark)] + mark


def error(err: ProtocolError, pending: dict[str, Any] | None = None) -> dict[str, Any]:
    reply = {"type": "error", "code": err.code, "message": shorten(err.message), "recoverable": err.recoverable,
             "pending": pending}
    if err.retry_s is not None:
        reply["retry_s"] = float(err.retry_s)
    return reply


def redirect_target(connected: str, given: str) -> str:
    """Where a `redirect` (1.6) sends an agent that connected to `connected`: its `address`, in
    which `tcp://*:PORT` means the host the agent connected to (PROTOCOL.md section 2)."""
    if given.startswith("tcp://*:") and connected.startswith("tcp://"):
        return connected[:connected.rindex(":")] + given[len("tcp://*"):]
    return given
