"""embodied/eval/stats.py against hand-computed numbers, published values, invariances, a
simulated coverage check and (where it installs: the dev extra) rliable's implementation."""

from __future__ import annotations

import numpy as np
import pytest

from embodied.eval import stats
from embodied.eval.stats import StatsError


# ---------------------------------------------------------------------------- Wilson, Newcombe

# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Stat. Med.
# 17:857-872, Table I, method 3 (score interval without continuity correction), 95%.
NEWCOMBE_SINGLE = [((81, 263), (0.2553, 0.3662)), ((15, 148), (0.0624, 0.1605)),
                   ((0, 20), (0.0000, 0.1611)), ((1, 29), (0.0061, 0.1718))]

# Newcombe (1998), "Interval estimation for the difference between independent proportions",
# Stat. Med. 17:873-890, Table II, method 10 (hybrid score), 95%.
NEWCOMBE_DIFF = [((56, 70, 48, 80), (0.0524, 0.3339)), ((9, 10, 3, 10), (0.1705, 0.8090)),
                 ((6, 7, 2, 7), (0.0582, 0.8062)), ((5, 56, 0, 29), (-0.0381, 0.1926)),
                 ((0, 10, 0, 20), (-0.1611, 0.2775)), ((0, 10, 0, 10), (-0.2775, 0.2775)),
                 ((10, 10, 0, 20), (0.6791, 1.0000)), ((10, 10, 0, 10), (0.6075, 1.0000))]


@pytest.mark.parametrize("kn, published", NEWCOMBE_SINGLE)
def test_wilson_published(kn, published):
    low, high = stats.wilson_interval(*kn)
    assert (round(low, 4), round(high, 4)) == published


def test_wilson_by_hand():
    # k=7, n=10, z=1.959964: z^2=3.841459; denom = 1 + 0.3841459 = 1.3841459
    # centre = (0.7 + 3.841459/20) / denom = 0.8920730 / 1.3841459 = 0.644494
    # half = 1.959964 * sqrt(0.21/10 + 3.841459/400) / denom
    #      = 1.959964 * sqrt(0.0306036) / 1.3841459 = 1.959964 * 0.174939 / 1.3841459 = 0.247715
    low, high = stats.wilson_interval(7, 10)
    assert low == pytest.approx(0.644494 - 0.247715, abs=2e-6)  # 0.396779
    assert high == pytest.approx(0.644494 + 0.247715, abs=2e-6)  # 0.892209


def test_wilson_invariances():
    k = np.arange(0, 31)
    low, high = stats.wilson_interval(k, 30)  # arrays broadcast
    low_r, high_r = stats.wilson_interval(30 - k, 30)
    np.testing.assert_allclose(low, 1.0 - high_r, atol=1e-12)  # success <-> failure symmetry
    assert np.all(low <= k / 30) and np.all(k / 30 <= high)
    assert np.all(np.diff(low) > 0) and np.all(np.diff(high) > 0)
    l90, h90 = stats.wilson_interval(k, 30, confidence=0.90)
    assert np.all(l90 >= low) and np.all(h90 <= high)  # narrower at lower confidence
    l300, h300 = stats.wilson_interval(10 * k, 300)  # 10x the trials, same rate: narrower
    assert np.all(h300 - l300 < high - low)


@pytest.mark.parametrize("args, published", NEWCOMBE_DIFF)
def test_newcombe_published(args, published):
    d, low, high = stats.newcombe_difference(*args)
    assert d == pytest.approx(args[0] / args[1] - args[2] / args[3])
    assert (round(low, 4), round(high, 4)) == published


