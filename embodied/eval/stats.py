"""Statistics of evaluation results: pure numpy functions, no torch.

- Success rates of Bernoulli trials: the Wilson score interval (`wilson_interval`),
  Newcombe's hybrid score interval for a difference of two rates (`newcombe_difference`,
  the sim-to-real gap) and its version for paired trials (`newcombe_paired_difference`: two
  checkpoints on the same seeds).
- Aggregates over a score matrix `[runs, tasks]` (rliable, Agarwal et al. 2021): `iqm`,
  `mean`, `median`, `optimality_gap`, with percentile intervals from the stratified
  bootstrap (`stratified_bootstrap_ci`): the run is the unit, resampled with replacement
  within each task, independently per task.
- `probability_of_improvement` P(X > Y) (ties count half, averaged over tasks) and its
  interval (`probability_of_improvement_ci`).
- Agreement of simulated and real success over policies: `pearson`, `spearman` and
  SimplerEnv's mean maximum rank violation (`mmrv`, Li et al. 2024).

Every function rejects bad input with a `StatsError` (a ValueError) naming the argument.
Random functions take a `seed` and draw from `np.random.default_rng(seed)` only.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Callable

import numpy as np


class StatsError(ValueError):
    """Bad input to a statistic: the message names the argument and what is allowed."""


# ---------------------------------------------------------------------------- input checks

def _z(confidence: float) -> float:
    """The two-sided standard-normal quantile z_{(1+c)/2}: 1.959964 for c = 0.95."""
    if not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
        raise StatsError(f"confidence: expected a number in (0, 1), got {confidence!r}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _counts(k, n, kname: str = "k", nname: str = "n") -> tuple[np.ndarray, np.ndarray]:
    """k successes of n trials as float arrays (broadcast); integers with 0 <= k <= n, n >= 1."""
    k_arr, n_arr = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    for name, a in ((kname, k_arr), (nname, n_arr)):
        if a.size == 0:
            raise StatsError(f"{name}: expected a count, got an empty array")
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            raise StatsError(f"{name}: expected whole numbers, got {a.tolist()}")
    if np.any(n_arr < 1):
        raise StatsError(f"{nname}: expected at least 1 trial, got {n_arr.tolist()}")
    try:
        k_arr, n_arr = np.broadcast_arrays(k_arr, n_arr)
    except ValueError:
        raise StatsError(f"{kname}, {nname}: shapes {k_arr.shape} and {n_arr.shape} do not broadcast") from None
    if np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise StatsError(f"{kname}: expected 0 <= {kname} <= {nname}, got {kname}={k_arr.tolist()}, "
                         f"{nname}={n_arr.tolist()}")
    return k_arr, n_arr


def _matrix(name: str, x) -> np.ndarray:
    """A finite float score matrix `[runs, tasks]` with at least one run and one task."""
    a = np.asarray(x, dtype=float)
    if a.ndim != 2:
        raise StatsError(f"{name}: expected a 2-D array [runs, tasks], got shape {a.shape}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise StatsError(f"{name}: expected at least one run and one task, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise StatsError(f"{name}: expected finite scores, got NaN or inf")
    return a


def _scores(x) -> np.ndarray:
    """Finite float scores [..., runs, tasks], at least one run and one task."""
    a = np.asarray(x, dtype=float)
    if a.ndim < 2 or a.shape[-1] == 0 or a.shape[-2] == 0:
        raise StatsError(f"scores: expected an array [..., runs, tasks] with at least one run and one task, "
                         f"got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise StatsError("scores: expected finite scores, got NaN or inf")
    return a


def _pair(x, y, xname: str, yname: str, min_len: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Two finite 1-D arrays `[N]` of equal length N >= min_len."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    for name, v in ((xname, a), (yname, b)):
        if v.ndim != 1:
            raise StatsError(f"{name}: expected a 1-D array [policies], got shape {v.shape}")
        if len(v) < min_len:
            raise StatsError(f"{name}: expected at least {min_len} values, got {len(v)}")
        if not np.all(np.isfinite(v)):
            raise StatsError(f"{name}: expected finite values, got NaN or inf")
    if a.shape != b.shape:
        raise StatsError(f"{yname}: expected the shape of {xname} {a.shape}, got {b.shape}")
    return a, b


def _reps(reps: int) -> int:
    if not isinstance(reps, (int, np.integer)) or reps < 1:
        raise StatsError(f"reps: expected a positive integer, got {reps!r}")
    return int(reps)


def _scalar(a: np.ndarray):
    return float(a) if a.ndim == 0 else a


# ---------------------------------------------------------------------------- success rates

def wilson_interval(k, n, confidence: float = 0.95):
    """Wilson score interval of a success rate with k successes in n trials.

    k, n: integers or integer arrays (broadcast), 0 <= k <= n, n >= 1. With p = k/n and
    z = z_{(1+c)/2}:  centre = (p + z^2/2n) / (1 + z^2/n),
    half = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n).
    Returns (low, high): floats for scalar input, else arrays of the broadcast shape.
    """
    z = _z(confidence)
    k_arr, n_arr = _counts(k, n)
    p = k_arr / n_arr
    denom = 1.0 + z * z / n_arr
    centre = (p + z * z / (2.0 * n_arr)) / denom
    half = z * np.sqrt(p * (1.0 - p) / n_arr + z * z / (4.0 * n_arr * n_arr)) / denom
    low = np.where(k_arr == 0, 0.0, np.clip(centre - half, 0.0, 1.0))
    high = np.where(k_arr == n_arr, 1.0, np.clip(centre + half, 0.0, 1.0))
    return _scalar(low), _scalar(high)


def newcombe_difference(k1, n1, k2, n2, confidence: float = 0.95):
    """Difference p1 - p2 of two independent success rates with Newcombe's hybrid score
    interval (Newcombe 1998, method 10), built from the two Wilson intervals (l_i, u_i):
    low = d - sqrt((p1 - l1)^2 + (u2 - p2)^2), high = d + sqrt((u1 - p1)^2 + (p2 - l2)^2).

    Integers or integer arrays (broadcast). Returns (d, low, high).
    """
    k1a, n1a = _counts(k1, n1, "k1", "n1")
    k2a, n2a = _counts(k2, n2, "k2", "n2")
    l1, u1 = (np.asarray(v) for v in wilson_interval(k1a, n1a, confidence))
    l2, u2 = (np.asarray(v) for v in wilson_interval(k2a, n2a, confidence))
    p1, p2 = k1a / n1a, k2a / n2a
    d = p1 - p2
    low = d - np.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = d + np.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return _scalar(d), _scalar(low), _scalar(high)


def newcombe_paired_difference(a, b, c, d, confidence: float = 0.95):
    """Difference p2 - p1 of two success rates measured on the same n = a + b + c + d trials
    (two policies on the same seeds), with Newcombe's score interval for paired proportions
    (Newcombe 1998, "Improved confidence intervals for the difference between binomial
    proportions based on paired data", method 10, without continuity correction).

    a: both succeed, b: only the first, c: only the second, d: neither (integers >= 0, n >= 1).
    p1 = (a + b) / n, p2 = (a + c) / n, with Wilson intervals (l1, u1), (l2, u2);
    phi = (a d - b c) / sqrt((a + b)(c + d)(a + c)(b + d)), 0 when a margin is empty;
    low = D - sqrt((p2 - l2)^2 - 2 phi (p2 - l2)(u1 - p1) + (u1 - p1)^2),
    high = D + sqrt((u2 - p2)^2 - 2 phi (u2 - p2)(p1 - l1) + (p1 - l1)^2), D = (c - b) / n.
    Returns (D, low, high) as floats.
    """
    counts = np.asarray([a, b, c, d])
    if counts.shape != (4,) or np.any(counts < 0) or np.any(counts != np.round(counts)) or counts.sum() < 1:
        raise StatsError(f"a, b, c, d: expected 4 integer counts >= 0 with a positive sum, got {[a, b, c, d]}")
    a, b, c, d = (float(x) for x in counts)
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(int(a + b), int(n), confidence)
    l2, u2 = wilson_interval(int(a + c), int(n), confidence)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / np.sqrt(margins) if margins > 0 else 0.0
    diff = p2 - p1
    low = diff - np.sqrt(max((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2, 0.0))
    high = diff + np.sqrt(max((u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2, 0.0))
    return float(diff), float(max(low, -1.0)), float(min(high, 1.0))


# ---------------------------------------------------------------------------- aggregates
# Each takes scores [..., runs, tasks] and reduces the last two axes: [...].

def iqm(scores) -> np.ndarray | float:
    """Interquartile mean: the mean of the scores left after trimming int(0.25 N) of the
    N = runs * tasks scores from each end (scipy.stats.trim_mean(x, 0.25), as rliable)."""
    a = _scores(scores)
    flat = np.sort(a.reshape(*a.shape[:-2], -1), axis=-1)
    cut = int(0.25 * flat.shape[-1])
    return _scalar(flat[..., cut:flat.shape[-1] - cut].mean(axis=-1))


def mean(scores) -> np.ndarray | float:
    """Mean over all runs and tasks."""
    return _scalar(_scores(scores).mean(axis=(-2, -1)))


def median(scores) -> np.ndarray | float:
    """Median over all runs and tasks."""
    a = _scores(scores)
    return _scalar(np.median(a.reshape(*a.shape[:-2], -1), axis=-1))


def optimality_gap(scores, gamma: float = 1.0) -> np.ndarray | float:
    """Mean shortfall below the target gamma: mean(gamma - min(score, gamma)); 0 is best."""
    a = _scores(scores)
    return _scalar((gamma - np.minimum(a, gamma)).mean(axis=(-2, -1)))


AGGREGATES: dict[str, Callable] = {"iqm": iqm, "mean": mean, "median": median,
                                   "optimality_gap": optimality_gap}


def _aggregate_fn(aggregate) -> tuple[Callable, bool]:
    """(function, batched): a name of AGGREGATES (batched over leading axes) or a callable
    `[runs, tasks] -> float` (called once per bootstrap sample)."""
    if callable(aggregate):
        return aggregate, False
    if aggregate not in AGGREGATES:
        raise StatsError(f"aggregate: expected one of {sorted(AGGREGATES)} or a callable, got {aggregate!r}")
    return AGGREGATES[aggregate], True


def _resample(rng: np.random.Generator, scores: np.ndarray, reps: int) -> np.ndarray:
    """Stratified bootstrap samples [reps, runs, tasks]: within each task (column), runs drawn
    with replacement, independently per task."""
    runs, tasks = scores.shape
    idx = rng.integers(0, runs, size=(reps, runs, tasks))
    return scores[idx, np.arange(tasks)]


def _percentiles(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(stats, [alpha, 100.0 - alpha])
    return float(low), float(high)


def stratified_bootstrap_ci(scores, aggregate="iqm", reps: int = 2000, confidence: float = 0.95,
                            seed: int = 0) -> tuple[float, float, float]:
    """An aggregate of a score matrix with its percentile stratified-bootstrap interval.

    scores: [runs, tasks], e.g. each run's success rate on each task; the run (a training
    seed, an evaluation seed block) is the unit, never the episode. aggregate: "iqm",
    "mean", "median", "optimality_gap" or a callable [runs, tasks] -> float.
    Returns (point, low, high): the aggregate of `scores` and the (1-c)/2, (1+c)/2
    percentiles of `reps` bootstrap aggregates.
    """
    a = _matrix("scores", scores)
    fn, batched = _aggregate_fn(aggregate)
    _z(confidence)
    rng = np.random.default_rng(seed)
    samples = _resample(rng, a, _reps(reps))
    stats = np.asarray(fn(samples)) if batched else np.array([fn(s) for s in samples])
    return (float(fn(a)), *_percentiles(stats, confidence))


# ---------------------------------------------------------------------------- improvement

def _poi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 per task averaged over tasks: x [..., nx, tasks],
    y [..., ny, tasks] -> [...] (the Mann-Whitney U statistic over nx * ny, as rliable)."""
    xe, ye = x[..., :, None, :], y[..., None, :, :]  # [..., nx, 1, T], [..., 1, ny, T]
    per_task = ((xe > ye) + 0.5 * (xe == ye)).mean(axis=(-3, -2))  # [..., T]
    return per_task.mean(axis=-1)


