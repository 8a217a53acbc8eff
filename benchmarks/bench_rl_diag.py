"""Per-task tables of an RL run's diagnostics over training, from its TensorBoard scalars
(embodied/rl/diagnostics.py writes them in every run; docs/rl.md, "What every update logs").

    python benchmarks/bench_rl_diag.py RUN_DIR [RUN_DIR ...] [--windows 3]

For each run: the iterations are split into --windows equal spans of env steps; for every task,
the mean of each quantity over each span (train/<name>/<task>), then the per-task success of
every evaluation in the latest checkpoint's summary (the start first), and the time split
(collection against update seconds). Prints markdown.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

QUANTITIES = ("groups_any_success", "groups_mixed", "adv_std", "adv_zero_frac", "clip_fraction",
              "ratio_abs_dev", "kl_ref_rollout")


def scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    ea = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0}).Reload()
    return {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}


def span_means(series: list[tuple[int, float]], edges: list[float]) -> list[float]:
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        vals = [v for s, v in series if lo < s <= hi and not math.isnan(v)]
        out.append(sum(vals) / len(vals) if vals else float("nan"))
    return out


def per_task_evals(run: Path) -> list[tuple[int, dict[str, float]]]:
    """[(env steps, {task: success})] from the run's latest checkpoint (the start included), or []."""
    try:
        from embodied.run.checkpoint import load_checkpoint, resolve_checkpoint

        _, meta, _ = load_checkpoint(resolve_checkpoint(run))
    except Exception:  # no checkpoint yet
        return []
    return [(int(s), dict(p)) for s, p in meta.get("summary", {}).get("eval_per_task", [])]


def report(run: Path, windows: int) -> str:
    sc = scalars(run)
    evals = per_task_evals(run)
    steps = [s for s, _ in sc.get("train/lr", sc.get("rollout/success_rate", []))]
    if not steps:
        return f"{run}: no training scalars"
    edges = [steps[0] - 1] + [steps[0] + (steps[-1] - steps[0]) * (k + 1) / windows for k in range(windows)]
    tasks = sorted({t.split("/", 2)[2] for t in sc if t.startswith("train/groups_any_success/")})
    lines = [f"### {run.name}: {len(steps)} updates, env steps {steps[0]:,}-{steps[-1]:,}, "
             f"{windows} spans", ""]
    head = "| task | " + " | ".join(q.replace("_", " ") for q in QUANTITIES) + " | evaluations (start first) |"
    lines += [head, "|" + " --- |" * (len(QUANTITIES) + 2)]
    for task in tasks + ["(all)"]:
        cells = []
        for q in QUANTITIES:
            key = f"train/{q}" + ("" if task == "(all)" else f"/{task}")
            vals = span_means(sc.get(key, []), edges)
            cells.append(", ".join("-" if math.isnan(v) else f"{v:.2g}" for v in vals))
        if evals:
            at = lambda p: sum(p.values()) / len(p) if task == "(all)" else p.get(task, float("nan"))  # noqa: E731
            cells.append(" -> ".join(f"{at(p):.2f}" for _, p in evals))
        else:
            cells.append("-")
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    coll = sum(v for _, v in sc.get("time/collect_seconds", []))
    upd = sum(v for _, v in sc.get("time/update_seconds", []))
    noise = sc.get("train/noise_std") or sc.get("train/entropy", [])
    lines += ["", f"time: collection {coll / 60:.1f} min, update {upd / 60:.1f} min"
              f" ({upd / max(coll + upd, 1e-9):.0%} of the loop)"]
    if noise:
        name = "noise_std" if sc.get("train/noise_std") else "entropy"
        lines.append(f"exploration ({name}) per span: " + ", ".join(f"{v:.3g}" for v in span_means(noise, edges)))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--windows", type=int, default=3)
    args = ap.parse_args()
    for run in args.runs:
        print(report(Path(run), args.windows) + "\n")


if __name__ == "__main__":
    main()
