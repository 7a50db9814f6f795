"""SWF reading, cleaning and writing: hand-written snippets, then every real trace we have.

Expected values in the snippet tests are worked out by hand from the lines written here; the
real-trace checks take their numbers from MANIFEST.md or from a separate plain-Python count.
"""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import numpy as np
import pytest

from hpcgym.environment.errors import WorkloadError
from hpcgym.environment.swf import read_swf, trace_stats, write_swf
from hpcgym.environment.workload import Workload


def job(job_id: int, submit: float, run: float, alloc: int, req_procs: int = -1,
        req_time: float = -1, user: int = 7, avg_cpu: str = "-1") -> str:
    """One 18-field SWF data line; fields we do not test are -1 or fixed values."""
    fields = [job_id, submit, 5, run, alloc, avg_cpu, -1, req_procs, req_time, -1, 1, user,
              3, -1, 1, -1, -1, -1]
    return "  ".join(str(f) for f in fields)


def swf_text(lines: list[str], header: str = "; MaxProcs: 64\n") -> str:
    return header + "\n".join(lines) + "\n"


def write(tmp_path: Path, text: str, name: str = "t.swf", gz: bool = False) -> Path:
    path = tmp_path / name
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# --- basic parsing and cleaning rules -------------------------------------------------------


def test_basic_columns(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([
        job(1, 0, 100, 4, 4, 200, user=3),
        job(2, 10, 50, 8, 8, 60, user=4),
        job(3, 25, 7, 1, 1, 3600, user=3),
    ]))
    w = read_swf(path)
    assert w.name == "t"
    assert w.procs == 64
    assert w.job_id.tolist() == [1, 2, 3]
    assert w.submit.tolist() == [0, 10, 25]
    assert w.run.tolist() == [100, 50, 7]
    assert w.size.tolist() == [4, 8, 1]
    assert w.requested.tolist() == [200, 60, 3600]
    assert w.user.tolist() == [3, 4, 3]
    assert all(getattr(w, c).dtype == np.int64 for c in ("job_id", "submit", "run", "size"))
    assert sum(w.dropped.values()) == 0


def test_size_falls_back_to_requested_procs(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([
        job(1, 0, 10, -1, 16),   # allocated missing -> requested 16
        job(2, 1, 10, 0, 5),     # allocated 0 -> requested 5
        job(3, 2, 10, 3, 9),     # allocated wins when present
    ]))
    assert read_swf(path).size.tolist() == [16, 5, 3]


def test_drops_nonpositive_run_and_size(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([
        job(1, 0, -1, 4),        # run missing
        job(2, 1, 0, 4),         # run zero
        job(3, 2, 10, -1, -1),   # no processor information
        job(4, 3, 10, 0, 0),     # zero processors
        job(5, 4, 10, 2),        # kept
    ]))
    w = read_swf(path)
    assert w.job_id.tolist() == [5]
    assert w.dropped["nonpositive_run"] == 2
    assert w.dropped["nonpositive_size"] == 2
    assert w.dropped["malformed"] == 0


def test_requested_time_falls_back_to_run(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([
        job(1, 0, 100, 1, req_time=-1),
        job(2, 1, 200, 1, req_time=0),
        job(3, 2, 300, 1, req_time=50),   # under-estimate kept as is
    ]))
    assert read_swf(path).requested.tolist() == [100, 200, 50]


def test_negative_submit_dropped(tmp_path: Path) -> None:
    # LLNL-Thunder style record: submit -1, run -1, procs -1; counted once, as negative_submit.
    path = write(tmp_path, swf_text([job(1, -1, -1, -1), job(2, 5, 10, 1), job(3, -3, 10, 1)]))
    w = read_swf(path)
    assert w.job_id.tolist() == [2]
    assert w.dropped["negative_submit"] == 2
    assert w.dropped["nonpositive_run"] == 0


