"""Write the protocol conformance vectors (PROTOCOL.md sections 3-5), one message body per NAME.msgpack
and its entry in index.json, from Python literals (needs only ``msgpack``; invalid bodies are spelled
out byte by byte where an encoder would not produce them).

    python protocol/vectors/make_vectors.py           # (re)write NAME.msgpack files and index.json
    python protocol/vectors/make_vectors.py --check   # exit 1 if the files on disk differ"""

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
    "kinds": ["select", "inspect", "backfill", "kill"], "policies": ["fcfs", "sjf"],
    "rewards": {"none": "no reward", "bsld": "minus the mean bounded slowdown at the end"},
    "defaults": {"workload": {}, "options": {"backfill": "easy", "policy": "fcfs"}, "policy": "fcfs", "seed": 0,
                 "reward": "none"},
    "limits": {"max_message_bytes": 16777216, "heartbeat_s": 1.0, "decision_timeout_s": 30.0},
    "on_agent_lost": "fallback",
}
PENDING_MAP = {"decision": 12, "kind": "select", "time": 120, "candidates": [3, 4], "can_wait": True}


def decision(kind: str, **over: Any) -> dict[str, Any]:
    return {"type": "decision", "episode": 1, "decision": 12, "step": 40, "time": 120, "kind": kind,
            "observation": OBSERVATION_SELECT, "candidates": [3, 4], "can_wait": True, "reward": 0.0, **over}


def hello(protocol: Any, agent: Any, kinds: Any, **fields: Any) -> dict[str, Any]:
    return {"type": "hello", "protocol": protocol, "agent": agent, "kinds": kinds, **fields}


def act(decision: Any, action: Any, **fields: Any) -> dict[str, Any]:
    return {"type": "act", "decision": decision, "action": action, **fields}


def end(episode: int, reason: str, metrics: Any, reward: Any, **fields: Any) -> dict[str, Any]:
    return {"type": "episode_end", "episode": episode, "reason": reason, "metrics": metrics, "reward": reward, **fields}


def error(code: str, message: str, recoverable: Any = True, **fields: Any) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message, "recoverable": recoverable, **fields}


# --------------------------------------------------------------------------- the vectors
# (name, direction, body, expected, description): expected is ("valid", decoded) or (error code, stage).
VECTORS: list[tuple[str, str, bytes, tuple[str, Any], str]] = []


def add(direction: str, outcome: str, rows: list[tuple[Any, ...]], stage: str = "validate") -> None:
    """Vectors of one direction and outcome ("valid" or the error code readers refuse them with, at
    `stage`): rows of (name, message or body bytes, description[, what hand-built valid bytes decode to])."""
    for name, body, description, *decoded in rows:
        data = body if isinstance(body, bytes) else pack(body)
        expected = ("valid", decoded[0] if decoded else body) if outcome == "valid" else (outcome, stage)
        VECTORS.append((name, direction, data, expected, description))


