"""A vectorised reader for the common SWF trace, every job line 18 plain numbers, assembled digit by digit from
one numpy array of bytes. Anything unusual returns None: `swf.read_swf` then reads exactly, naming the line."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["parse_plain"]

N_FIELDS = 18
_DIGITS_MAX = 15  # integer digits; beyond them a float loses integer precision (the slow path decides)
_PLAIN = b"0123456789+-. \t\n\r\v\f"  # the only bytes of a plain job line
_NEWLINE, _DOT, _MINUS, _PLUS, _ZERO = b"\n.-+0"


def _blank_comments(data: bytes) -> tuple[bytearray, list[bytes]] | None:
    """The data with comment lines blanked out, and those lines; None if a `;` stands anywhere else."""
    body = bytearray(data)
    comments = []
    position = data.find(b";")
    while position >= 0:
        start = data.rfind(b"\n", 0, position) + 1
        if data[start:position].strip():
            return None  # a `;` inside a job line
        end = data.find(b"\n", position)
        end = len(data) if end < 0 else end
        comments.append(data[start:end])
        body[start:end] = b" " * (end - start)
        position = data.find(b";", end)
    return body, comments


def _rounded(buf: np.ndarray, first: np.ndarray, end: np.ndarray, dots: np.ndarray) -> np.ndarray | None:
    """The tokens [first, end) of `buf` (with their dot's position, or -1) as integers rounded half
    to even, like np.rint of the number they spell; None when one has too many digits."""
    negative = buf[first] == _MINUS
    first = first + (negative | (buf[first] == _PLUS))
    int_end = np.where(dots >= 0, dots, end)
    width = int_end - first
    widest = int(width.max())
    if widest > _DIGITS_MAX:
        return None
    value = np.zeros(len(first), dtype=np.int64)
    longer = np.arange(len(first))
    for w in range(widest):
        longer = longer[width[longer] > w]
        value[longer] = value[longer] * 10 + (buf[first[longer] + w].astype(np.int64) - _ZERO)
    # round half to even on the fraction: its first digit decides, unless it is exactly 5
    fraction = np.flatnonzero((dots >= 0) & (end - dots > 1))
    if len(fraction):
        tenths = buf[dots[fraction] + 1].astype(np.int64) - _ZERO
        up = tenths > 5
        for k in np.flatnonzero(tenths == 5).tolist():
            j = int(fraction[k])
            rest = bytes(buf[dots[j] + 2:end[j]])
            up[k] = rest.strip(b"0") != b"" or bool(value[j] % 2)
        value[fraction[up]] += 1
    return np.where(negative, -value, value)


def parse_plain(data: bytes, columns: Sequence[int]) -> tuple[list[bytes], np.ndarray, np.ndarray] | None:
    """(comment lines, the given 0-based columns of every job line as rounded int64, 1-based job line numbers), or None
    unless every job line is 18 plain decimal numbers."""
    blanked = _blank_comments(data)
    if blanked is None:
        return None
    body, comments = blanked
    body = bytes(body)
    if not body or body.translate(None, _PLAIN):
        return None
    buf = np.frombuffer(body, dtype=np.uint8)
    solid = buf > 32
    starts = solid.copy()
    starts[1:] &= ~solid[:-1]
    ends = solid.copy()
    ends[:-1] &= ~solid[1:]
    first = np.flatnonzero(starts)
    end = np.flatnonzero(ends) + 1
    # a sign only leads a token; a token has at most one dot and at least one digit
    signed = (buf[first] == _MINUS) | (buf[first] == _PLUS)
    if not len(first) or body.count(b"-") + body.count(b"+") != int(signed.sum()):
        return None
    dot_positions = np.flatnonzero(buf == _DOT) if b"." in body else np.empty(0, dtype=np.int64)
    owner = np.searchsorted(first, dot_positions, side="right") - 1
    if len(owner) and not np.all(np.diff(owner) > 0):
        return None
    dots = np.full(len(first), -1, dtype=np.int64)
    dots[owner] = dot_positions
    if np.any(end - first - signed - (dots >= 0) < 1):
        return None
    # tokens per line: tokens before each line's end, differenced
    line_ends = np.concatenate((np.flatnonzero(buf == _NEWLINE), [len(buf)]))
    per_line = np.diff(np.searchsorted(first, line_ends), prepend=0)
    job_lines = np.flatnonzero(per_line)
    if not np.all(per_line[job_lines] == N_FIELDS):
        return None
    wanted = (np.arange(len(job_lines))[:, None] * N_FIELDS + np.asarray(columns)[None, :]).ravel()
    values = _rounded(buf, first[wanted], end[wanted], dots[wanted])
    if values is None:
        return None
    return comments, values.reshape(len(job_lines), len(columns)), job_lines + 1
