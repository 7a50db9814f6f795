"""The vectorised SWF reader (environment/swf_fast.py) against hand-worked numbers, and its
hand-over to the exact line reader whenever a trace is anything but plain.

Rounding follows IEEE round-half-to-even, as numpy's rint (which the exact reader applies to the
floats it parses): 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 2.51 -> 3, 0.5 -> 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcgym.environment.errors import WorkloadError
from hpcgym.environment.swf import read_swf
from hpcgym.environment.swf_fast import parse_plain

from .test_swf import job, swf_text, write

SUBMIT, RUN = 1, 3


@pytest.mark.parametrize("text, rounded", [
    ("2.5", 2), ("3.5", 4), ("-2.5", -2), ("2.51", 3), ("2.500", 2), ("2.5001", 3), ("0.5", 0),
    (".5", 0), ("7.", 7), ("+12", 12), ("0.49", 0), ("1.6", 2), ("007", 7), ("123456789", 123456789),
])
def test_numbers_round_half_to_even(text, rounded):
    data = swf_text([job(1, text, 10, 1)]).encode()
    comments, columns, lines = parse_plain(data, [SUBMIT, RUN])
    assert columns.tolist() == [[rounded, 10]]
    assert comments == [b"; MaxProcs: 64"] and lines.tolist() == [2]


def test_comment_lines_anywhere_keep_line_numbers():
    """Line 1 header, 2 a job, 3 blank, 4 an indented comment, 5 a job (CRLF endings)."""
    text = "; MaxProcs: 64\r\n" + job(1, 10, 5, 1) + "\r\n\r\n   ; Note: between jobs\r\n" + job(2, 20, 6, 1) + "\r\n"
    comments, columns, lines = parse_plain(text.encode(), [SUBMIT, RUN])
    assert columns.tolist() == [[10, 5], [20, 6]]
    assert lines.tolist() == [2, 5]
    assert [c.strip() for c in comments] == [b"; MaxProcs: 64", b"; Note: between jobs"]


@pytest.mark.parametrize("line", [
    job(1, "1e3", 10, 1),                     # an exponent
    job(1, 10, 10, 1) + " 5",                 # 19 fields
    job(1, "1-2", 10, 1),                     # a sign inside a number
    job(1, "1.2.3", 10, 1),                   # two dots
    job(1, ".", 10, 1),                       # no digit
    job(1, 10, 10, 1) + " ; trailing note",   # a `;` inside a job line
    job(1, "1234567890123456", 10, 1),        # more digits than a float holds exactly
])
def test_anything_unusual_is_left_to_the_exact_reader(line):
    assert parse_plain(swf_text([line]).encode(), [SUBMIT, RUN]) is None


def test_the_exact_reader_still_reads_what_the_fast_one_leaves(tmp_path: Path):
    """1e3 is a valid number (1000) for the exact reader; 1.2.3 is an error naming line 3."""
    assert read_swf(write(tmp_path, swf_text([job(1, 5, 10, 1), job(2, "1e3", 10, 1)]))).submit.tolist() == [5, 1000]
    with pytest.raises(WorkloadError, match=r"t\.swf:3: .*non-numeric field 2 '1\.2\.3'"):
        read_swf(write(tmp_path, swf_text([job(1, 5, 10, 1), job(2, "1.2.3", 10, 1)])))


def test_a_parsed_trace_is_cached_by_its_bytes(tmp_path: Path, monkeypatch):
    """The second read of the same bytes parses nothing; a changed file is parsed again."""
    from hpcgym.environment import swf

    path = write(tmp_path, swf_text([job(1, 5, 10, 1), job(2, 6, 10, 1)]), gz=True, name="t.swf.gz")
    first = read_swf(path)
    monkeypatch.setattr(swf, "parse_plain", lambda *args: pytest.fail("parsed again"))
    again = read_swf(path)
    assert again.submit.tolist() == first.submit.tolist() == [5, 6] and again.header == first.header
    monkeypatch.undo()
    write(tmp_path, swf_text([job(1, 5, 10, 1), job(2, 6, 10, 1), job(3, 7, 10, 1)]), gz=True, name="t.swf.gz")
    assert read_swf(path).submit.tolist() == [5, 6, 7]


def test_an_empty_cache_setting_turns_the_cache_off(tmp_path: Path, monkeypatch, private_trace_cache):
    monkeypatch.setenv("HPCGYM_CACHE", "")
    before = set(private_trace_cache.iterdir())
    read_swf(write(tmp_path, swf_text([job(1, 5, 10, 1), job(2, 9, 10, 1)])))
    assert set(private_trace_cache.iterdir()) == before
