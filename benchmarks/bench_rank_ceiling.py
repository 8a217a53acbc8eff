"""The simulator ranking itself: the ceiling of a world model's ranking agreement (issue 22).

Plays every checkpoint of a `bench_world_model.py rank` result again in the simulator, on as
many other starts (evaluation seeds 2_000_000 + i instead of 1_000_000 + i), and reports the
Spearman correlation of the two simulator success rates per run and over all checkpoints. A
model's ranking can only be judged against what the simulator's own ranking repeats.

  python benchmarks/bench_rank_ceiling.py rank.json --out ceiling.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from wm_episodes import load_policy, success_in_sim
from scipy.stats import spearmanr

OTHER_SEED_BASE = 2_000_000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rank_json", help="the output of bench_world_model.py rank")
    p.add_argument("--runs-root", default=".", help="the folder holding the run folders the checkpoints name")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    rank = json.loads(Path(args.rank_json).read_text())
    root = Path(args.runs_root)
    seeds = list(range(OTHER_SEED_BASE, OTHER_SEED_BASE + rank["seeds"]))
    rows = []
    for r in rank["rows"]:
        run, it = r["checkpoint"].split("/")
        s = success_in_sim(load_policy(root / run / "checkpoints" / it), rank["task"], seeds)
        rows.append({"checkpoint": r["checkpoint"], "sim": r["sim"], "sim_other_starts": float(s.mean())})
        print(json.dumps(rows[-1]), flush=True)
    agreement = {}
    for run in sorted({r["checkpoint"].split("/")[0] for r in rows}) + ["all"]:
        sel = [r for r in rows if run == "all" or r["checkpoint"].startswith(run + "/")]
        a, b = np.array([r["sim"] for r in sel]), np.array([r["sim_other_starts"] for r in sel])
        agreement[run] = {"checkpoints": len(sel), "spearman": float(spearmanr(a, b)[0])}
        print(run, json.dumps(agreement[run]))
    Path(args.out).write_text(json.dumps({"rank_json": args.rank_json, "seeds": rank["seeds"],
                                          "other_seed_base": OTHER_SEED_BASE, "rows": rows,
                                          "agreement": agreement}, indent=1))


if __name__ == "__main__":
    main()
