"""The budget ladder of multi-task RL on MetaWorld MT10 from state: SFT -> RL at several env-step
budgets and seeds, with per-task curves.

For every seed s: expert demos of metaworld:MT10@goal (DART noise, seeded by s; the privileged
observation holds the task's one-hot), behaviour cloning of the MLP policy on them (the SFT
start, `python -m embodied.imitation.bc`, its observation normaliser fixed at the demos'), then one RL run per budget from that start
(`--config`, train.total_steps = budget, train.seed = s; the demos are its ppo.bc_dataset).
Demos and SFT are reused when already in --out; a finished RL run (its summary.json) too.

    python benchmarks/bench_rl_ladder.py --budgets 100000,300000,1000000,3000000 --seeds 0,1,2
    python benchmarks/bench_rl_ladder.py --budgets 100000 --seeds 0 --config configs/rl/rl_mt10_state_grpo_mlp.yaml

Writes <out>/results.json (per run: SFT success, the evaluation curve, per task at the start and
at the end, minutes) and prints a table: SFT and RL success per budget, mean +- the 95%
t-interval over seeds, and the lift. Long: 3M env steps from state are hours on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
TASK = "metaworld:MT10@goal"


def mean_ci(xs: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval; nan for one value)."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("nan")
    return m, T_975.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))


def subset_per_task(src: Path, out: Path, per_task: int, seed: int) -> Path:
    """A dataset of `per_task` episodes of every task of src (drawn with `seed`, state columns only):
    a weaker SFT start than all the demos, and the same few demos for the RL run's BC term."""
    import random

    from embodied.data.dataset import EpisodeWriter
    from embodied.data.layout import read_info
    from embodied.data.read import read_episodes

    if (out / "meta" / "info.json").is_file():
        return out
    info = read_info(src)
    by_task: dict[int, list[int]] = {}
    for i, ep in enumerate(read_episodes(src, cameras=[])):
        by_task.setdefault(int(ep["obs.privileged"][0, -10:].argmax()), []).append(i)  # MT10's one-hot
    short = {t: len(v) for t, v in by_task.items() if len(v) < per_task}
    if short or len(by_task) < 10:
        raise SystemExit(f"--per-task {per_task}: {src} holds too few episodes of some task ({short or len(by_task)})")
    rng = random.Random(seed)
    keep = sorted(i for v in by_task.values() for i in rng.sample(v, per_task))
    writer = EpisodeWriter(out, info["embodied"]["task"], info["embodied"]["spec"])
    for ep in read_episodes(src, keep, cameras=[]):
        writer.add({k: ep[k] for k in ("obs.state", "obs.privileged", "action", "reward", "success") if k in ep},
                   ep["instruction"], ep.get("seed"))
    return out


def sft_start(seed: int, out: Path, demos: int, noise: float, bc_steps: int,
              source: Path | None = None, per_task: int = 0) -> tuple[Path, Path]:
    """(demos dataset, BC policy directory) of one seed, made once. With source and per_task,
    the demos are per_task episodes of each task drawn from source (seeded by seed)."""
    from embodied.data.collect import collect_demos

    if source is not None and per_task:
        data = subset_per_task(source, out / f"demos_k{per_task}_s{seed}", per_task, seed)
        bc = out / f"bc_k{per_task}_s{seed}"
    else:
        data, bc = out / f"demos_s{seed}", out / f"bc_s{seed}"
        if not (data / "meta" / "info.json").is_file():
            collect_demos(TASK, demos, data, seed=100_000 * (seed + 1), obs_mode="state", noise=noise)
    if not (bc / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "embodied.imitation.bc", str(data), "--out", str(bc),
                        "--steps", str(bc_steps), "--seed", str(seed), "--norm-count", "1e12"],  # a fixed normaliser
                       check=True, cwd=ROOT)
    return data, bc


def rl_run(config: str, budget: int, seed: int, data: Path, bc: Path, out: Path, overrides: list[str]) -> dict:
    """One RL run (reused if its summary exists): SFT and final success, the curves, minutes."""
    run = out / f"rl_{budget}_s{seed}"
    done = run / "summary.json"
    if done.is_file():
        return json.loads(done.read_text())
    cmd = [sys.executable, "-m", "embodied.cli", "train", config, f"policy.init_from={bc}",
           f"ppo.bc_dataset={data}", f"train.total_steps={budget}", f"train.seed={seed}",
           f"train.run_dir={run}", "train.progress=false", *overrides]
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT)
    from embodied.run.checkpoint import load_checkpoint, resolve_checkpoint

    _, meta, _ = load_checkpoint(resolve_checkpoint(run))
    s = meta["summary"]
    res = {"budget": budget, "seed": seed, "sft": s["success_before"], "rl": s.get("success_after"),
           "curve": s.get("eval_curve", []), "per_task": s.get("eval_per_task", []),
           "minutes": (time.time() - t0) / 60, "command": " ".join(cmd[2:])}
    done.write_text(json.dumps(res, indent=1))
    return res