# ---- requests, valid
add("request", "valid", [
    ("hello_minimal", hello("1.0", "sjf", ["select"]), "a 1.0 hello without the optional session"),
    ("hello_1_4", hello("1.4", "sjf", ["select"]),
     "a 1.4 hello without the optional session and token (the bytes of PROTOCOL.md section 10)"),
    ("hello_session", hello("1.0", "inspector", ["inspect"], session="exp-7"), "hello with the optional session"),
    ("hello_token", hello("1.3", "inspector", ["inspect"], session="exp-7", token="3f9c2a7d41e0b8a6"),
     "1.3: joining a private session that has agents takes its token (the first agent's hello sets it)"),
])
add("request", "bad_field", [
    ("hello_token_int", hello("1.3", "a", [], token=42), "token as an integer, not a string"),
])
add("request", "valid", [
    ("hello_no_kinds", hello("1.0", "driver", []), "a driver that only resets takes no kinds (empty array)"),
    ("hello_all_kinds", hello("1.3", "all", ["select", "inspect", "backfill", "kill"]),
     "all four kinds; a 1.x minor version is the same major"),
    ("hello_select_kill", hello("1.4", "rlschert", ["select_kill", "inspect", "backfill"]),
     "1.4: the joint select+kill kind, which takes the place of select and kill"),
    ("hello_utf8_name", hello("1.0", "agent-é-调度", []), "agent name with non-ASCII UTF-8 text"),
    ("reset_empty", {"type": "reset"}, "reset with every optional field absent"),
    ("reset_full",
     {"type": "reset", "workload": {"trace": "/data/SDSC-SP2.swf.gz", "procs": 128, "jobs": 1024, "sample": 7},
      "seed": 3, "options": {"policy": "sjf", "backfill": "easy", "estimate": "noisy:0.2", "window": 64},
      "reward": "bsld", "require": ["select", "inspect"], "records": True,
      "columns": {"queue": ["submit", "requested", "size"], "running": ["estimated_end"]}},
     "reset with every optional field present"),
    ("reset_records_false", {"type": "reset", "seed": -1, "records": False},
     "records false; a negative seed is an integer like any other (the env may refuse its value)"),
    ("records_request", {"type": "records", "episode": 4, "page": 0},
     "1.3: the first page of the per-job records an episode_end announced with records_pages"),
    ("reset_window_start", {"type": "reset", "workload": {"jobs": 256, "start": 1000}, "options": {"policy": "sjf"}},
     "a window from the trace's job 1000 (start, by position), queued in SJF order (the policy option)"),
    ("join", {"type": "join"}, "join without its optional columns"),
    ("join_columns", {"type": "join", "columns": {"queue": ["size", "wait"]}},
     "1.8: only the queue's id, size and wait (and the running jobs' id) are sent to this agent"),
    ("poll", {"type": "poll"}, "poll has no fields"),
    ("bye_request", {"type": "bye"}, "bye has no fields"),
    ("act_int", act(7, 42), "act naming one job id (the bytes of PROTOCOL.md section 10)"),
    ("act_nil", act(8, None), "nil action: wait / stop / no kill"),
    ("act_list", act(9, [3, 4, 17]), "a list of job ids (select: start all)"),
    ("act_empty_list", act(9, []), "an empty list (select: wait)"),
    ("act_order", act(9, {"order": [4, 3]}), "1.4: a standing order ranking every candidate, best first (select)"),
    ("act_true", act(10, True), "inspect: accept"),
    ("act_false", act(10, False), "inspect: reject"),
    ("act_large_ids", act(4294967296, 18446744073709551615), "integers beyond 32 bits (uint 64)"),
    ("act_negative_action", act(1, -5),
     "a negative integer is a well-formed action; the env answers invalid_action (not a candidate)"),
    ("act_list_mixed", act(1, [1, "two"]),
     "an array is well-formed whatever it holds; the env answers invalid_action (not job ids)"),
    ("map32_header", b"\xdf\x00\x00\x00\x01" + s("type") + s("poll"),
     "a map in the map 32 form: readers accept every msgpack size form", {"type": "poll"}),
    ("str8_type", b"\x81\xd9\x04type\xd9\x04join", "strings in the str 8 form", {"type": "join"}),
    ("int_wide_forms",
     b"\x83" + s("type") + s("act") + s("decision") + b"\xcf\x00\x00\x00\x00\x00\x00\x00\x07"
     + s("action") + b"\xd0\x2a", "integers in the uint 64 and int 8 forms (non-minimal encodings are still integers)",
     {"type": "act", "decision": 7, "action": 42}),
])