def test_larger_than_cluster_dropped_or_strict_error(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([job(1, 0, 10, 64), job(2, 1, 10, 65), job(3, 2, 10, 8)]))
    w = read_swf(path)
    assert w.job_id.tolist() == [1, 3]
    assert w.dropped["larger_than_cluster"] == 1
    with pytest.raises(WorkloadError) as err:
        read_swf(path, strict=True)
    msg = str(err.value)
    # job 2 is on line 3 (after one header line); 65 procs requested on a 64-proc cluster
    assert f"{path}:3" in msg and "65" in msg and "64" in msg and "--procs" in msg


def test_explicit_procs_wins_and_changes_drops(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([job(1, 0, 10, 64), job(2, 1, 10, 65), job(3, 2, 10, 32)]))
    w = read_swf(path, procs=32)   # header says 64
    assert w.procs == 32 and w.job_id.tolist() == [3]
    assert w.dropped["larger_than_cluster"] == 2
    w = read_swf(path, procs=128)
    assert w.procs == 128 and len(w) == 3


def test_all_jobs_dropped_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([job(1, 0, -1, 4)]))
    with pytest.raises(WorkloadError, match="nonpositive_run=1"):
        read_swf(path)


def test_bad_procs_argument(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([job(1, 0, 10, 4)]))
    for bad in (0, -4, 2.5, "8"):
        with pytest.raises(WorkloadError, match="positive integer"):
            read_swf(path, procs=bad)  # type: ignore[arg-type]


def test_float_fields_are_rounded(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([
        job(1, "10.4", "99.6", 2, req_time="120.2", avg_cpu="142.00"),
        job(2, "11.0", "0.3", 2),   # rounds to run 0 -> dropped
    ]))
    w = read_swf(path)
    assert w.submit.tolist() == [10]
    assert w.run.tolist() == [100]
    assert w.requested.tolist() == [120]
    assert w.dropped["nonpositive_run"] == 1


def test_missing_user_kept_as_minus_one(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([job(1, 0, 10, 1, user=-1)]))
    assert read_swf(path).user.tolist() == [-1]


def test_sorted_by_submit_stably(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([
        job(1, 50, 10, 1), job(2, 20, 10, 1), job(3, 50, 10, 1), job(4, 20, 10, 1),
        job(5, 10, 10, 1),
    ]))
    w = read_swf(path)
    assert w.submit.tolist() == [10, 20, 20, 50, 50]
    assert w.job_id.tolist() == [5, 2, 4, 1, 3]


