"""Success of the scripted libero_spatial expert per task (docs/libero.md).

Run: python -m sims.libero.eval_expert [--inits 3]
All ten tasks run in one batch (libero:libero_spatial, env i = task i); round k starts every
env from official init state k, and runs the expert until success or the 220-step limit.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from sims.libero.expert import PickPlace
from sims.registry import make_env


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--inits", type=int, default=3)
    args = p.parse_args()
    env = make_env("libero:libero_spatial", 10, seed=0)
    expert = PickPlace()
    wins = np.zeros((10, args.inits), bool)
    steps = np.zeros((10, args.inits), int)
    try:
        for k in range(args.inits):
            obs, _ = env.reset(seed=[k] * 10)
            expert.reset(np.arange(10), obs["privileged"].numpy())
            done = np.zeros(10, bool)
            while not done.all():
                r = env.step(torch.from_numpy(expert(obs["privileged"].numpy())))
                obs = r.obs
                new = r.done.numpy() & ~done
                wins[new, k] = r.terminated.numpy()[new]
                steps[~done, k] += 1
                done |= new
            print(f"init {k}: success {wins[:, k].astype(int).tolist()} steps {steps[:, k].tolist()}", flush=True)
    finally:
        env.close()
    print(json.dumps({"per_task": wins.sum(1).tolist(), "episodes_per_task": args.inits,
                      "success": int(wins.sum()), "episodes": int(wins.size)}))


if __name__ == "__main__":
    main()