# ---- requests, invalid: not a message
add("request", "bad_message", stage="decode", rows=[
    ("empty_body", b"", "zero bytes"),
    ("truncated_act", pack({"type": "act", "decision": 7, "action": 42})[:-1], "act_int without its last byte"),
    ("truncated_map_header", b"\x83", "a map header of 3 entries, nothing else"),
    ("truncated_str", b"\x81" + s("type") + b"\xa5hel", "a string shorter than its header says"),
    ("trailing_byte", pack({"type": "poll"}) + b"\x00", "a valid poll followed by one extra byte"),
    ("two_messages", pack({"type": "poll"}) + pack({"type": "bye"}), "two complete messages in one body"),
    ("reserved_byte", b"\xc1", "0xc1, the byte msgpack never uses"),
    ("garbage", b"GET / HTTP/1.1\r\n\r\n",
     "text that is not msgpack (its first byte is a fixint, so it has trailing bytes)"),
    ("invalid_utf8", b"\x81" + s("type") + b"\xa2\xff\xfe", "a str whose bytes are not UTF-8"),
    ("int_map_key", b"\x82" + s("type") + s("poll") + b"\x01\x02", "a map with an integer key (keys are strings)"),
    ("int_map_key_only", b"\x81\x01" + s("poll"), "a map whose only key is an integer"),
    ("int_map_key_nested", b"\x82" + s("type") + s("reset") + s("options") + b"\x81\x01\x02",
     "an integer key in a nested map: every map has string keys"),
    ("ext_action", b"\x83" + s("type") + s("act") + s("decision") + b"\x01" + s("action") + b"\xd4\x05\x2a",
     "an ext value (fixext 1, type 5): ext types are refused"),
    ("empty_ext_action", b"\x83" + s("type") + s("act") + s("decision") + b"\x01" + s("action") + b"\xc7\x00\x05",
     "an ext value of length 0 (ext 8, type 5): ext types are refused"),
    ("timestamp_action", pack({"type": "act", "decision": 1, "action": msgpack.Timestamp(1, 0)}),
     "a timestamp (ext type -1): ext types are refused"),
])
add("request", "bad_message", [
    ("non_map_array", pack(["act", 7, 42]), "an array, not a map"),
    ("non_map_str", pack("hello"), "a string, not a map"),
    ("non_map_int", pack(7), "an integer, not a map"),
    ("non_map_nil", pack(None), "nil, not a map"),
    ("empty_map", pack({}), "a map without type"),
    ("missing_type", {"decision": 7, "action": 42}, "act fields without type"),
    ("type_int", {"type": 3}, "type is an integer"),
    ("type_nil", {"type": None}, "type is nil"),
    ("type_bin", {"type": b"poll"}, "type as bin, not str (bin is not used)"),
])
add("request", "unknown_type", [
    ("unknown_type", {"type": "step", "action": 1}, "no such request"),
    ("type_case", {"type": "Hello", "protocol": "1.0", "agent": "a", "kinds": []}, "type names are case-sensitive"),
    ("reply_type_as_request", {"type": "welcome", "protocol": "1.0", "session": "default", "env": {}},
     "a reply type sent by an agent"),
])
# ---- requests, invalid: fields
add("request", "bad_field", [
    ("hello_missing_protocol", {"type": "hello", "agent": "a", "kinds": []}, "hello without protocol"),
    ("hello_missing_kinds", {"type": "hello", "protocol": "1.0", "agent": "a"}, "hello without kinds"),
    ("hello_protocol_float", hello(1.0, "a", []), "protocol as a float, not the string \"1.0\""),
    ("hello_kinds_str", hello("1.0", "a", "select"), "kinds as a string, not an array"),
    ("hello_agent_bin", hello("1.0", b"sjf", []), "agent as bin, not str"),
    ("hello_session_nil", hello("1.0", "a", [], session=None),
     "an optional field is omitted, never nil, unless its type says so"),
    ("hello_unknown_field", hello("1.0", "a", [], name="a"), "a field hello does not have"),
    ("reset_seed_float", {"type": "reset", "seed": 3.0}, "seed as a float"),
    ("reset_seed_bool", {"type": "reset", "seed": True}, "seed as a bool: bool is not an integer"),
    ("reset_records_int", {"type": "reset", "records": 1}, "records as an integer, not a bool"),
    ("reset_workload_array", {"type": "reset", "workload": ["trace.swf"]}, "workload as an array, not a map"),
    ("reset_require_str", {"type": "reset", "require": "select"}, "require as a string, not an array"),
    ("reset_unknown_field", {"type": "reset", "policy": "sjf"}, "policy belongs in options, not at the top level"),
    ("records_page_missing", {"type": "records", "episode": 4}, "records without page"),
    ("join_unknown_field", {"type": "join", "session": "default"},
     "join takes no session (the session is chosen at hello)"),
    ("join_columns_unknown", {"type": "join", "columns": {"queue": ["size", "colour"]}},
     "1.8: columns names a column the queue table does not have"),
    ("poll_unknown_field", {"type": "poll", "decision": 3}, "poll has no fields"),
    ("bye_unknown_field", {"type": "bye", "reason": "done"}, "bye has no fields"),
    ("act_missing_decision", {"type": "act", "action": 42}, "act without decision"),
    ("act_missing_action", {"type": "act", "decision": 7}, "act without action: nil must be sent explicitly"),
    ("act_decision_str", act("7", 42), "decision as a string"),
    ("act_decision_nil", act(None, 42), "decision as nil"),
    ("act_decision_bool", act(True, 42), "decision as a bool"),
    ("act_decision_float", act(7.0, 42), "decision as a float"),
    ("act_action_float", act(7, 42.0), "action as a float: job ids are integers"),
    ("act_action_str", act(7, "42"), "action as a string"),
    ("act_action_map", act(7, {"job": 42}), "action as a map"),
    ("act_order_empty", act(7, {"order": []}), "a standing order that ranks nothing"),
    ("act_order_extra_key", act(7, {"order": [3, 4], "then": 1}), "a standing order with a key besides 'order'"),
    ("act_action_bin", act(7, b"\x2a"), "action as bin"),
    ("act_unknown_field", act(7, 42, episode=1), "a field act does not have"),
])
# ---- requests, invalid: limits (section 3)
add("request", "too_large", stage="decode", rows=[
    ("too_long_str", hello("1.0", "a" * 1_000_001, []), "a string of 1,000,001 bytes (the limit is 1,000,000)"),
    ("too_long_array", act(1, [0] * 1_000_001), "an array of 1,000,001 entries (the limit is 1,000,000)"),
])