def test_sort_is_stable_on_a_long_trace(tmp_path: Path) -> None:
    # 300 jobs whose submits go down in blocks of 7 equal values, plus some scattered ones:
    # long enough that an unstable sort would reorder ties.
    submits = [(1000 - i) // 7 * 7 if i % 3 else (i * 37) % 500 for i in range(300)]
    path = write(tmp_path, swf_text([job(i + 1, t, 10, 1) for i, t in enumerate(submits)]))
    w = read_swf(path)
    expected = sorted(range(1, 301), key=lambda j: submits[j - 1])   # Python's sort is stable
    assert w.job_id.tolist() == expected


def test_drop_counts_add_up(tmp_path: Path) -> None:
    lines = [job(1, 0, 10, 1), job(2, -1, 10, 1), job(3, 1, -1, 1), job(4, 2, 10, -1),
             job(5, 3, 10, 100), "garbage line", job(6, 4, 10, 2)]
    w = read_swf(write(tmp_path, swf_text(lines)), on_malformed="skip")
    assert w.dropped == {"malformed": 1, "negative_submit": 1, "nonpositive_run": 1,
                         "nonpositive_size": 1, "larger_than_cluster": 1}
    assert len(w) + sum(w.dropped.values()) == len(lines)


# --- header -----------------------------------------------------------------------------------


def test_header_leading_integer_and_precedence(tmp_path: Path) -> None:
    lines = [job(1, 0, 10, 1)]
    ctc = "; Version: 2.2\n; MaxNodes: 338 (batch partition; 512 total)\n"
    w = read_swf(write(tmp_path, swf_text(lines, ctc), "ctc.swf"))
    assert w.procs == 338
    assert w.header["MaxNodes"] == "338 (batch partition; 512 total)"
    assert w.header["Version"] == "2.2"

    both = "; MaxNodes: 184  ( 6,  171,   7)\n; MaxProcs: 1664 (72, 1368, 224)\n"
    assert read_swf(write(tmp_path, swf_text(lines, both), "ds.swf")).procs == 1664

    unusable = "; MaxProcs: N/A\n; MaxNodes: 256\n"
    assert read_swf(write(tmp_path, swf_text(lines, unusable), "u.swf")).procs == 256

    assert read_swf(write(tmp_path, swf_text(lines, both), "ds2.swf"), procs=50).procs == 50


def test_header_continuations_and_repeats(tmp_path: Path) -> None:
    header = ("; Information: http://example.org/a\n"
              ";              http://example.org/b\n"
              ";   Permission to use: granted\n"
              ";MaxRuntime: N/A\n"
              "; Queue:  1 DSI\n"
              "; Queue:  2 astro\n"
              "; MaxProcs: 8\n")
    w = read_swf(write(tmp_path, swf_text([job(1, 0, 10, 1)], header)))
    assert w.header["Information"] == "http://example.org/a"
    assert "http" not in w.header
    assert "Permission to use" not in w.header
    assert w.header["MaxRuntime"] == "N/A"
    assert w.header["Queue"] == "1 DSI\n2 astro"


def test_no_cluster_size_tells_to_pass_procs(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([job(1, 0, 10, 1)], "; Version: 2\n"))
    with pytest.raises(WorkloadError, match="--procs") as err:
        read_swf(path)
    assert str(path) in str(err.value)
    assert read_swf(path, procs=4).procs == 4


# --- malformed lines and bad files --------------------------------------------------------


@pytest.mark.parametrize("bad, what", [
    ("1 0 5 10 1 -1 -1 -1 -1 -1 1 7 3 -1 1 -1 -1", "got 17"),           # 17 fields
    ("1 0 5 10 1 -1 -1 -1 -1 -1 1 7 3 -1 1 -1 -1 -1 9", "got 19"),      # 19 fields
    ("1 0 5 ten 1 -1 -1 -1 -1 -1 1 7 3 -1 1 -1 -1 -1", "'ten'"),        # non-numeric
    ("1 0 5 nan 1 -1 -1 -1 -1 -1 1 7 3 -1 1 -1 -1 -1", "'nan'"),        # not finite
    ("1 0 5 1e300 1 -1 -1 -1 -1 -1 1 7 3 -1 1 -1 -1 -1", "out of range"),
])
def test_malformed_error_and_skip(tmp_path: Path, bad: str, what: str) -> None:
    path = write(tmp_path, swf_text([job(1, 0, 10, 1), job(2, 1, 10, 1), bad, job(4, 3, 10, 1)],
                                    "; MaxProcs: 64\n;\n"))
    with pytest.raises(WorkloadError) as err:
        read_swf(path)
    msg = str(err.value)
    # two header lines, then the bad line is the third data line -> line 5
    assert f"{path}:5:" in msg and what in msg and "--skip-malformed" in msg
    w = read_swf(path, on_malformed="skip")
    assert w.job_id.tolist() == [1, 2, 4]
    assert w.dropped["malformed"] == 1


def test_every_line_malformed_same_way(tmp_path: Path) -> None:
    # All lines have 17 fields: numpy would read them as a clean 17-column table.
    lines = ["1 0 5 10 1 -1 -1 -1 -1 -1 1 7 3 -1 1 -1 -1"] * 3
    path = write(tmp_path, swf_text(lines))
    with pytest.raises(WorkloadError, match=r":2: expected 18 numeric fields, got 17"):
        read_swf(path)
    with pytest.raises(WorkloadError, match="malformed=3"):
        read_swf(path, on_malformed="skip")


def test_invalid_on_malformed(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([job(1, 0, 10, 1)]))
    with pytest.raises(WorkloadError, match="on_malformed"):
        read_swf(path, on_malformed="ignore")


def test_missing_file_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.swf"
    with pytest.raises(WorkloadError, match="not found") as err:
        read_swf(path)
    assert str(path) in str(err.value)


def test_directory_and_empty_and_binary(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError):
        read_swf(tmp_path)
    with pytest.raises(WorkloadError, match="no job lines"):
        read_swf(write(tmp_path, "; MaxProcs: 4\n\n", "empty.swf"))
    binary = tmp_path / "bin.swf"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(WorkloadError, match="bin.swf"):
        read_swf(binary, procs=4)


def test_corrupt_gzip(tmp_path: Path) -> None:
    good = gzip.compress(swf_text([job(i, i, 10, 1) for i in range(1, 200)]).encode())
    path = tmp_path / "cut.swf.gz"
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(WorkloadError, match="gzip") as err:
        read_swf(path)
    assert "cut.swf.gz" in str(err.value)


def test_gzip_detected_by_magic_not_name(tmp_path: Path) -> None:
    text = swf_text([job(1, 0, 10, 2), job(2, 4, 20, 3)])
    plain = read_swf(write(tmp_path, text, "a.swf"))
    for name, gz in (("b.swf.gz", True), ("c.swf", True), ("d.swf.gz", False)):
        w = read_swf(write(tmp_path, text, name, gz=gz))
        assert w.job_id.tolist() == plain.job_id.tolist() == [1, 2]
        assert w.run.tolist() == [10, 20]
    assert read_swf(tmp_path / "b.swf.gz").name == "b"


def test_crlf_and_latin1_header(tmp_path: Path) -> None:
    text = "; Installation: Universit\xe9\r\n; MaxProcs: 16\r\n" + job(1, 0, 10, 2) + "\r\n"
    path = tmp_path / "x.swf"
    path.write_bytes(text.encode("latin-1"))
    w = read_swf(path)
    assert w.procs == 16 and w.run.tolist() == [10]
    assert w.header["Installation"] == "Universit\xe9"


# --- writing ------------------------------------------------------------------------------


def _sample_workload() -> Workload:
    return Workload(name="mini", procs=32, job_id=np.array([4, 9, 11]),
                    submit=np.array([0, 0, 300]), run=np.array([60, 5, 7200]),
                    size=np.array([1, 32, 7]), requested=np.array([120, 5, 3600]),
                    user=np.array([2, -1, 5]))


@pytest.mark.parametrize("name", ["out.swf", "out.swf.gz"])
def test_round_trip(tmp_path: Path, name: str) -> None:
    w = _sample_workload()
    path = tmp_path / name
    write_swf(path, w, comments=["made by a test", "two\nlines"])
    raw = path.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")
    text = gzip.decompress(raw).decode() if name.endswith(".gz") else raw.decode()
    assert "; MaxProcs: 32" in text and "; MaxNodes: 32" in text
    assert "; made by a test" in text and "; two\n; lines" in text
    data = [line.split() for line in text.splitlines() if not line.startswith(";")]
    assert len(data) == 3 and all(len(f) == 18 for f in data)
    # second job: id 9, submit 0, run 5, 32 procs, requested 5, user -1; the rest are -1
    assert data[1] == ["9", "0", "-1", "5", "32", "-1", "-1", "-1", "5", "-1", "-1", "-1",
                       "-1", "-1", "-1", "-1", "-1", "-1"]
    back = read_swf(path)
    assert back.procs == 32
    for col in ("job_id", "submit", "run", "size", "requested", "user"):
        assert np.array_equal(getattr(back, col), getattr(w, col)), col


def test_write_to_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="cannot write"):
        write_swf(tmp_path / "no" / "such" / "x.swf", _sample_workload())