def test_newcombe_by_hand():
    # 56/70 - 48/80: Wilson(56, 70) = (0.6920, 0.8740), Wilson(48, 80) = (0.4904, 0.7003) (4 d.p.)
    # low = 0.2 - sqrt((0.8 - l1)^2 + (u2 - 0.6)^2), high = 0.2 + sqrt((u1 - 0.8)^2 + (0.6 - l2)^2)
    l1, u1 = stats.wilson_interval(56, 70)
    l2, u2 = stats.wilson_interval(48, 80)
    _, low, high = stats.newcombe_difference(56, 70, 48, 80)
    assert low == pytest.approx(0.2 - np.hypot(0.8 - l1, u2 - 0.6))
    assert high == pytest.approx(0.2 + np.hypot(u1 - 0.8, 0.6 - l2))
    # antisymmetry: swapping the groups negates the difference and mirrors the interval
    d2, low2, high2 = stats.newcombe_difference(48, 80, 56, 70)
    assert (d2, low2, high2) == pytest.approx((-0.2, -high, -low))


# ---------------------------------------------------------------------------- aggregates

def test_newcombe_paired_by_hand():
    """a=10 both, b=5 only the first, c=15 only the second, d=70 neither: D = (15 - 5) / 100, and
    the bounds from the two Wilson intervals and phi, written out."""
    a, b, c, d = 10, 5, 15, 70
    p1, p2 = 0.15, 0.25
    l1, u1 = stats.wilson_interval(15, 100)
    l2, u2 = stats.wilson_interval(25, 100)
    phi = (a * d - b * c) / np.sqrt(15 * 85 * 25 * 75)
    low = 0.10 - np.sqrt((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2)
    high = 0.10 + np.sqrt((u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2)
    np.testing.assert_allclose(stats.newcombe_paired_difference(a, b, c, d), (0.10, low, high), atol=1e-12)
    # phi = 0 (independent pairs): the interval of two independent rates over the same n
    np.testing.assert_allclose(stats.newcombe_paired_difference(3, 7, 12, 28),
                               stats.newcombe_difference(15, 50, 10, 50), atol=1e-12)
    # correlated pairs (phi > 0): narrower than treating them as independent
    lo_p, hi_p = stats.newcombe_paired_difference(40, 2, 10, 48)[1:]
    lo_i, hi_i = stats.newcombe_difference(50, 100, 42, 100)[1:]
    assert hi_p - lo_p < 0.8 * (hi_i - lo_i)
    with pytest.raises(StatsError, match="a, b, c, d"):
        stats.newcombe_paired_difference(1, -1, 2, 3)


def test_newcombe_paired_coverage():
    """Correlated paired successes (each pair shares its seed's difficulty half of the time): the
    95% interval covers the true difference in 92-98% of 1,000 draws, for rates near 0, middling
    and near 1."""
    rng = np.random.default_rng(0)
    for p1, p2, n in ((0.3, 0.5, 100), (0.7, 0.75, 60), (0.05, 0.1, 80), (0.5, 0.85, 40)):
        hits = 0
        for _ in range(1000):
            u = rng.random(n)
            v = np.where(rng.random(n) < 0.5, u, rng.random(n))
            x, y = u < p1, v < p2
            _, low, high = stats.newcombe_paired_difference(int(np.sum(x & y)), int(np.sum(x & ~y)),
                                                            int(np.sum(~x & y)), int(np.sum(~x & ~y)))
            hits += low <= p2 - p1 <= high
        assert 0.92 <= hits / 1000 <= 0.98, (p1, p2, n, hits / 1000)


def test_iqm_by_hand():
    # N=8: trim int(0.25*8)=2 each side of 1..8 -> mean(3, 4, 5, 6) = 4.5
    assert stats.iqm(np.arange(1.0, 9.0).reshape(4, 2)) == 4.5
    # N=10: trim int(2.5)=2 each side of [0, 0, 1, 2, 3, 4, 5, 9, 100, 100]
    # -> mean(1, 2, 3, 4, 5, 9) = 24 / 6 = 4.0 (trimming 3 would give 3.5)
    scores = np.array([[100, 0], [3, 4], [0, 9], [2, 100], [5, 1]], dtype=float)
    assert stats.iqm(scores) == 4.0
    assert stats.mean(scores) == pytest.approx(224 / 10)
    assert stats.median(scores) == 3.5  # (3 + 4) / 2
    # gap below 1 of [0.2, 1.3, 0.9, 1.0]: (0.8 + 0 + 0.1 + 0) / 4 = 0.225
    assert stats.optimality_gap([[0.2, 1.3], [0.9, 1.0]]) == pytest.approx(0.225)


def test_iqm_batched_equals_loop():
    x = np.random.default_rng(0).random((7, 5, 3))
    np.testing.assert_allclose(stats.iqm(x), [stats.iqm(m) for m in x])


def test_bootstrap_is_stratified():
    """Each bootstrap sample draws task j's column from task j's runs only: task j's scores lie
    in [j, j + 1), and a callable aggregate checks every sample."""
    rng = np.random.default_rng(1)
    scores = np.arange(4)[None, :] + rng.random((6, 4))  # [runs=6, tasks=4]
    seen = []

    def check(sample):  # [runs, tasks]
        assert np.all(np.floor(sample) == np.arange(4)[None, :])
        assert all(np.isin(sample[:, j], scores[:, j]).all() for j in range(4))
        seen.append(sample)
        return float(sample.mean())

    point, low, high = stats.stratified_bootstrap_ci(scores, check, reps=200, seed=3)
    assert len(seen) == 201 and low <= point <= high
    # independently per task (rliable's StratifiedBootstrap), not whole rows: a resampled row
    # takes tasks 0 and 1 from the same run with probability 1 / runs, not 1
    run_of = {v: i for i, v in enumerate(scores[:, 0])}, {v: i for i, v in enumerate(scores[:, 1])}
    same = np.mean([[run_of[0][a] == run_of[1][b] for a, b in s[:, :2]] for s in seen[:-1]])  # the last call is the point estimate
    assert same == pytest.approx(1 / 6, abs=0.03)
    # the named aggregate, batched, gives the same interval for the same seed
    assert stats.stratified_bootstrap_ci(scores, "mean", reps=200, seed=3) == pytest.approx((point, low, high))


def test_bootstrap_seeded():
    scores = np.random.default_rng(2).random((10, 3))
    a = stats.stratified_bootstrap_ci(scores, "iqm", reps=500, seed=7)
    assert a == stats.stratified_bootstrap_ci(scores, "iqm", reps=500, seed=7)
    assert a != stats.stratified_bootstrap_ci(scores, "iqm", reps=500, seed=8)


def test_bootstrap_coverage():
    """On 300 simulated experiments (10 runs x 4 tasks, each run's score its success rate over
    20 Bernoulli trials at the task's rate), the 95% interval of the mean covers the true
    mean about 95% of the time (percentile intervals under-cover a little at 10 runs)."""
    rng = np.random.default_rng(0)
    rates = np.array([0.2, 0.5, 0.7, 0.9])
    truth = rates.mean()
    hits, widths = 0, []
    for i in range(300):
        scores = rng.binomial(20, rates, size=(10, 4)) / 20.0  # [runs, tasks]
        _, low, high = stats.stratified_bootstrap_ci(scores, "mean", reps=1000, seed=i)
        hits += low <= truth <= high
        widths.append(high - low)
    assert 0.90 <= hits / 300 <= 0.99, hits
    # the interval's width matches the sampling spread: 2 * 1.96 * sd(mean of 40 scores)
    sd = np.sqrt((rates * (1 - rates) / 20).sum() / 10) / 4
    assert np.mean(widths) == pytest.approx(2 * 1.96 * sd, rel=0.1)


# ---------------------------------------------------------------------------- improvement

def test_probability_of_improvement_by_hand():
    # one task: x = [1, 2, 3], y = [2, 2]: pairs x>y: (3,2)x2 = 2; ties: (2,2)x2 = 2 -> (2 + 1) / 6
    assert stats.probability_of_improvement([[1], [2], [3]], [[2], [2]]) == 0.5
    # two tasks: task 0 x always better (1.0), task 1: x=[0, 1] vs y=[1, 1]: ties 2 of 4 -> 0.25
    x = [[5, 0], [6, 1]]
    y = [[1, 1], [2, 1]]
    assert stats.probability_of_improvement(x, y) == pytest.approx((1.0 + 0.25) / 2)
    # P(X > Y) + P(Y > X) = 1 with ties counted half
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, (8, 3)), rng.integers(0, 4, (5, 3))
    assert stats.probability_of_improvement(a, b) + stats.probability_of_improvement(b, a) == pytest.approx(1.0)


def test_probability_of_improvement_ci():
    rng = np.random.default_rng(0)
    better, worse = rng.normal(1.0, 1.0, (10, 3)), rng.normal(0.0, 1.0, (10, 3))
    point, low, high = stats.probability_of_improvement_ci(better, worse, reps=1000, seed=0)
    assert 0.5 < low <= point <= high <= 1.0
    same = rng.normal(0.0, 1.0, (10, 3))
    _, low, high = stats.probability_of_improvement_ci(same, same, reps=1000, seed=0)
    assert low < 0.5 < high


# ---------------------------------------------------------------------------- sim vs real

def test_correlations_by_hand():
    # x=[1,2,3], y=[1,3,2]: deviations [-1,0,1], [-1,1,0]: sum of products 1 / sqrt(2 * 2) = 0.5
    assert stats.pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    # ties: ranks of [1,2,2,3] are [1, 2.5, 2.5, 4]; deviations [-1.5,0,0,1.5] and [-1.5,-.5,.5,1.5]:
    # 4.5 / sqrt(4.5 * 5) = 0.948683
    assert stats.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / np.sqrt(22.5))
    np.testing.assert_array_equal(stats.rankdata([3, 1, 2, 1]), [4, 1.5, 3, 1.5])
    assert np.isnan(stats.pearson([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]))  # constant: undefined


