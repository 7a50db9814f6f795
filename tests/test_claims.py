"""The claims ledger (docs/claims.md) is what benchmarks/claims.py makes of the committed results
files: a number edited by hand, a number that no longer follows from the file a row names, or a
paper page quoting a row differently from the ledger fails here."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import claims

DOCS = ROOT / "docs"
PAGES = ("dras.md", "schedinspector.md", "rlbackfilling.md", "rlschert.md", "irl.md")
NUMBER = re.compile(r"(?<![A-Za-z])[-+]?\d[\d,]*(?:\.\d+)?")  # not the digit of a name (A2C)
ROW = re.compile(r'^\| <a id="([\w-]+)"></a>')


def derivable(text: str, values: list[float]) -> bool:
    """Whether the printed number `text` is one of `values` to its printed precision."""
    x = float(text.replace(",", ""))
    decimals = len(text.split(".")[1]) if "." in text else 0
    return any(abs(x - v) <= 0.5 * 10 ** -decimals + 1e-9 for v in values)


def mismatches(ledger: str) -> list[str]:
    """Every number of a row's hpcgym cell that does not follow from the file(s) the row links,
    each read afresh from docs/results."""
    by_key = {c.key: c for c in claims.CLAIMS}
    found = []
    for line in ledger.splitlines():
        match = ROW.match(line)
        if not match:
            continue
        claim = by_key[match[1]]
        cells = line.split(" | ")
        linked = tuple(re.findall(r"\]\(results/([^)]+)\)", cells[-1]))
        if linked != claim.files:
            found.append(f"{claim.key}: links {linked}, declared {claim.files}")
            continue
        ours = claims.read(claim)
        found += [f"{claim.key}: {number}" for number in NUMBER.findall(cells[2].replace(claims.PENDING, ""))
                  if not derivable(number, ours.numbers)]
    return found


def test_the_ledger_is_what_the_files_give():
    assert (DOCS / "claims.md").read_text() == claims.ledger(), "rerun python benchmarks/claims.py"


def test_every_number_follows_from_the_file_it_names():
    ledger = (DOCS / "claims.md").read_text()
    assert sum(bool(ROW.match(line)) for line in ledger.splitlines()) >= 25
    assert mismatches(ledger) == []


def test_a_number_edited_by_hand_is_caught():
    ledger = (DOCS / "claims.md").read_text()
    quote = next(c.ours([claims.load(f) for f in c.files]).quote for c in claims.CLAIMS if c.key == "si-t4-sdsc")
    number = NUMBER.search(quote)[0]
    changed = str((int(number[0]) + 1) % 10) + number[1:]
    edited = ledger.replace(quote, quote.replace(number, changed, 1), 1)
    assert edited != ledger
    assert edited != claims.ledger()
    assert mismatches(edited) == [f"si-t4-sdsc: {changed}"]


def test_paper_pages_quote_the_ledger():
    """A paper page that links a ledger row quotes the row's headline number in the same paragraph."""
    quotes = {c.key: claims.read(c).quote for c in claims.CLAIMS}
    linked = 0
    for page in PAGES:
        text = (DOCS / page).read_text()
        assert "(claims.md)" in "\n".join(text.splitlines()[:12]), f"{page}: no link to the ledger at its top"
        for paragraph in text.split("\n\n"):
            for key in re.findall(r"\(claims\.md#([\w-]+)\)", paragraph):
                linked += 1
                assert quotes[key] in paragraph, f"{page}: {key} should quote {quotes[key]!r}"
    assert linked >= 5


def test_rlbf_rows_read_the_paper_windows():
    """The RL backfilling scw rows read the delay study's "paper" seed set once it is there: the
    spread over the three agents, EASY, and each agent's paired CI over the windows."""
    windows = np.arange(10.0)
    totals = {f"s{s}": {"paper": {"mean_bsld_rl": 100.0 + s, "mean_bsld_easy": 150.0,
                                  "bsld_rl": list(windows + 95 + s), "bsld_easy": list(windows + 145)}}
              for s in claims.SEEDS}
    ours = claims.rlbf_paper_windows([totals])
    assert ours.quote == "101.00 ± 1.00 (100.00..102.00)"
    assert ours.held == 3 and "EASY 150.00" in ours.text
    assert claims.by_seeds("below EASY")(ours)[0] == "reproduced"
    waiting = claims.rlbf_paper_windows([{s: {"0": {}, "100": {}} for s in totals}])
    assert waiting.text == claims.PENDING and claims.by_seeds("below EASY")(waiting)[0] == "pending"