def probability_of_improvement(x, y) -> float:
    """P(X > Y), ties counted half, averaged over tasks. x: [runs_x, tasks],
    y: [runs_y, tasks] (the same tasks in the same column order)."""
    a, b = _matrix("x", x), _matrix("y", y)
    if a.shape[1] != b.shape[1]:
        raise StatsError(f"y: expected {a.shape[1]} tasks (columns) like x, got {b.shape[1]}")
    return float(_poi(a, b))


def probability_of_improvement_ci(x, y, reps: int = 2000, confidence: float = 0.95,
                                  seed: int = 0) -> tuple[float, float, float]:
    """probability_of_improvement with its percentile bootstrap interval: the runs of x and
    of y are resampled independently, each within each task (rliable's
    StratifiedIndependentBootstrap). Returns (point, low, high)."""
    point = probability_of_improvement(x, y)
    _z(confidence)
    rng = np.random.default_rng(seed)
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = _reps(reps)
    stats = np.concatenate([_poi(_resample(rng, a, m), _resample(rng, b, m))
                            for m in np.diff(np.r_[0:n:256, n])])  # chunks bound the memory
    return (point, *_percentiles(stats, confidence))


# ---------------------------------------------------------------------------- sim vs real

def pearson(x, y) -> float:
    """Pearson correlation of two [N] arrays, N >= 2; NaN when either is constant."""
    a, b = _pair(x, y, "x", "y")
    a, b = a - a.mean(), b - b.mean()
    denom = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denom) if denom > 0 else float("nan")


def rankdata(x) -> np.ndarray:
    """Ranks 1..N of a [N] array, tied values getting the average of their ranks."""
    a = np.asarray(x, dtype=float)
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    start = np.cumsum(counts) - counts  # ranks taken by the smaller values
    return (start + (counts + 1) / 2.0)[inverse]


def spearman(x, y) -> float:
    """Spearman rank correlation: Pearson of the average ranks; NaN when either is constant."""
    a, b = _pair(x, y, "x", "y")
    return pearson(rankdata(a), rankdata(b))


def mmrv(sim, real) -> float:
    """Mean maximum rank violation (SimplerEnv, Li et al. 2024) of N policies' simulated and
    real success rates, [N] each, N >= 2. A pair (i, j) violates when the strict orders
    disagree, (sim_i > sim_j) != (real_i > real_j), and costs |real_i - real_j|;
    MMRV = mean_i max_j cost(i, j). 0 when sim ranks the policies as reality does."""
    s, r = _pair(sim, real, "sim", "real")
    violates = (s[:, None] > s[None, :]) != (r[:, None] > r[None, :])  # [N, N]
    cost = np.abs(r[:, None] - r[None, :]) * violates
    return float(cost.max(axis=1).mean())