def test_correlations_invariances():
    rng = np.random.default_rng(0)
    x, y = rng.random(6), rng.random(6)
    assert stats.pearson(3 * x + 1, y) == pytest.approx(stats.pearson(x, y))
    assert stats.pearson(-x, y) == pytest.approx(-stats.pearson(x, y))
    assert stats.spearman(np.exp(5 * x), y) == pytest.approx(stats.spearman(x, y))
    assert stats.pearson(x, x) == pytest.approx(1.0)


def test_scipy_agrees():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(4)
    x, y = rng.integers(0, 5, 12).astype(float), rng.random(12)
    assert stats.pearson(x, y) == pytest.approx(scipy_stats.pearsonr(x, y)[0])
    assert stats.spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x, y)[0])
    np.testing.assert_allclose(stats.rankdata(x), scipy_stats.rankdata(x))


def test_mmrv_by_hand():
    # sim [0.1, 0.5, 0.9], real [0.2, 0.8, 0.6]: only policies 1 and 2 swap, costing |0.8 - 0.6|;
    # per-policy maxima [0, 0.2, 0.2] -> 0.4 / 3
    assert stats.mmrv([0.1, 0.5, 0.9], [0.2, 0.8, 0.6]) == pytest.approx(0.4 / 3)
    assert stats.mmrv([0.1, 0.5, 0.9], [0.0, 0.3, 1.0]) == 0.0  # same order
    # reversed order of [0, 0.5, 1]: maxima [1, 0.5, 1] -> 2.5 / 3
    assert stats.mmrv([0.0, 0.5, 1.0], [1.0, 0.5, 0.0]) == pytest.approx(2.5 / 3)
    # SimplerEnv's strict comparison: sim tied, real not: (1, 0) violates (0.4 > 0.2 but not
    # 0.5 > 0.5), (0, 1) does not -> maxima [0, 0.2] -> 0.1
    assert stats.mmrv([0.5, 0.5], [0.2, 0.4]) == pytest.approx(0.1)
    # invariant to a monotone transform of the simulated rates
    rng = np.random.default_rng(0)
    s, r = rng.random(5), rng.random(5)
    assert stats.mmrv(s ** 3, r) == pytest.approx(stats.mmrv(s, r))


