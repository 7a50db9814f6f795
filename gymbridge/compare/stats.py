"""Statistics over samples (one job sequence each): means, medians, paired differences to a
baseline with a seeded percentile-bootstrap 95% CI, win rates, latency (docs/compare.md)."""

from __future__ import annotations

import numpy as np

#: Metrics in the tables: (key, label, higher is better).
METRICS = (("mean_bsld", "bounded slowdown", False), ("mean_wait", "wait (s)", False),
           ("mean_response", "response (s)", False), ("mean_slowdown", "slowdown", False),
           ("max_bsld", "max bounded slowdown", False), ("max_wait", "max wait (s)", False),
           ("utilization", "utilization", True), ("makespan", "makespan (s)", False))
HIGHER_IS_BETTER = {key: higher for key, _, higher in METRICS}
STATS = ("mean", "median", "diff", "ci_low", "ci_high", "win_rate")


def bootstrap_ci(d: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the mean of `d`."""
    d, rng = np.asarray(d, dtype=np.float64), np.random.default_rng(seed)
    idx = rng.integers(0, len(d), size=(resamples, len(d)))
    means = d[idx].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def win_rate(values: np.ndarray, baseline: np.ndarray, higher_is_better: bool) -> float:
    better = values > baseline if higher_is_better else values < baseline
    ties = values == baseline
    return float((better.sum() + 0.5 * ties.sum()) / len(values))


def summarize_policies(policies: list[str], baseline: str, values: dict[str, dict[str, list[float]] | None],
                       resamples: int, seed: int) -> dict[str, dict[str, float | None]]:
    """`{metric}_{stat}` per policy (None: failed): mean, median, paired difference to the baseline, CI, win rate."""
    out: dict[str, dict[str, float | None]] = {}
    base = values.get(baseline)
    for name in policies:
        row: dict[str, float | None] = {}
        vals = values.get(name)
        for key, _, higher in METRICS:
            if vals is None:
                row.update({f"{key}_{s}": None for s in STATS})
                continue
            v = np.asarray(vals[key], dtype=np.float64)
            row[f"{key}_mean"] = float(v.mean())
            row[f"{key}_median"] = float(np.median(v))
            if base is None or name == baseline:
                row.update({f"{key}_diff": 0.0 if name == baseline else None, f"{key}_ci_low": None,
                            f"{key}_ci_high": None, f"{key}_win_rate": None})
                continue
            b = np.asarray(base[key], dtype=np.float64)
            d = v - b
            row[f"{key}_diff"] = float(d.mean())
            row[f"{key}_ci_low"], row[f"{key}_ci_high"] = bootstrap_ci(d, resamples, seed) if len(d) > 1 else (None, None)
            row[f"{key}_win_rate"] = win_rate(v, b, higher)
        out[name] = row
    return out


def latency_stats(samples_s: list[float]) -> dict[str, float]:
    """Decisions asked, and their latencies' mean, median, 95th percentile and maximum in ms."""
    a = np.asarray(samples_s, dtype=np.float64) * 1000.0
    if len(a) == 0:
        return {"asked": 0}
    return {"asked": int(len(a)), "mean_ms": float(a.mean()), "p50_ms": float(np.median(a)),
            "p95_ms": float(np.percentile(a, 95)), "max_ms": float(a.max())}
