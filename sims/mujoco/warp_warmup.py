"""Compile MuJoCo Warp's kernels for every MuJoCo task into the venv's kernel cache, once.

    python -m sims.mujoco.warp_warmup [--device cpu]

`make setup` runs it, so that the first warp env of a test run or a training run loads compiled
kernels (seconds) instead of compiling them (about 80 s on one CPU core). The kernels are
specialised by the scene (which geoms collide), so each task's scene is stepped once, and the ray
tracer at the sizes the suite renders.
"""

from __future__ import annotations

import argparse
import time

import torch

from sims.registry import list_tasks, make_env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    t0 = time.perf_counter()
    for task in list_tasks():
        for kw in ({"obs_mode": "state"}, {"obs_mode": "rgb", "cameras": ("front", "wrist"), "image_size": 64}):
            env = make_env(task, 2, backend="warp", device=args.device, **kw)
            env.step(torch.zeros(2, env.spec.action_dim))
            env.render([0])
            env.close()
    print(f"warp kernels for {len(list_tasks())} tasks ready in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