# ---------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("call, name", [
    (lambda: stats.wilson_interval(5, 3), "k"),
    (lambda: stats.wilson_interval(-1, 3), "k"),
    (lambda: stats.wilson_interval(1, 0), "n"),
    (lambda: stats.wilson_interval(1.5, 3), "k"),
    (lambda: stats.wilson_interval([], 3), "k"),
    (lambda: stats.wilson_interval(1, 3, confidence=95), "confidence"),
    (lambda: stats.newcombe_difference(1, 3, 4, 3), "k2"),
    (lambda: stats.stratified_bootstrap_ci(np.zeros(5)), "scores"),
    (lambda: stats.stratified_bootstrap_ci(np.zeros((0, 3))), "scores"),
    (lambda: stats.stratified_bootstrap_ci(np.full((2, 2), np.nan)), "scores"),
    (lambda: stats.stratified_bootstrap_ci(np.zeros((2, 2)), "best"), "aggregate"),
    (lambda: stats.stratified_bootstrap_ci(np.zeros((2, 2)), reps=0), "reps"),
    (lambda: stats.iqm([0.5, 0.7]), "scores"),
    (lambda: stats.median(np.zeros((3, 0))), "scores"),
    (lambda: stats.probability_of_improvement(np.zeros((3, 2)), np.zeros((3, 4))), "y"),
    (lambda: stats.pearson([1, 2, 3], [1, 2]), "y"),
    (lambda: stats.spearman([1], [1]), "x"),
    (lambda: stats.mmrv([], []), "sim"),
    (lambda: stats.mmrv([[0.1, 0.2]], [[0.1, 0.2]]), "sim"),
])
def test_bad_input(call, name):
    with pytest.raises(StatsError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith(f"{name}:") and "expected" in msg and "\n" not in msg


# ---------------------------------------------------------------------------- rliable

@pytest.mark.filterwarnings("ignore:random_state is deprecated:FutureWarning")
def test_matches_rliable():
    """Same numbers as rliable 1.2.0 (dev extra): IQM and probability of improvement exactly,
    the stratified-bootstrap intervals within Monte-Carlo error (different random streams)."""
    pytest.importorskip("rliable")
    from rliable import library as rly
    from rliable import metrics

    rng = np.random.default_rng(0)
    x = rng.binomial(20, [0.3, 0.6, 0.8], size=(10, 3)) / 20.0  # [runs, tasks]
    y = rng.binomial(20, [0.2, 0.6, 0.7], size=(8, 3)) / 20.0
    assert stats.iqm(x) == pytest.approx(metrics.aggregate_iqm(x))
    assert stats.optimality_gap(x) == pytest.approx(metrics.aggregate_optimality_gap(x))
    assert stats.probability_of_improvement(x, y) == pytest.approx(metrics.probability_of_improvement(x, y))

    # arch 7 ignores rliable's random_state and draws from numpy's global generator: seed that,
    # or rliable's intervals differ from run to run (lower PoI bound 0.48-0.51 at 1000 reps)
    np.random.seed(0)
    reps = 2000
    _, ci = rly.get_interval_estimates({"x": x}, lambda s: np.array([metrics.aggregate_iqm(s)]),
                                       reps=reps, random_state=np.random.RandomState(0))
    _, low, high = stats.stratified_bootstrap_ci(x, "iqm", reps=reps, seed=0)
    assert (low, high) == pytest.approx((ci["x"][0, 0], ci["x"][1, 0]), abs=0.015)

    reps = 1000  # rliable's probability of improvement runs scipy per task per sample: 2 s here
    _, ci = rly.get_interval_estimates({"xy": (x, y)}, lambda a, b: np.array([metrics.probability_of_improvement(a, b)]),
                                       reps=reps, random_state=np.random.RandomState(0))
    _, low, high = stats.probability_of_improvement_ci(x, y, reps=reps, seed=0)
    assert (low, high) == pytest.approx((ci["xy"][0, 0], ci["xy"][1, 0]), abs=0.03)
