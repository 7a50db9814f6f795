"""Write the protocol conformance vectors (PROTOCOL.md sections 3-5) from Python literals.

    python protocol/vectors/make_vectors.py           # (re)write NAME.msgpack files and index.json
    python protocol/vectors/make_vectors.py --check   # exit 1 if the files on disk differ

Each vector is one message body (NAME.msgpack) and an entry of index.json (its `about` says how
to read one: `decoded` for a valid body, the `error` code and `stage` for an invalid one, its
`bytes`, `sha256` and, up to 512 bytes, `hex`). Needs only the ``msgpack`` package; invalid
bodies are spelled out byte by byte where an encoder would not produce them."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import msgpack

HERE = Path(__file__).resolve().parent
PROTOCOL = "1.8"
HEX_UP_TO = 512
ABOUT = ("Each vector is one message body (file) and its expected outcome. valid: decoded is the message as "
         "JSON (a number with a decimal point is a msgpack float, one without an integer). invalid: error is "
         "the code a reader refuses it with; stage is where the Python reference refuses it (decode: "
         "protocol/codec.py, validate: protocol/messages.py). canonical: the bytes are the shortest encoding with "
         "map entries in the order of decoded, so an encoder that writes shortest forms produces exactly them. "
         "Replies are read as section 8 says: fields a reader does not know are ignored. Regenerate with "
         "make_vectors.py; see PROTOCOL.md.")


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def s(text: str) -> bytes:
    """A msgpack str header and its UTF-8 bytes (for hand-built bodies)."""
    data = text.encode()
    assert len(data) < 32, "fixstr only"
    return bytes([0xA0 | len(data)]) + data


# --------------------------------------------------------------------------- building blocks
OBSERVATION_SELECT = {
    "time": 120, "procs": 8, "free": 2, "queue_length": 2,
    "queue": {"id": [3, 4], "submit": [100, 110], "size": [4, 2], "requested": [600, 60],
              "estimate": [600, 60], "wait": [20, 10], "rejections": [0, 0], "user": [7, -1]},
    "running": {"id": [1], "start": [0], "size": [6], "requested": [3600], "estimated_end": [3600]},
    "context": {},
}
OBSERVATION_EMPTY = {
    "time": 500, "procs": 8, "free": 8, "queue_length": 1,
    "queue": {"id": [9], "submit": [480], "size": [2], "requested": [60], "estimate": [60], "wait": [20],
              "rejections": [1], "user": [3]},
    "running": {"id": [], "start": [], "size": [], "requested": [], "estimated_end": []},
}
METRICS = {"jobs": 3, "mean_wait": 56.67, "max_wait": 90, "mean_response": 110.0, "mean_slowdown": 4.5,
           "mean_bsld": 4.27, "max_bsld": 10.0, "utilization": 0.61, "makespan": 150, "kills": 0,
           "lost_work": 0, "walltime_killed": 0, "started_ready": 0.3333333333333333,
           "started_reserved": 0.6666666666666666, "started_backfilled": 0.0}
JOBS = {"job_id": [1, 2, 3], "submit": [0, 10, 20], "start": [0, 100, 100], "end": [100, 150, 110],
        "wait": [0, 90, 80], "run": [100, 50, 10], "size": [4, 2, 2], "requested": [100, 60, 20],
        "response": [100, 140, 90], "slowdown": [1.0, 2.8, 9.0], "bsld": [1.0, 2.8, 9.0], "kills": [0, 0, 0],
        "rejections": [0, 0, 0], "lost_work": [0, 0, 0], "walltime_killed": [0, 0, 0], "start_kind": [0, 1, 1]}
WELCOME_ENV = {
    "kinds": ["select", "inspect", "backfill", "kill"],
    "policies": ["fcfs", "sjf"],
    "rewards": {"none": "no reward", "bsld": "minus the mean bounded slowdown at the end"},
    "defaults": {"workload": {}, "options": {"backfill": "easy", "policy": "fcfs"}, "policy": "fcfs", "seed": 0,
                 "reward": "none"},
    "limits": {"max_message_bytes": 16777216, "heartbeat_s": 1.0, "decision_timeout_s": 30.0},
    "on_agent_lost": "fallback",
}
PENDING_MAP = {"decision": 12, "kind": "select", "time": 120, "candidates": [3, 4], "can_wait": True}


def decision(kind: str, **over: Any) -> dict[str, Any]:
    msg = {"type": "decision", "episode": 1, "decision": 12, "step": 40, "time": 120, "kind": kind,
           "observation": OBSERVATION_SELECT, "candidates": [3, 4], "can_wait": True, "reward": 0.0}
    msg.update(over)
    return msg


# --------------------------------------------------------------------------- the vectors
# (name, direction, body, expected): expected is ("valid", decoded) or (error code, stage).
VECTORS: list[tuple[str, str, bytes, tuple[str, Any], str]] = []


def valid(name: str, direction: str, msg: dict[str, Any], description: str) -> None:
    VECTORS.append((name, direction, pack(msg), ("valid", msg), description))


def invalid(name: str, direction: str, body: bytes | dict[str, Any] | Any, code: str, stage: str,
            description: str) -> None:
    data = body if isinstance(body, bytes) else pack(body)
    VECTORS.append((name, direction, data, (code, stage), description))


# ---- requests, valid
valid("hello_minimal", "request", {"type": "hello", "protocol": "1.0", "agent": "sjf", "kinds": ["select"]},
      "a 1.0 hello without the optional session")
valid("hello_1_4", "request", {"type": "hello", "protocol": "1.4", "agent": "sjf", "kinds": ["select"]},
      "a 1.4 hello without the optional session and token (the bytes of PROTOCOL.md section 10)")
valid("hello_session", "request",
      {"type": "hello", "protocol": "1.0", "agent": "inspector", "kinds": ["inspect"], "session": "exp-7"},
      "hello with the optional session")
valid("hello_token", "request",
      {"type": "hello", "protocol": "1.3", "agent": "inspector", "kinds": ["inspect"], "session": "exp-7",
       "token": "3f9c2a7d41e0b8a6"},
      "1.3: joining a private session that has agents takes its token (the first agent's hello sets it)")
invalid("hello_token_int", "request",
        {"type": "hello", "protocol": "1.3", "agent": "a", "kinds": [], "token": 42}, "bad_field", "validate",
        "token as an integer, not a string")
valid("hello_no_kinds", "request", {"type": "hello", "protocol": "1.0", "agent": "driver", "kinds": []},
      "a driver that only resets takes no kinds (empty array)")
valid("hello_all_kinds", "request",
      {"type": "hello", "protocol": "1.3", "agent": "all", "kinds": ["select", "inspect", "backfill", "kill"]},
      "all four kinds; a 1.x minor version is the same major")
valid("hello_select_kill", "request",
      {"type": "hello", "protocol": "1.4", "agent": "rlschert", "kinds": ["select_kill", "inspect", "backfill"]},
      "1.4: the joint select+kill kind, which takes the place of select and kill")
valid("hello_utf8_name", "request", {"type": "hello", "protocol": "1.0", "agent": "agent-é-调度", "kinds": []},
      "agent name with non-ASCII UTF-8 text")
valid("reset_empty", "request", {"type": "reset"}, "reset with every optional field absent")
valid("reset_full", "request",
      {"type": "reset", "workload": {"trace": "/data/SDSC-SP2.swf.gz", "procs": 128, "jobs": 1024, "sample": 7},
       "seed": 3, "options": {"policy": "sjf", "backfill": "easy", "estimate": "noisy:0.2", "window": 64},
       "reward": "bsld", "require": ["select", "inspect"], "records": True,
       "columns": {"queue": ["submit", "requested", "size"], "running": ["estimated_end"]}},
      "reset with every optional field present")
valid("reset_records_false", "request", {"type": "reset", "seed": -1, "records": False},
      "records false; a negative seed is an integer like any other (the env may refuse its value)")
valid("records_request", "request", {"type": "records", "episode": 4, "page": 0},
      "1.3: the first page of the per-job records an episode_end announced with records_pages")
valid("reset_window_start", "request",
      {"type": "reset", "workload": {"jobs": 256, "start": 1000}, "options": {"policy": "sjf"}},
      "a window from the trace's job 1000 (start, by position), queued in SJF order (the policy option)")
valid("join", "request", {"type": "join"}, "join without its optional columns")
valid("join_columns", "request", {"type": "join", "columns": {"queue": ["size", "wait"]}},
      "1.8: only the queue's id, size and wait (and the running jobs' id) are sent to this agent")
valid("poll", "request", {"type": "poll"}, "poll has no fields")
valid("bye_request", "request", {"type": "bye"}, "bye has no fields")
valid("act_int", "request", {"type": "act", "decision": 7, "action": 42},
      "act naming one job id (the bytes of PROTOCOL.md section 10)")
valid("act_nil", "request", {"type": "act", "decision": 8, "action": None}, "nil action: wait / stop / no kill")
valid("act_list", "request", {"type": "act", "decision": 9, "action": [3, 4, 17]},
      "a list of job ids (select: start all)")
valid("act_empty_list", "request", {"type": "act", "decision": 9, "action": []}, "an empty list (select: wait)")
valid("act_order", "request", {"type": "act", "decision": 9, "action": {"order": [4, 3]}},
      "1.4: a standing order ranking every candidate, best first (select)")
valid("act_true", "request", {"type": "act", "decision": 10, "action": True}, "inspect: accept")
valid("act_false", "request", {"type": "act", "decision": 10, "action": False}, "inspect: reject")
valid("act_large_ids", "request", {"type": "act", "decision": 4294967296, "action": 18446744073709551615},
      "integers beyond 32 bits (uint 64)")
valid("act_negative_action", "request", {"type": "act", "decision": 1, "action": -5},
      "a negative integer is a well-formed action; the env answers invalid_action (not a candidate)")
valid("act_list_mixed", "request", {"type": "act", "decision": 1, "action": [1, "two"]},
      "an array is well-formed whatever it holds; the env answers invalid_action (not job ids)")
VECTORS.append(("map32_header", "request", b"\xdf\x00\x00\x00\x01" + s("type") + s("poll"),
                ("valid", {"type": "poll"}), "a map in the map 32 form: readers accept every msgpack size form"))
VECTORS.append(("str8_type", "request", b"\x81\xd9\x04type\xd9\x04join",
                ("valid", {"type": "join"}), "strings in the str 8 form"))
VECTORS.append(("int_wide_forms", "request",
                b"\x83" + s("type") + s("act") + s("decision") + b"\xcf\x00\x00\x00\x00\x00\x00\x00\x07"
                + s("action") + b"\xd0\x2a",
                ("valid", {"type": "act", "decision": 7, "action": 42}),
                "integers in the uint 64 and int 8 forms (non-minimal encodings are still integers)"))

# ---- requests, invalid: not a message
invalid("empty_body", "request", b"", "bad_message", "decode", "zero bytes")
invalid("truncated_act", "request", pack({"type": "act", "decision": 7, "action": 42})[:-1], "bad_message",
        "decode", "act_int without its last byte")
invalid("truncated_map_header", "request", b"\x83", "bad_message", "decode", "a map header of 3 entries, nothing else")
invalid("truncated_str", "request", b"\x81" + s("type") + b"\xa5hel", "bad_message", "decode",
        "a string shorter than its header says")
invalid("trailing_byte", "request", pack({"type": "poll"}) + b"\x00", "bad_message", "decode",
        "a valid poll followed by one extra byte")
invalid("two_messages", "request", pack({"type": "poll"}) + pack({"type": "bye"}), "bad_message", "decode",
        "two complete messages in one body")
invalid("reserved_byte", "request", b"\xc1", "bad_message", "decode", "0xc1, the byte msgpack never uses")
invalid("garbage", "request", b"GET / HTTP/1.1\r\n\r\n", "bad_message", "decode",
        "text that is not msgpack (its first byte is a fixint, so it has trailing bytes)")
invalid("invalid_utf8", "request", b"\x81" + s("type") + b"\xa2\xff\xfe", "bad_message", "decode",
        "a str whose bytes are not UTF-8")
invalid("int_map_key", "request", b"\x82" + s("type") + s("poll") + b"\x01\x02", "bad_message", "decode",
        "a map with an integer key (keys are strings)")
invalid("int_map_key_only", "request", b"\x81\x01" + s("poll"), "bad_message", "decode",
        "a map whose only key is an integer")
invalid("int_map_key_nested", "request", b"\x82" + s("type") + s("reset") + s("options") + b"\x81\x01\x02",
        "bad_message", "decode", "an integer key in a nested map: every map has string keys")
invalid("ext_action", "request", b"\x83" + s("type") + s("act") + s("decision") + b"\x01" + s("action")
        + b"\xd4\x05\x2a", "bad_message", "decode", "an ext value (fixext 1, type 5): ext types are refused")
invalid("empty_ext_action", "request", b"\x83" + s("type") + s("act") + s("decision") + b"\x01" + s("action")
        + b"\xc7\x00\x05", "bad_message", "decode", "an ext value of length 0 (ext 8, type 5): ext types are refused")
invalid("timestamp_action", "request", pack({"type": "act", "decision": 1, "action": msgpack.Timestamp(1, 0)}),
        "bad_message", "decode", "a timestamp (ext type -1): ext types are refused")
invalid("non_map_array", "request", pack(["act", 7, 42]), "bad_message", "validate", "an array, not a map")
invalid("non_map_str", "request", pack("hello"), "bad_message", "validate", "a string, not a map")
invalid("non_map_int", "request", pack(7), "bad_message", "validate", "an integer, not a map")
invalid("non_map_nil", "request", pack(None), "bad_message", "validate", "nil, not a map")
invalid("empty_map", "request", pack({}), "bad_message", "validate", "a map without type")
invalid("missing_type", "request", {"decision": 7, "action": 42}, "bad_message", "validate",
        "act fields without type")
invalid("type_int", "request", {"type": 3}, "bad_message", "validate", "type is an integer")
invalid("type_nil", "request", {"type": None}, "bad_message", "validate", "type is nil")
invalid("type_bin", "request", {"type": b"poll"}, "bad_message", "validate",
        "type as bin, not str (bin is not used)")
invalid("unknown_type", "request", {"type": "step", "action": 1}, "unknown_type", "validate", "no such request")
invalid("type_case", "request", {"type": "Hello", "protocol": "1.0", "agent": "a", "kinds": []}, "unknown_type",
        "validate", "type names are case-sensitive")
invalid("reply_type_as_request", "request", {"type": "welcome", "protocol": "1.0", "session": "default", "env": {}},
        "unknown_type", "validate", "a reply type sent by an agent")
# ---- requests, invalid: fields
invalid("hello_missing_protocol", "request", {"type": "hello", "agent": "a", "kinds": []}, "bad_field", "validate",
        "hello without protocol")
invalid("hello_missing_kinds", "request", {"type": "hello", "protocol": "1.0", "agent": "a"}, "bad_field",
        "validate", "hello without kinds")
invalid("hello_protocol_float", "request", {"type": "hello", "protocol": 1.0, "agent": "a", "kinds": []},
        "bad_field", "validate", "protocol as a float, not the string \"1.0\"")
invalid("hello_kinds_str", "request", {"type": "hello", "protocol": "1.0", "agent": "a", "kinds": "select"},
        "bad_field", "validate", "kinds as a string, not an array")
invalid("hello_agent_bin", "request", {"type": "hello", "protocol": "1.0", "agent": b"sjf", "kinds": []},
        "bad_field", "validate", "agent as bin, not str")
invalid("hello_session_nil", "request",
        {"type": "hello", "protocol": "1.0", "agent": "a", "kinds": [], "session": None}, "bad_field", "validate",
        "an optional field is omitted, never nil, unless its type says so")
invalid("hello_unknown_field", "request",
        {"type": "hello", "protocol": "1.0", "agent": "a", "kinds": [], "name": "a"}, "bad_field", "validate",
        "a field hello does not have")
invalid("reset_seed_float", "request", {"type": "reset", "seed": 3.0}, "bad_field", "validate",
        "seed as a float")
invalid("reset_seed_bool", "request", {"type": "reset", "seed": True}, "bad_field", "validate",
        "seed as a bool: bool is not an integer")
invalid("reset_records_int", "request", {"type": "reset", "records": 1}, "bad_field", "validate",
        "records as an integer, not a bool")
invalid("reset_workload_array", "request", {"type": "reset", "workload": ["trace.swf"]}, "bad_field", "validate",
        "workload as an array, not a map")
invalid("reset_require_str", "request", {"type": "reset", "require": "select"}, "bad_field", "validate",
        "require as a string, not an array")
invalid("reset_unknown_field", "request", {"type": "reset", "policy": "sjf"}, "bad_field", "validate",
        "policy belongs in options, not at the top level")
invalid("records_page_missing", "request", {"type": "records", "episode": 4}, "bad_field", "validate",
        "records without page")
invalid("join_unknown_field", "request", {"type": "join", "session": "default"}, "bad_field", "validate",
        "join takes no session (the session is chosen at hello)")
invalid("join_columns_unknown", "request", {"type": "join", "columns": {"queue": ["size", "colour"]}}, "bad_field",
        "validate", "1.8: columns names a column the queue table does not have")
invalid("poll_unknown_field", "request", {"type": "poll", "decision": 3}, "bad_field", "validate",
        "poll has no fields")
invalid("bye_unknown_field", "request", {"type": "bye", "reason": "done"}, "bad_field", "validate",
        "bye has no fields")
invalid("act_missing_decision", "request", {"type": "act", "action": 42}, "bad_field", "validate",
        "act without decision")
invalid("act_missing_action", "request", {"type": "act", "decision": 7}, "bad_field", "validate",
        "act without action: nil must be sent explicitly")
invalid("act_decision_str", "request", {"type": "act", "decision": "7", "action": 42}, "bad_field", "validate",
        "decision as a string")
invalid("act_decision_nil", "request", {"type": "act", "decision": None, "action": 42}, "bad_field", "validate",
        "decision as nil")
invalid("act_decision_bool", "request", {"type": "act", "decision": True, "action": 42}, "bad_field", "validate",
        "decision as a bool")
invalid("act_decision_float", "request", {"type": "act", "decision": 7.0, "action": 42}, "bad_field", "validate",
        "decision as a float")
invalid("act_action_float", "request", {"type": "act", "decision": 7, "action": 42.0}, "bad_field", "validate",
        "action as a float: job ids are integers")
invalid("act_action_str", "request", {"type": "act", "decision": 7, "action": "42"}, "bad_field", "validate",
        "action as a string")
invalid("act_action_map", "request", {"type": "act", "decision": 7, "action": {"job": 42}}, "bad_field",
        "validate", "action as a map")
invalid("act_order_empty", "request", {"type": "act", "decision": 7, "action": {"order": []}}, "bad_field",
        "validate", "a standing order that ranks nothing")
invalid("act_order_extra_key", "request", {"type": "act", "decision": 7, "action": {"order": [3, 4], "then": 1}},
        "bad_field", "validate", "a standing order with a key besides 'order'")
invalid("act_action_bin", "request", {"type": "act", "decision": 7, "action": b"\x2a"}, "bad_field", "validate",
        "action as bin")
invalid("act_unknown_field", "request", {"type": "act", "decision": 7, "action": 42, "episode": 1}, "bad_field",
        "validate", "a field act does not have")
# ---- requests, invalid: limits (section 3)
invalid("too_long_str", "request",
        {"type": "hello", "protocol": "1.0", "agent": "a" * 1_000_001, "kinds": []}, "too_large", "decode",
        "a string of 1,000,001 bytes (the limit is 1,000,000)")
invalid("too_long_array", "request", {"type": "act", "decision": 1, "action": [0] * 1_000_001}, "too_large",
        "decode", "an array of 1,000,001 entries (the limit is 1,000,000)")

# ---- replies, valid
valid("welcome", "reply", {"type": "welcome", "protocol": "1.0", "session": "default", "env": WELCOME_ENV},
      "welcome with a full env description")
valid("welcome_token", "reply",
      {"type": "welcome", "protocol": "1.3", "session": "exp-7", "env": {**WELCOME_ENV, "sessions": "private"},
       "token": "3f9c2a7d41e0b8a6"},
      "1.3: the session's token, which other agents present to join it; env.sessions says private or open")
valid("redirect_tcp", "reply", {"type": "redirect", "address": "tcp://*:40123", "session": "exp-7"},
      "1.6: say the hello again at a worker's address; tcp://*:PORT means the host the agent connected to")
valid("redirect_ipc", "reply", {"type": "redirect", "address": "ipc:///tmp/hpcgym.ipc.w0.1", "session": "default"},
      "1.6: say the hello again at a worker's ipc address")
valid("decision_select", "reply", decision("select"), "a select decision with its observation")
valid("decision_select_no_wait", "reply",
      decision("select", decision=13, step=41, time=500, observation=OBSERVATION_EMPTY, candidates=[9],
               can_wait=False, reward=-1.5),
      "select that cannot wait; the observation has no context key and empty running columns")
valid("decision_inspect", "reply",
      decision("inspect", candidates=[3],
               observation={**OBSERVATION_SELECT, "context": {"jobs": [3], "rejections": 0, "max_rejections": 72}}),
      "inspect: the picked ids, context jobs/rejections/max_rejections")
valid("decision_backfill", "reply",
      decision("backfill", candidates=[4],
               observation={**OBSERVATION_SELECT, "context": {"reserved": 3, "shadow_time": 3600, "extra": 0}}),
      "backfill: context reserved/shadow_time/extra")
valid("decision_backfill_no_stop", "reply",
      decision("backfill", candidates=[4, 5], can_wait=False,
               observation={**OBSERVATION_SELECT, "context": {"reserved": 3, "shadow_time": 3600, "extra": 0}}),
      "backfill that cannot stop (backfill_stop false, 1.2): nil is refused, start one of the candidates")
valid("reset_easy_variants", "request",
      {"type": "reset", "workload": {"trace": "/data/SDSC-SP2.swf.gz", "cleaning": "rlbf-scw", "jobs": 256, "sample": 1},
       "options": {"preset": "rlbf-public", "backfill_order": "sjf", "easy_extra": False},
       "reward": "relative:bsld:pct:fcfs:sjf+delay_penalty:0.001"},
      "1.2: a preset with options over it, the rlbf-scw cleaning, a sum of rewards")
valid("decision_reward_int", "reply", decision("select", reward=0),
      "an integer reward: an env sends floats, a reader accepts an integer too (section 3)")
valid("decision_kill", "reply", decision("kill", candidates=[1], reward=0.25), "kill: candidates are running jobs")
valid("reset_prediction", "request",
      {"type": "reset", "options": {"prediction": "running:0.4,0.1,0.03,300", "estimate": "predicted"},
       "reward": "system_slowdown_prediction"},
      "1.4: the running predictor, reservations on its predictions, RLSchert's eq. (9) reward")
valid("decision_kill_predictions", "reply",
      decision("kill", candidates=[1], observation={
          **OBSERVATION_SELECT, "queue": {**OBSERVATION_SELECT["queue"], "prediction": [540, 60]},
          "running": {**OBSERVATION_SELECT["running"], "submit": [0], "prediction0": [1800], "prediction": [4200]}}),
      "1.4: an episode with a predictor, to a 1.4 agent: queue.prediction (pre-run), running.submit, "
      "running.prediction0 (pre-run) and running.prediction (current)")
valid("decision_job_columns", "reply",
      decision("select", candidates=[3, 4], observation={
          **OBSERVATION_SELECT, "queue": {**OBSERVATION_SELECT["queue"], "group": [2, -1], "executable": [17, -1],
                                          "memory": [65536, -1]}}),
      "1.5: to a 1.5 agent, the queued jobs' group, executable and requested memory (kB per processor; SWF "
      "fields 13, 14 and 10; -1 where the trace does not say)")
valid("decision_select_kill", "reply",
      decision("select_kill", candidates=[3, 4, 1], observation={**OBSERVATION_SELECT, "context": {"queued": 2}}),
      "1.4: the joint decision: the queue window's ids, then the running ids that may be killed; "
      "context.queued says how many are queued")
valid("pending", "reply", {"type": "pending", "episode": 2}, "pending with the episode number")
valid("pending_bare", "reply", {"type": "pending"}, "pending without the optional episode")
valid("pending_episode_zero", "reply", {"type": "pending", "episode": 0},
      "pending before the session's first episode: episode 0")
valid("episode_end_completed", "reply",
      {"type": "episode_end", "episode": 1, "reason": "completed", "metrics": METRICS, "reward": -4.27,
       "jobs": None}, "episode end with metrics and jobs nil")
valid("episode_end_records", "reply",
      {"type": "episode_end", "episode": 1, "reason": "completed", "metrics": METRICS, "reward": 0.0, "jobs": JOBS},
      "episode end with per-job columns (reset records: true)")
valid("episode_end_reset", "reply",
      {"type": "episode_end", "episode": 3, "reason": "reset by 'sjf@12'", "metrics": {}, "reward": 0.0},
      "an episode ended early: empty metrics, optional jobs absent")
valid("episode_end_shutdown", "reply",
      {"type": "episode_end", "episode": 2, "reason": "shutdown", "metrics": {}, "reward": 0.0},
      "the env stopped (SIGTERM) mid-episode: also the reply to the act of an agent that was computing it")
valid("decision_ordered", "reply", decision("select", decision=19, step=47, time=300, ordered=5),
      "1.4: five select decisions were answered by this agent's standing order since its previous decision")
valid("episode_end_ordered", "reply",
      {"type": "episode_end", "episode": 2, "reason": "completed", "metrics": METRICS, "reward": -3.5, "jobs": None,
       "ordered": 12},
      "1.4: the last twelve select decisions were answered by the agent's standing order")
valid("episode_end_paged", "reply",
      {"type": "episode_end", "episode": 4, "reason": "completed", "metrics": METRICS, "reward": 0.0, "jobs": None,
       "records_pages": 9},
      "1.3: records too many for one message: jobs nil, fetch pages 0..8 with `records` requests")
valid("records_reply", "reply", {"type": "records", "episode": 4, "page": 0, "pages": 9, "jobs": JOBS},
      "1.3: one page of per-job records, the same columns as episode_end's jobs")
valid("error_stale", "reply",
      {"type": "error", "code": "stale_decision", "message": "decision 99 is not pending for this agent",
       "recoverable": True, "pending": None}, "an error with no decision standing")
valid("error_with_pending", "reply",
      {"type": "error", "code": "invalid_action", "message": "job 5 is not a valid select choice",
       "recoverable": True, "pending": PENDING_MAP}, "an error repeating the decision still standing")
valid("error_retry", "reply",
      {"type": "error", "code": "not_allowed", "retry_s": 2.0, "recoverable": True, "pending": None,
       "message": "no worker process of this env is ready (one is starting in the place of one that failed): "
                  "try again in 2 s"},
      "1.7: a refusal that passes by itself says when to try again")
valid("error_version", "reply",
      {"type": "error", "code": "version_mismatch", "message": "this env speaks protocol 1.0",
       "recoverable": False, "pending": None}, "an unrecoverable error")
valid("bye_reply", "reply", {"type": "bye"}, "the reply to bye")
# ---- replies, invalid
invalid("reply_unknown_type", "reply", {"type": "result", "episode": 1}, "unknown_type", "validate",
        "no such reply")
invalid("reply_missing_type", "reply", {"episode": 1}, "bad_message", "validate", "a reply without type")
invalid("decision_missing_candidates", "reply",
        {k: v for k, v in decision("select").items() if k != "candidates"}, "bad_field", "validate",
        "decision without candidates")
invalid("decision_can_wait_int", "reply", decision("select", can_wait=1), "bad_field", "validate",
        "can_wait as an integer")
invalid("decision_reward_str", "reply", decision("select", reward="0"), "bad_field", "validate",
        "reward as a string")
invalid("decision_observation_nil", "reply", decision("select", observation=None), "bad_field", "validate",
        "observation as nil")
invalid("redirect_missing_address", "reply", {"type": "redirect", "session": "default"},
        "bad_field", "validate", "redirect without address")
invalid("welcome_missing_env", "reply", {"type": "welcome", "protocol": "1.0", "session": "default"},
        "bad_field", "validate", "welcome without env")
invalid("pending_episode_nil", "reply", {"type": "pending", "episode": None}, "bad_field", "validate",
        "optional episode sent as nil")
invalid("episode_end_metrics_nil", "reply",
        {"type": "episode_end", "episode": 1, "reason": "completed", "metrics": None, "reward": 0.0},
        "bad_field", "validate", "metrics as nil (an empty map when the episode did not complete)")
invalid("error_missing_pending", "reply",
        {"type": "error", "code": "bad_field", "message": "x", "recoverable": True}, "bad_field", "validate",
        "error without pending: it is required, nil when nothing stands")
invalid("error_recoverable_str", "reply",
        {"type": "error", "code": "bad_field", "message": "x", "recoverable": "yes", "pending": None},
        "bad_field", "validate", "recoverable as a string")
invalid("reply_int_map_key", "reply", b"\x82" + s("type") + s("pending") + b"\x01\x01", "bad_message", "decode",
        "a reply with an integer key")
invalid("reply_trailing_byte", "reply", pack({"type": "bye"}) + b"\xc0", "bad_message", "decode",
        "a bye reply followed by nil")
# Section 8: "a reader MUST ignore reply fields it does not know" (minor versions add reply fields).
valid("pending_future_field", "reply", {"type": "pending", "episode": 1, "retry_after_ms": 50},
      "a reply field from a later 1.x minor version: readers MUST ignore it (section 8)")


# --------------------------------------------------------------------------- writing
def build() -> tuple[dict[str, bytes], bytes]:
    """The files to write: {file name: bytes}, and index.json's bytes."""
    files: dict[str, bytes] = {}
    entries = []
    for name, direction, data, (outcome, detail), description in VECTORS:
        file = f"{name}.msgpack"
        assert file not in files, f"duplicate vector name {name}"
        files[file] = data
        entry: dict[str, Any] = {"name": name, "file": file, "direction": direction, "valid": outcome == "valid",
                                 "description": description}
        if outcome == "valid":
            entry["decoded"] = detail
            entry["canonical"] = pack(detail) == data
        else:
            entry["error"] = outcome
            entry["stage"] = detail
        entry["bytes"] = len(data)
        entry["sha256"] = hashlib.sha256(data).hexdigest()
        if len(data) <= HEX_UP_TO:
            entry["hex"] = data.hex(" ")
        entries.append(entry)
    index = {"protocol": PROTOCOL, "generator": "protocol/vectors/make_vectors.py",
             "about": ABOUT, "vectors": entries}
    return files, (json.dumps(index, indent=1, ensure_ascii=False) + "\n").encode()


def main(argv: list[str]) -> int:
    files, index = build()
    files["index.json"] = index
    stale = sorted(name for name, data in files.items()
                   if not (HERE / name).is_file() or (HERE / name).read_bytes() != data)
    extra = sorted(p.name for p in HERE.glob("*.msgpack") if p.name not in files)
    if "--check" in argv:
        for name in stale:
            print(f"out of date: {name}")
        for name in extra:
            print(f"not generated: {name}")
        return 1 if stale or extra else 0
    for name in stale:
        (HERE / name).write_bytes(files[name])
    for name in extra:
        (HERE / name).unlink()
    print(f"{len(files) - 1} vectors in {HERE}: {len(stale)} written, {len(extra)} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