def test_trace_stats_by_hand(tmp_path: Path) -> None:
    path = write(tmp_path, swf_text([
        job(1, 0, 100, 4, req_time=200),
        job(2, 86400, 300, 8, req_time=400),
        job(3, 172800, 200, 12, req_time=-1),   # requested falls back to 200
        job(4, 172900, -1, 12),                  # dropped: run
        job(5, 172900, 10, 65),                  # dropped: larger than 64
    ]))
    s = trace_stats(read_swf(path))
    assert s["jobs"] == 3 and s["procs"] == 64
    assert s["mean_interarrival_s"] == pytest.approx(86400.0)
    assert s["mean_requested_s"] == pytest.approx((200 + 400 + 200) / 3)
    assert s["mean_run_s"] == pytest.approx(200.0)
    assert s["mean_size"] == pytest.approx(8.0)
    assert s["span_s"] == 172800 and s["span_days"] == pytest.approx(2.0)
    assert s["dropped_nonpositive_run"] == 1 and s["dropped_larger_than_cluster"] == 1
    assert s["dropped_total"] == 2


def test_trace_stats_single_job() -> None:
    w = Workload(name="one", procs=4, job_id=np.array([1]), submit=np.array([5]),
                 run=np.array([9]), size=np.array([2]), requested=np.array([9]),
                 user=np.array([1]))
    s = trace_stats(w)
    assert math.isnan(s["mean_interarrival_s"]) and s["span_s"] == 0 and s["dropped_total"] == 0


