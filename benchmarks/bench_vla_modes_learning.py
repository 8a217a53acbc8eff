"""What the VLA training modes cost in learning: the same RL lift recipe with every weight
trained, with the VLM frozen and with LoRA on the VLM, over the same seeds (issue 56, item 5).

    nice -n 10 .venv/bin/python benchmarks/bench_vla_modes_learning.py [--config lift_reach_flow_noise]
        [--modes full,frozen,lora8] [--seeds 0,1,2] [--out runs/vla_modes_learning]
    .venv/bin/python benchmarks/bench_vla_modes_learning.py --report runs/vla_modes_learning[,runs/other,...]

Each seed's demos and SFT checkpoint are built once (tests/rl_lift.py, as the suite's learning
checks build them) and every mode's RL starts from that checkpoint, so the modes differ only in
what RL trains:
  full     every weight (the recipe as it is)
  frozen   policy.freeze=vlm: the prefix (vision tower, projector, LM) frozen; the action
           expert, its noise head and the critic train
  lora<r>  policy.lora_rank=r: rank-r adapters on the prefix's attention projections, the rest
           of the prefix frozen, the expert trained
A lift is the mean of the last two evaluations (64 held-out seeds, deterministic policy) minus
the SFT policy's success. The report gives each mode's mean lift over seeds with its 95%
percentile bootstrap interval (embodied/eval/stats.py, the seed is the unit) and each mode's
gap to full training: the mean over seeds of (mode lift - full lift), the pairs sharing a seed's
SFT start, with its bootstrap interval (with 2-3 seeds a coarse one: it cannot reach past the
seeds' own extremes). Per seed, the gap is also the difference of two late success rates over the
same 128 evaluation episodes (2 x 64; the SFT start is shared), given with Newcombe's interval
for a difference of two rates: the evaluation's noise, not the seed's.

Runs go seed by seed (all modes of a seed, then the next), so a run cut short still compares the
modes on the seeds it finished. Writes <out>/modes.json after every run. Seeds may run in separate
processes with separate --out folders (--seeds 1 --out runs/a_s1); --report merges the folders.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
EVAL_EPISODES = 64  # per evaluation in configs/lift/lift_*.yaml (rl.train.eval_episodes); a lift's late = 2 of them
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def mode_overrides(mode: str) -> list[str]:
    """The pipeline overrides of a mode name (module doc)."""
    if mode == "full":
        return []
    if mode == "frozen":
        return ["rl.policy.freeze=vlm"]
    if mode.startswith("lora") and mode[4:].isdigit() and int(mode[4:]) > 0:
        return [f"rl.policy.lora_rank={int(mode[4:])}"]
    sys.exit(f"--modes: {mode!r} is not allowed; use full, frozen or lora<rank> (e.g. lora8)")


def shared_builds(root: Path):
    """build_once(name, build) -> Path: a directory made once by build(path) (tests/conftest.py's
    fixture without the lock: one process here)."""
    def get(name: str, build) -> Path:
        path = root / name
        if not (path / ".complete").exists():
            build(path)
            (path / ".complete").touch()
        return path
    return get


def report(data: dict) -> str:
    """The table of lifts and gaps (markdown) from modes.json's content."""
    from embodied.eval.stats import newcombe_difference, stratified_bootstrap_ci

    runs = data["runs"]  # mode -> seed -> {before, late, lift, minutes}
    lines = ["| mode | seeds | SFT success | last two evaluations | lift, mean [95% CI] | gap to full [95% CI] "
             "| minutes / run |", "| --- | --- | --- | --- | --- | --- | --- |"]
    full = runs.get("full", {})
    for mode, per in runs.items():
        seeds = sorted(per, key=int)
        lifts = np.array([[per[s]["lift"]] for s in seeds])
        point, lo, hi = stratified_bootstrap_ci(lifts, "mean") if len(seeds) > 1 else (lifts.mean(), np.nan, np.nan)
        gap = "-"
        both = [s for s in seeds if s in full]
        if mode != "full" and both:
            diff = np.array([[per[s]["lift"] - full[s]["lift"]] for s in both])
            g, glo, ghi = stratified_bootstrap_ci(diff, "mean") if len(both) > 1 else (diff.mean(), np.nan, np.nan)
            gap = f"{g:+.3f} [{glo:+.3f}, {ghi:+.3f}] ({len(both)} seeds)"
        before = ", ".join(f"{per[s]['before']:.2f}" for s in seeds)
        late = ", ".join(f"{per[s]['late']:.2f}" for s in seeds)
        minutes = statistics.mean(per[s]["minutes"] for s in seeds)
        lines.append(f"| {mode} | {','.join(seeds)} | {before} | {late} | {point:+.3f} [{lo:+.3f}, {hi:+.3f}] "
                     f"| {gap} | {minutes:.1f} |")
    per_seed = []
    for mode, per in runs.items():
        if mode == "full":
            continue
        cells = []
        for sd in sorted(set(per) & set(full), key=int):
            n = 2 * EVAL_EPISODES
            d, lo, hi = newcombe_difference(round(per[sd]["late"] * n), n, round(full[sd]["late"] * n), n)
            cells.append(f"seed {sd}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
        if cells:
            per_seed.append(f"- {mode} - full, late success per seed (Newcombe 95%): " + "; ".join(cells))
    return "\n".join(lines + ([""] + per_seed if per_seed else []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="lift_reach_flow_noise", help="a configs/lift/lift_*.yaml name (a flow VLA)")
    ap.add_argument("--modes", default="full,frozen,lora8")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--set", nargs="*", default=[], help="more pipeline overrides for every mode")
    ap.add_argument("--out", default="runs/vla_modes_learning")
    ap.add_argument("--report", default="", help="print the table of <dir>/modes.json (comma-separated: merged)")
    args = ap.parse_args()
    if args.report:
        merged: dict = {"runs": {}}
        for d in args.report.split(","):
            for mode, per in json.loads((Path(d) / "modes.json").read_text())["runs"].items():
                merged["runs"].setdefault(mode, {}).update(per)
        print(report(merged))
        return
    if not (ROOT / "configs" / "lift" / f"{args.config}.yaml").is_file():
        sys.exit(f"--config: no configs/lift/{args.config}.yaml")
    modes = args.modes.split(",")
    overrides = {m: mode_overrides(m) for m in modes}
    seeds = [int(s) for s in args.seeds.split(",")]
    from rl_lift import lift

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    file = out / "modes.json"
    data = json.loads(file.read_text()) if file.is_file() else {}
    data.update({"config": args.config, "set": args.set, "runs": data.get("runs", {})})
    build_once = shared_builds(out / "sft")
    for seed in seeds:
        for mode in modes:
            if str(seed) in data["runs"].get(mode, {}):
                continue  # done by an earlier call with the same --out
            t0 = time.time()
            r = lift(args.config, seed, out / f"{mode}_s{seed}", build_once, overrides=[*args.set, *overrides[mode]])
            data["runs"].setdefault(mode, {})[str(seed)] = {**r, "minutes": round((time.time() - t0) / 60, 2)}
            data["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            file.write_text(json.dumps(data, indent=1))
            print(f"{mode} seed {seed}: lift {r['lift']:+.3f} in {(time.time() - t0) / 60:.1f} min", flush=True)
    print(report(data))


if __name__ == "__main__":
    main()