def table(results: list[dict]) -> str:
    rows = ["| budget (env steps) | seeds | SFT | after RL | lift |", "| --- | --- | --- | --- | --- |"]
    for budget in sorted({r["budget"] for r in results}):
        rs = [r for r in results if r["budget"] == budget and r["rl"] is not None]
        if not rs:
            continue
        cells = [mean_ci([r[k] for r in rs]) for k in ("sft", "rl")] + [mean_ci([r["rl"] - r["sft"] for r in rs])]
        rows.append(f"| {budget:,} | {len(rs)} | " + " | ".join(f"{m:.2f} +- {h:.2f}" for m, h in cells) + " |")
    return "\n".join(rows)


def curves_from_logs(logs: list[str]) -> list[dict]:
    """Each `embodied train` console log's evaluations: {"log", "curve": [(env steps, success)],
    "per_task": [(env steps, {task: success})]} (the start is env step 0: "success before training")."""
    import re

    runs = []
    for path in logs:
        text = Path(path).read_text()
        curve, per_task = [], []
        m = re.search(r"success before training ([0-9.]+)", text)
        if m:
            curve.append((0, float(m.group(1))))
        for m in re.finditer(r"iter \d+ step (\d+): eval success ([0-9.]+)\n  per task: (.*)", text):
            steps = int(m.group(1))
            curve.append((steps, float(m.group(2))))
            per_task.append((steps, {t: float(v) for t, v in (kv.rsplit(" ", 1) for kv in m.group(3).split(", "))}))
        runs.append({"log": path, "curve": curve, "per_task": per_task})
    return runs


def log_table(runs: list[dict], png: str | None) -> str:
    """A markdown table of every run's evaluations over env steps (and a PNG of the curves)."""
    steps = sorted({s for r in runs for s, _ in r["curve"]})
    rows = ["| env steps | " + " | ".join(Path(r["log"]).stem for r in runs) + " |",
            "| --- |" + " --- |" * len(runs)]
    for st in steps:
        cells = [next((f"{v:.2f}" for s, v in r["curve"] if s == st), "") for r in runs]
        rows.append(f"| {st:,} | " + " | ".join(cells) + " |")
    if png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for r in runs:
            xs, ys = zip(*r["curve"]) if r["curve"] else ((), ())
            ax.plot(xs, ys, marker="o", label=Path(r["log"]).stem)
        ax.set_xlabel("env steps")
        ax.set_ylabel("success (50 episodes, 5 per task)")
        ax.set_ylim(0, 1)
        ax.legend()
        fig.tight_layout()
        fig.savefig(png, dpi=100)
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budgets", default="100000,300000,1000000,3000000")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--config", default="configs/rl/rl_mt10_state_grpo_mlp_dynamic.yaml")
    ap.add_argument("--demos", type=int, default=500)
    ap.add_argument("--noise", type=float, default=0.3, help="DART noise of the demos")
    ap.add_argument("--bc-steps", type=int, default=3000)
    ap.add_argument("--from-dataset", default=None, help="draw the demos from this MT10 dataset instead of collecting")
    ap.add_argument("--per-task", type=int, default=0, help="with --from-dataset: episodes of each task (a weaker start)")
    ap.add_argument("--set", nargs="*", default=[], help="overrides for every RL run, e.g. env.num_envs=80")
    ap.add_argument("--out", default="runs/bench_rl_ladder")
    ap.add_argument("--logs", nargs="*", default=None,
                    help="only tabulate these `embodied train` console logs' evaluations (stopped runs too)")
    ap.add_argument("--png", default=None, help="with --logs: write the curves here")
    args = ap.parse_args()
    if args.logs is not None:
        print(log_table(curves_from_logs(args.logs), args.png))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in map(int, args.seeds.split(",")):
        data, bc = sft_start(seed, out, args.demos, args.noise, args.bc_steps,
                             Path(args.from_dataset) if args.from_dataset else None, args.per_task)
        for budget in map(int, args.budgets.split(",")):
            r = rl_run(args.config, budget, seed, data, bc, out, args.set)
            results.append(r)
            print(f"seed {seed} budget {budget}: {r['sft']:.2f} -> {r['rl']:.2f} ({r['minutes']:.1f} min)", flush=True)
            (out / "results.json").write_text(json.dumps({"config": args.config, "runs": results}, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()