# --- real traces ----------------------------------------------------------------------------


def parse_manifest(path: Path) -> dict[str, dict[str, str]]:
    """The MANIFEST's file table: file name -> {jobs, MaxProcs, MaxNodes} as raw strings."""
    rows = {}
    for line in path.read_text().splitlines():
        if not line.startswith("| `") or ".swf.gz`" not in line:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells[2].replace(",", "").isdigit():
            continue  # the cross-check table has the same first column but no counts
        rows[cells[0].strip("`")] = {"jobs": cells[2], "MaxProcs": cells[3],
                                     "MaxNodes": cells[4]}
    return rows


def manifest_procs(row: dict[str, str]) -> int:
    value = row["MaxProcs"] if row["MaxProcs"] != "-" else row["MaxNodes"]
    m = re.match(r"\d+", value)
    assert m, f"MANIFEST size {value!r} has no leading integer"
    return int(m.group())


@pytest.fixture(scope="module")
def real(traces_dir: Path) -> dict[str, Workload]:
    """Every trace in the folder, loaded once for the module."""
    files = sorted(traces_dir.glob("*.swf.gz"))
    if not files:
        pytest.skip(f"no *.swf.gz traces in {traces_dir}")
    return {f.name: read_swf(f) for f in files}


def test_real_traces_match_manifest(traces_dir: Path, real: dict[str, Workload]) -> None:
    manifest_path = traces_dir / "MANIFEST.md"
    if not manifest_path.is_file():
        pytest.skip(f"{manifest_path} missing")
    manifest = parse_manifest(manifest_path)
    assert len(manifest) >= 18, "MANIFEST table not parsed"
    problems = []
    for name, w in real.items():
        if name not in manifest:
            problems.append(f"{name}: not in MANIFEST")
            continue
        row = manifest[name]
        lines = len(w) + sum(w.dropped.values())
        if lines != int(row["jobs"]):
            problems.append(f"{name}: {lines} lines parsed, MANIFEST says {row['jobs']}")
        if w.procs != manifest_procs(row):
            problems.append(f"{name}: procs {w.procs}, MANIFEST says {manifest_procs(row)}")
        if w.dropped["malformed"] or w.dropped["larger_than_cluster"]:
            problems.append(f"{name}: unexpected drops {w.dropped}")
        if not (np.all(w.run > 0) and np.all(w.size > 0) and np.all(w.size <= w.procs)
                and np.all(w.requested > 0) and np.all(np.diff(w.submit) >= 0)):
            problems.append(f"{name}: cleaned columns violate the invariants")
    assert not problems, "\n".join(problems)
    missing = set(manifest) - set(real)
    assert not missing, f"MANIFEST lists traces not in {traces_dir}: {sorted(missing)}"


