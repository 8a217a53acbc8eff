"""MetaWorld MT10 env steps/s through the side-venv base, before and after a change, in one run:
state only and 64 px pixels (corner2), step() (K = 1) and chunk_step (K = 8), B = 10 envs in
W = 2 worker processes. Each tree (this checkout, and --before DIR, e.g. a `git worktree` of an
older commit) is measured in its own child process, the trees alternating `--rounds` times so
that a shared machine's load falls on both alike; the table gives the median per setting.

  python benchmarks/bench_sidevenv.py --before /path/to/old/checkout [--rounds 3] [--seconds 4]

Prints a markdown table (and one JSON line per measurement with --json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = [("state", 1), ("state", 8), ("rgb", 1), ("rgb", 8)]


def measure(seconds: float) -> list[dict]:
    """In a child: env steps/s of each setting with the `sims` on sys.path[0]."""
    import torch

    from sims.registry import make_env

    torch.set_num_threads(1)
    out = []
    for obs_mode in ("state", "rgb"):
        env = make_env("metaworld:MT10", 10, obs_mode=obs_mode, image_size=(64, 64), seed=0, num_workers=2)
        try:
            g = torch.Generator().manual_seed(0)
            env.reset(seed=list(range(10)))
            for k in (1, 8):
                def call() -> None:
                    a = torch.rand(10, k, 4, generator=g) * 2 - 1
                    env.step(a[:, 0]) if k == 1 else env.chunk_step(a)

                for _ in range(3):
                    call()  # warm-up
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    call()
                    n += 1
                out.append({"obs_mode": obs_mode, "chunk": k,
                            "env_steps_per_s": 10 * k * n / (time.perf_counter() - t0)})
        finally:
            env.close()
    return out


def run_tree(tree: Path, seconds: float) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    env.setdefault("METAWORLD_PYTHON", str(ROOT / ".venv-metaworld" / "bin" / "python"))
    code = (f"import sys, json; sys.path.insert(0, {str(tree)!r}); sys.path.insert(1, {str(ROOT / 'benchmarks')!r}); "
            f"import bench_sidevenv as b; print('RESULT' + json.dumps(b.measure({seconds})))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(tree),
                         timeout=900)
    line = [x for x in res.stdout.splitlines() if x.startswith("RESULT")]
    if res.returncode or not line:
        raise SystemExit(f"bench_sidevenv: {tree}: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(line[-1][6:])


def commit_of(tree: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=str(tree)).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the checkout to compare against (a git worktree)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    trees = {"before": Path(a.before).resolve(), "after": ROOT}
    runs: dict[str, list[list[dict]]] = {k: [] for k in trees}
    loads = []
    for _ in range(a.rounds):
        for label, tree in trees.items():
            runs[label].append(run_tree(tree, a.seconds))
            loads.append(os.getloadavg()[0])
            if a.json:
                print(json.dumps({"tree": label, "results": runs[label][-1]}), flush=True)
    med = {label: {(r["obs_mode"], r["chunk"]): statistics.median(
        run[i]["env_steps_per_s"] for run in rs) for i, r in enumerate(rs[0])} for label, rs in runs.items()}
    print(f"MetaWorld MT10, B = 10 envs, W = 2 workers, random actions; median of {a.rounds} alternating rounds "
          f"of {a.seconds:.0f} s each")
    print(f"before: {commit_of(trees['before'])}, after: {commit_of(ROOT)} (+ working tree); "
          f"{datetime.date.today()}; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"1-min load {min(loads):.1f}-{max(loads):.1f}\n")
    print("| observation | K | before (env steps/s) | after (env steps/s) | after / before |")
    print("| --- | --- | --- | --- | --- |")
    for s in SETTINGS:
        b, af = med["before"][s], med["after"][s]
        print(f"| {'64 px corner2' if s[0] == 'rgb' else 'state'} | {s[1]} | {b:.0f} | {af:.0f} | {af / b:.2f} |")


if __name__ == "__main__":
    main()
