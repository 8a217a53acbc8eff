"""Does the one-version-stale schedule learn as the synchronous one? State PPO through roles,
seed by seed, synchronous against `train.max_staleness K` (and K with the old log-probs
recomputed by the learner, decoupled PPO).

Every run is `embodied train CONFIG train.backend=local train.placement=collocated
train.save_every=0 train.eval_every=0 train.video_episodes=0 train.total_steps=STEPS
train.seed=S` plus, per mode:

    sync        nothing (train.max_staleness 0: every batch on the newest weights)
    stale       train.max_staleness=K ppo.recompute_log_probs=false (the learner on its own thread,
                batches K versions stale after the first K; save_every=0, so no checkpoint drains
                the overlap; the ratio against the stale behaviour policy)
    recompute   train.max_staleness=K ppo.recompute_log_probs=true (the default with K >= 1)

in this process, one after the other (the modes alternate within each seed, so a change of the
machine's load spreads over all of them). A run's final evaluation (train.eval_episodes fixed
seeds, deterministic policy) gives its success and mean return; a run whose result is in --out
is not run again, so an interrupted benchmark continues where it stopped. Printed per mode:
each seed's final success and return, their mean +- 95% t-interval, the wall seconds, and
Welch's t-test (two-sided p) of each stale mode against sync.

Usage: python benchmarks/bench_pipeline_learning.py [--config configs/ppo/ppo_pushcube.yaml]
           [--seeds 5] [--stale 1] [--steps 122880] [--modes sync,stale,recompute]
           [--out runs/bench_pipeline_learning] [--set KEY=VALUE ...] [--report]
--report prints the table of the results in --out without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

MODES = {"sync": [], "stale": ["train.max_staleness={k}", "ppo.recompute_log_probs=false"],
         "recompute": ["train.max_staleness={k}", "ppo.recompute_log_probs=true"]}


def run_one(config: str, mode: str, seed: int, k: int, steps: int, extra: list[str], out: Path) -> dict:
    """One training run -> {"success", "return", "wall_seconds", ...}; cached in out/MODE_sS.json."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from embodied.config import load_config
    from embodied.rl.train import train

    path = out / f"{mode}_s{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    run_dir = out / f"{mode}_s{seed}"
    overrides = ["train.backend=local", "train.placement=collocated", "train.save_every=0", "train.eval_every=0",
                 "train.video_episodes=0", "train.progress=false", f"train.total_steps={steps}", f"train.seed={seed}",
                 f"train.run_dir={run_dir}", *[o.format(k=k) for o in MODES[mode]], *extra]
    cfg = load_config(config, overrides)
    t = time.time()
    summary = train(cfg)
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    last = lambda tag: events.Scalars(tag)[-1].value  # noqa: E731
    staleness = [e.value for e in events.Scalars("time/staleness")]
    result = {"mode": mode, "seed": seed, "success": float(summary["success_after"]),
              "return": float(last("eval/episode_return")), "wall_seconds": time.time() - t,
              "env_steps": int(summary["env_steps"]), "max_staleness": max(staleness),
              "mean_staleness": sum(staleness) / len(staleness), "load_average": os.getloadavg()[0],
              "overrides": overrides}
    path.write_text(json.dumps(result, indent=1))
    return result


def t_interval(x: list[float]) -> tuple[float, float]:
    """-> (mean, half-width of the 95% t-interval)."""
    from scipy import stats

    m = statistics.mean(x)
    if len(x) < 2:
        return m, float("nan")
    return m, float(stats.t.ppf(0.975, len(x) - 1) * statistics.stdev(x) / len(x) ** 0.5)


def welch_p(x: list[float], y: list[float]) -> float:
    from scipy import stats

    if len(x) < 2 or len(y) < 2 or (statistics.pvariance(x) == 0 and statistics.pvariance(y) == 0):
        return float("nan")
    return float(stats.ttest_ind(x, y, equal_var=False).pvalue)


def report(out: Path) -> None:
    results: dict[str, list[dict]] = {}
    for path in sorted(out.glob("*_s*.json")):
        r = json.loads(path.read_text())
        results.setdefault(r["mode"], []).append(r)
    if not results:
        raise SystemExit(f"--out: no results in {out}")
    print(f"{'mode':<10} {'seeds':<10} {'final success':<34} {'mean +- 95% t':<15} {'final return':<44} "
          f"{'mean +- 95% t':<16} {'wall s':>7} {'staleness':>9}")
    for mode in (m for m in MODES if m in results):
        rs = sorted(results[mode], key=lambda r: r["seed"])
        s, ret = [r["success"] for r in rs], [r["return"] for r in rs]
        (sm, sh), (rm, rh) = t_interval(s), t_interval(ret)
        print(f"{mode:<10} {','.join(str(r['seed']) for r in rs):<10} {' '.join(f'{x:.2f}' for x in s):<34} "
              f"{sm:.2f} +- {sh:.2f}   {' '.join(f'{x:.2f}' for x in ret):<44} {rm:.2f} +- {rh:.2f}   "
              f"{statistics.median(r['wall_seconds'] for r in rs):>7.0f} {max(r['max_staleness'] for r in rs):>9.0f}")
    if "sync" in results:
        for mode in (m for m in MODES if m in results and m != "sync"):
            diffs = []
            for key in ("success", "return"):
                x, y = ([r[key] for r in results[m]] for m in (mode, "sync"))
                diffs.append(f"{key} {statistics.mean(x) - statistics.mean(y):+.3f} (Welch p = {welch_p(x, y):.2g})")
            print(f"{mode} - sync: {', '.join(diffs)}")
    loads = [r["load_average"] for rs in results.values() for r in rs]
    print(f"load average at the runs' ends: {min(loads):.1f}-{max(loads):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/ppo/ppo_pushcube.yaml")
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 per mode")
    ap.add_argument("--stale", type=int, default=1, metavar="K", help="train.max_staleness of the stale modes")
    ap.add_argument("--steps", type=int, default=122880, help="train.total_steps of every run")
    ap.add_argument("--modes", default="sync,stale,recompute", help=f"a comma list of {', '.join(MODES)}")
    ap.add_argument("--out", default="runs/bench_pipeline_learning")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--report", action="store_true", help="print the table of --out's results only")
    args = ap.parse_args()
    out = Path(args.out)
    modes = args.modes.split(",")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"--modes: unknown mode {bad[0]!r}; allowed: {', '.join(MODES)}")
    if args.stale < 1:
        raise SystemExit(f"--stale: {args.stale}; allowed: an integer >= 1")
    if not args.report:
        out.mkdir(parents=True, exist_ok=True)
        for seed in range(args.seeds):
            for mode in modes:
                r = run_one(args.config, mode, seed, args.stale, args.steps, args.set, out)
                print(f"{mode:<10} seed {seed}: success {r['success']:.2f}, return {r['return']:.2f}, "
                      f"{r['wall_seconds']:.0f} s, load {r['load_average']:.1f}", flush=True)
    report(out)


if __name__ == "__main__":
    main()