def trace(real: dict[str, Workload], name: str) -> Workload:
    if name not in real:
        pytest.skip(f"{name} is not in the trace folder")
    return real[name]


def test_sdsc_sp2_keeps_54034(traces_dir: Path, real: dict[str, Workload]) -> None:
    name = "SDSC-SP2-1998-4.2-cln.swf.gz"
    w = trace(real, name)
    # Independent count in plain Python: run time > 0 and allocated procs > 0.
    count = 0
    with gzip.open(traces_dir / name, "rt") as fh:
        for line in fh:
            if line.startswith(";") or not line.strip():
                continue
            f = line.split()
            count += float(f[3]) > 0 and int(f[4]) > 0
    assert count == 54034
    assert len(w) == 54034
    assert w.procs == 128
    assert w.submit[0] == 566129          # first data line's submit (MANIFEST); job 11 runs
    assert w.job_id.min() == 11


def test_hpc2n_keeps_everything(real: dict[str, Workload]) -> None:
    w = trace(real, "HPC2N-2002-2.2-cln.swf.gz")
    assert len(w) == 202871 and sum(w.dropped.values()) == 0
    assert w.procs == 240 and w.size.max() == 200 and w.run.max() == 508620


def test_ctc_uses_allocated_procs(real: dict[str, Workload]) -> None:
    w = trace(real, "CTC-SP2-1996-3.1-cln.swf.gz")
    assert w.procs == 338 and w.size.max() == 336
    assert w.header["MaxNodes"] == "338 (batch partition; 512 total)"


def test_thunder_negative_submits_dropped(real: dict[str, Workload]) -> None:
    w = trace(real, "LLNL-Thunder-2007-1.1-cln.swf.gz")
    assert w.dropped["negative_submit"] == 1190
    assert np.all(np.diff(w.submit) >= 0) and w.submit.min() >= 0


def test_lublin_uses_maxnodes(real: dict[str, Workload]) -> None:
    for name in ("lublin_256.swf.gz", "lublin-aaroh.swf.gz"):
        w = trace(real, name)
        assert "MaxProcs" not in w.header and w.procs == 256 and len(w) == 10000
        assert np.array_equal(w.requested, w.run)   # f9 is -1 everywhere


def test_a_written_window_keeps_the_longest_run_of_its_trace(tmp_path: Path) -> None:
    """Encoders normalise by the source trace's longest run (`max_run`); a window written to a
    sequence file (as `hpcgym compare` does) and read back must keep that scale, not its own."""
    trace = read_swf(write(tmp_path, swf_text([
        job(1, 0, 100, 4, 4, 200), job(2, 10, 9000, 8, 8, 9000), job(3, 25, 7, 1, 1, 3600), job(4, 30, 50, 2, 2, 60),
    ])))
    window = trace.take(np.array([2, 3]))  # jobs 3 and 4: their own longest run is 50 s
    assert window.max_run == 9000
    write_swf(tmp_path / "window.swf", window)
    assert read_swf(tmp_path / "window.swf").max_run == 9000
    write_swf(tmp_path / "whole.swf", trace)  # a workload written whole has no other scale than its own
    assert "HpcgymSourceMaxRun" not in (tmp_path / "whole.swf").read_text()
    assert read_swf(tmp_path / "whole.swf").max_run == 9000