# ---- replies, valid
add("reply", "valid", [
    ("welcome", {"type": "welcome", "protocol": "1.0", "session": "default", "env": WELCOME_ENV},
     "welcome with a full env description"),
    ("welcome_token",
     {"type": "welcome", "protocol": "1.3", "session": "exp-7", "env": {**WELCOME_ENV, "sessions": "private"},
      "token": "3f9c2a7d41e0b8a6"},
     "1.3: the session's token, which other agents present to join it; env.sessions says private or open"),
    ("redirect_tcp", {"type": "redirect", "address": "tcp://*:40123", "session": "exp-7"},
     "1.6: say the hello again at a worker's address; tcp://*:PORT means the host the agent connected to"),
    ("redirect_ipc", {"type": "redirect", "address": "ipc:///tmp/hpcgym.ipc.w0.1", "session": "default"},
     "1.6: say the hello again at a worker's ipc address"),
    ("decision_select", decision("select"), "a select decision with its observation"),
    ("decision_select_no_wait",
     decision("select", decision=13, step=41, time=500, observation=OBSERVATION_EMPTY, candidates=[9],
              can_wait=False, reward=-1.5),
     "select that cannot wait; the observation has no context key and empty running columns"),
    ("decision_inspect",
     decision("inspect", candidates=[3],
              observation={**OBSERVATION_SELECT, "context": {"jobs": [3], "rejections": 0, "max_rejections": 72}}),
     "inspect: the picked ids, context jobs/rejections/max_rejections"),
    ("decision_backfill",
     decision("backfill", candidates=[4],
              observation={**OBSERVATION_SELECT, "context": {"reserved": 3, "shadow_time": 3600, "extra": 0}}),
     "backfill: context reserved/shadow_time/extra"),
    ("decision_backfill_no_stop",
     decision("backfill", candidates=[4, 5], can_wait=False,
              observation={**OBSERVATION_SELECT, "context": {"reserved": 3, "shadow_time": 3600, "extra": 0}}),
     "backfill that cannot stop (backfill_stop false, 1.2): nil is refused, start one of the candidates"),
])
add("request", "valid", [
    ("reset_easy_variants",
     {"type": "reset", "workload": {"trace": "/data/SDSC-SP2.swf.gz", "cleaning": "rlbf-scw", "jobs": 256, "sample": 1},
      "options": {"preset": "rlbf-public", "backfill_order": "sjf", "easy_extra": False},
      "reward": "relative:bsld:pct:fcfs:sjf+delay_penalty:0.001"},
     "1.2: a preset with options over it, the rlbf-scw cleaning, a sum of rewards"),
])
add("reply", "valid", [
    ("decision_reward_int", decision("select", reward=0),
     "an integer reward: an env sends floats, a reader accepts an integer too (section 3)"),
    ("decision_kill", decision("kill", candidates=[1], reward=0.25), "kill: candidates are running jobs"),
])
add("request", "valid", [
    ("reset_prediction",
     {"type": "reset", "options": {"prediction": "running:0.4,0.1,0.03,300", "estimate": "predicted"},
      "reward": "system_slowdown_prediction"},
     "1.4: the running predictor, reservations on its predictions, RLSchert's eq. (9) reward"),
])
add("reply", "valid", [
    ("decision_kill_predictions",
     decision("kill", candidates=[1], observation={
         **OBSERVATION_SELECT, "queue": {**OBSERVATION_SELECT["queue"], "prediction": [540, 60]},
         "running": {**OBSERVATION_SELECT["running"], "submit": [0], "prediction0": [1800], "prediction": [4200]}}),
     "1.4: an episode with a predictor, to a 1.4 agent: queue.prediction (pre-run), running.submit, "
     "running.prediction0 (pre-run) and running.prediction (current)"),
    ("decision_job_columns",
     decision("select", candidates=[3, 4], observation={
         **OBSERVATION_SELECT, "queue": {**OBSERVATION_SELECT["queue"], "group": [2, -1], "executable": [17, -1],
                                         "memory": [65536, -1]}}),
     "1.5: to a 1.5 agent, the queued jobs' group, executable and requested memory (kB per processor; SWF "
     "fields 13, 14 and 10; -1 where the trace does not say)"),
    ("decision_select_kill",
     decision("select_kill", candidates=[3, 4, 1], observation={**OBSERVATION_SELECT, "context": {"queued": 2}}),
     "1.4: the joint decision: the queue window's ids, then the running ids that may be killed; "
     "context.queued says how many are queued"),
    ("pending", {"type": "pending", "episode": 2}, "pending with the episode number"),
    ("pending_bare", {"type": "pending"}, "pending without the optional episode"),
    ("pending_episode_zero", {"type": "pending", "episode": 0},
     "pending before the session's first episode: episode 0"),
    ("episode_end_completed", end(1, "completed", METRICS, -4.27, jobs=None), "episode end with metrics and jobs nil"),
    ("episode_end_records", end(1, "completed", METRICS, 0.0, jobs=JOBS),
     "episode end with per-job columns (reset records: true)"),
    ("episode_end_reset", end(3, "reset by 'sjf@12'", {}, 0.0),
     "an episode ended early: empty metrics, optional jobs absent"),
    ("episode_end_shutdown", end(2, "shutdown", {}, 0.0),
     "the env stopped (SIGTERM) mid-episode: also the reply to the act of an agent that was computing it"),
    ("decision_ordered", decision("select", decision=19, step=47, time=300, ordered=5),
     "1.4: five select decisions were answered by this agent's standing order since its previous decision"),
    ("episode_end_ordered", end(2, "completed", METRICS, -3.5, jobs=None, ordered=12),
     "1.4: the last twelve select decisions were answered by the agent's standing order"),
    ("episode_end_paged", end(4, "completed", METRICS, 0.0, jobs=None, records_pages=9),
     "1.3: records too many for one message: jobs nil, fetch pages 0..8 with `records` requests"),
    ("records_reply", {"type": "records", "episode": 4, "page": 0, "pages": 9, "jobs": JOBS},
     "1.3: one page of per-job records, the same columns as episode_end's jobs"),
    ("error_stale", error("stale_decision", "decision 99 is not pending for this agent", pending=None),
     "an error with no decision standing"),
    ("error_with_pending", error("invalid_action", "job 5 is not a valid select choice", pending=PENDING_MAP),
     "an error repeating the decision still standing"),
    ("error_retry",
     {"type": "error", "code": "not_allowed", "retry_s": 2.0, "recoverable": True, "pending": None,
      "message": "no worker process of this env is ready (one is starting in the place of one that failed): "
                 "try again in 2 s"}, "1.7: a refusal that passes by itself says when to try again"),
    ("error_version", error("version_mismatch", "this env speaks protocol 1.0", False, pending=None),
     "an unrecoverable error"),
    ("bye_reply", {"type": "bye"}, "the reply to bye"),
])
# ---- replies, invalid
add("reply", "unknown_type", [
    ("reply_unknown_type", {"type": "result", "episode": 1}, "no such reply"),
])
add("reply", "bad_message", [
    ("reply_missing_type", {"episode": 1}, "a reply without type"),
])
add("reply", "bad_field", [
    ("decision_missing_candidates", {k: v for k, v in decision("select").items() if k != "candidates"},
     "decision without candidates"),
    ("decision_can_wait_int", decision("select", can_wait=1), "can_wait as an integer"),
    ("decision_reward_str", decision("select", reward="0"), "reward as a string"),
    ("decision_observation_nil", decision("select", observation=None), "observation as nil"),
    ("redirect_missing_address", {"type": "redirect", "session": "default"}, "redirect without address"),
    ("welcome_missing_env", {"type": "welcome", "protocol": "1.0", "session": "default"}, "welcome without env"),
    ("pending_episode_nil", {"type": "pending", "episode": None}, "optional episode sent as nil"),
    ("episode_end_metrics_nil", end(1, "completed", None, 0.0),
     "metrics as nil (an empty map when the episode did not complete)"),
    ("error_missing_pending", error("bad_field", "x"),
     "error without pending: it is required, nil when nothing stands"),
    ("error_recoverable_str", error("bad_field", "x", "yes", pending=None), "recoverable as a string"),
])
add("reply", "bad_message", stage="decode", rows=[
    ("reply_int_map_key", b"\x82" + s("type") + s("pending") + b"\x01\x01", "a reply with an integer key"),
    ("reply_trailing_byte", pack({"type": "bye"}) + b"\xc0", "a bye reply followed by nil"),
])
# Section 8: "a reader MUST ignore reply fields it does not know" (minor versions add reply fields).
add("reply", "valid", [
    ("pending_future_field", {"type": "pending", "episode": 1, "retry_after_ms": 50},
     "a reply field from a later 1.x minor version: readers MUST ignore it (section 8)"),
])


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