def test_dras_ranking_pairs_the_rules_by_window_within_a_seed():
    """Every rule's waits are one curve shifted by a constant per rule and seed, so each seed's paired
    difference is that constant on every window and its CI a point (hand-worked in the comments)."""
    base = np.linspace(4.0, 6.0, 10)
    def entry(offset: float) -> dict:
        values = list(base + offset)
        return {"mean": {"remade": {"mean_wait_h": float(np.mean(values))}}, "windows": {"remade": {"mean_wait_h": values}}}
    policies = {"fcfs-easy": entry(2.0)}
    for s in claims.SEEDS:
        policies |= {f"ppo-s{s}": entry(0.0), f"a2c-s{s}": entry(1.0), f"pg-s{s}": entry(0.0 if s == 2 else 1.0),
                     f"dql-s{s}": entry(3.0)}
    ours = claims.dras_ranking("mean_wait_h")([{"policies": policies}])
    # seeds 0, 1: (0 + 1) / 2 - (1 + 3) / 2 = -1.5; seed 2: 0.5 - 1.5 = -1.0
    assert ours.parts[-1] == "PPO and A2C's mean minus PG and DQL's, per seed -1.5 [-1.5, -1.5], -1.5 [-1.5, -1.5], -1.0 [-1.0, -1.0]"
    assert ours.held == 3 and ours.parts[0] == "PPO 5.00 ± 0.00 (5.00..5.00)" and "FCFS/B 7.00" in ours.text
    policies["dql-s1"] = entry(-1.0)  # seed 1: (0 + 1) / 2 - (1 - 1) / 2 = +0.5: PG and DQL ahead
    assert claims.dras_ranking("mean_wait_h")([{"policies": policies}]).held == 2


def test_a_rerun_writes_into_its_own_folder_and_finds_a_changed_number(tmp_path):
    """benchmarks/rerun.py runs a file's recorded command with its output sent elsewhere (the
    committed file stays as it was) and compares every number but timings and provenance."""
    import rerun

    script = tmp_path / "make.py"
    script.write_text("import json, pathlib, sys\nout = pathlib.Path(sys.argv[sys.argv.index('--out') + 1])\n"
                      "out.mkdir(parents=True, exist_ok=True)\n(out / 'results.json').write_text(json.dumps("
                      "{'rows': [1.5, 2.0], 'seconds': 7.0, 'provenance': {}}))\n")
    committed = tmp_path / "docs" / "results.json"
    committed.parent.mkdir()
    record = {"commit": "abc", "command": f"python {script} --out {committed.parent}"}
    for rows, identical in (([1.5, 2.0], True), ([1.5, 2.25], False)):
        committed.write_text(json.dumps({"rows": rows, "seconds": 1.0, "provenance": record}))
        result = rerun.rerun(committed, tmp_path / "rerun")
        assert result["identical"] is identical and json.loads(committed.read_text())["rows"] == rows
    assert result["differ"] == 1 and result["examples"] == [{"path": "/rows[1]", "committed": 2.25, "rerun": 2.0}]


def test_fig1_holds_only_where_one_noisy_level_beats_exact_on_every_noise_seed():
    """Fig. 1's rule: a noise seed holds for the FCFS ±E level most seeds hold for; two levels that
    each beat exact on a different seed are not one level beating it on both."""
    def cell(high: float) -> dict:
        return {"diff": high - 1, "ci_low": high - 2, "ci_high": high, "whole_diff": 0.0}

    def study(highs: dict[str, list[float]]) -> dict:
        levels = {k: {str(n): cell(h) for n, h in enumerate(v)} for k, v in highs.items()}
        return {"noise_seeds": [0, 1, 2], "fcfs": {**levels, "over-0.2": levels["noisy-0.2"]}, "sjf": levels}

    rule = claims.by_seeds("below exact")
    every = claims.fig1_noisy([study({"noisy-0.2": [-0.5, -0.1, -0.3], "noisy-1": [3.0, 3.0, 3.0]})])
    # diffs -1.5, -1.1, -1.3: mean -1.3, sample sd 0.2
    assert every.quote == "FCFS ±20% minus exact -1.30 ± 0.20 (-1.50..-1.10)"
    assert rule(every)[0] == "reproduced"
    split = claims.fig1_noisy([study({"noisy-0.2": [-0.5, 0.1, 0.1], "noisy-1": [0.1, -0.5, -0.5]})])
    assert split.held == 2 and rule(split)[0] == "partly"
