"""The suite's small RL learning checks over several seeds: where their thresholds come from.

Runs configs/lift/<name>.yaml exactly as tests/rl/test_rl_lift_*.py does (tests/rl_lift.py: demos,
SFT and RL all seeded by the seed), for each seed, and prints the lifts with their worst,
mean and best. A test's threshold sits below the worst of at least 5 seeds.

    python benchmarks/bench_learning_tests.py lift_reach_flow_noise --seeds 0,1,2,3,4
    python benchmarks/bench_learning_tests.py --merge runs/lift_a,runs/lift_b --out runs/lift
    python benchmarks/bench_learning_tests.py reach_color --seeds 0,1,2,3,4 --set demos=500 steps=2000

reach_color is tests/imitation/test_vla_learning.py's SFT from pixels (its --set takes demos= and steps=);
it prints the test's scores per seed and their worst.

lift_multi_grpo_state is tests/rl/test_rl_lift_multitask_state.py's state MLP on two tasks (demos,
behaviour cloning and GRPO; its --set takes the config's collect./bc./rl. keys); it prints each
task's lift per seed too.

Writes <out>/<name>.json (one entry per seed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from rl_lift import lift  # noqa: E402


def report(name: str, runs: dict[str, dict]) -> None:
    lifts = [r["lift"] for r in runs.values()]
    print(f"{name}: {len(lifts)} seeds, lift worst {min(lifts):+.2f}, mean {statistics.mean(lifts):+.2f}, "
          f"best {max(lifts):+.2f}; per seed " + ", ".join(f"{s}: {r['before']:.2f} -> {r['late']:.2f}"
                                                         for s, r in sorted(runs.items(), key=lambda x: int(x[0]))))


def reach_color(seeds: str, overrides: list[str], out: Path) -> None:
    """tests/imitation/test_vla_learning.py's SFT and scores, once per seed; overrides: demos=N, steps=N."""
    from test_vla_learning import instruction_scores, sft_reach_color
    kw = {}
    for o in overrides:
        key, _, value = o.partition("=")
        if key not in ("demos", "steps") or not value.isdigit():
            sys.exit(f"--set: reach_color takes demos=N and steps=N, got {o!r}")
        kw[key] = int(value)
    runs = {}
    for seed in map(int, seeds.split(",")):
        t0 = time.time()
        policy = sft_reach_color(out / f"reach_color_s{seed}", seed=seed, **kw)
        runs[str(seed)] = {**instruction_scores(policy), "minutes": round((time.time() - t0) / 60, 2)}
        print(f"seed {seed}: {runs[str(seed)]}", flush=True)
        (out / "reach_color.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "set": overrides,
                                                          "runs": runs}, indent=1))
    worst = {k: (max if k in ("reached_other", "swapped_wrong") else min)(r[k] for r in runs.values())
             for k in next(iter(runs.values())) if k != "minutes"}
    print(f"reach_color {kw or 'the test recipe'}: {len(runs)} seeds, worst {worst}")


def multi_state(seeds: str, overrides: list[str], out: Path) -> None:
    """tests/rl/test_rl_lift_multitask_state.py's run once per seed; the lift over both tasks and per task."""
    sys.path.insert(0, str(ROOT / "tests" / "rl"))
    from test_rl_lift_multitask_state import state_lift
    name, runs = "lift_multi_grpo_state", {}
    for seed in map(int, seeds.split(",")):
        t0 = time.time()
        r = state_lift(seed, out / f"{name}_s{seed}", overrides)
        runs[str(seed)] = {**r, "late": r["after"], "minutes": round((time.time() - t0) / 60, 2)}  # late: report()'s
        (out / f"{name}.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "set": overrides,
                                                      "runs": runs}, indent=1))
    report(name, runs)
    for task in runs[next(iter(runs))]["per_task"]:
        lifts = [r["per_task"][task]["lift"] for r in runs.values()]
        print(f"  {task}: lift worst {min(lifts):+.2f}, mean {statistics.mean(lifts):+.2f}; per seed "
              + ", ".join(f"{s}: {r['per_task'][task]['before']:.2f} -> {r['per_task'][task]['after']:.2f}"
                          for s, r in runs.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?", help="a configs/lift/lift_*.yaml name, e.g. lift_reach_flow_noise")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--set", nargs="*", default=[], help="pipeline overrides, e.g. rl.train.total_steps=30000")
    ap.add_argument("--out", default="runs/lift")
    ap.add_argument("--merge", default="", help="comma-separated --out folders: combine their <name>.json")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        merged: dict[str, dict] = {}
        for d in args.merge.split(","):
            for f in Path(d).glob("lift_*.json"):
                merged.setdefault(f.stem, {}).update(json.loads(f.read_text())["runs"])
        for name, runs in merged.items():
            (out / f"{name}.json").write_text(json.dumps({"runs": runs}, indent=1))
            report(name, runs)
        return
    if args.name == "reach_color":
        reach_color(args.seeds, args.set, out)
        return
    if args.name == "lift_multi_grpo_state":
        torch.set_num_threads(1)
        multi_state(args.seeds, args.set, out)
        return
    if not args.name or not (ROOT / "configs" / "lift" / f"{args.name}.yaml").is_file():
        sys.exit(f"name: give a configs/lift/lift_*.yaml name, got {args.name!r}")
    torch.set_num_threads(1)
    runs = {}
    for seed in map(int, args.seeds.split(",")):
        t0 = time.time()
        runs[str(seed)] = {**lift(args.name, seed, out / f"{args.name}_s{seed}", overrides=args.set),
                           "minutes": round((time.time() - t0) / 60, 2)}
        (out / f"{args.name}.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "set": args.set,
                                                           "runs": runs}, indent=1))
    report(args.name, runs)


if __name__ == "__main__":
    main()
