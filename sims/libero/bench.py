"""Cost of LIBERO behind our VecEnv: worker start, soft reset, step and chunk, state-only and
rendered (docs/libero.md). Run: python -m sims.libero.bench [--task libero:libero_spatial/0]

Prints one JSON line per setting: wall ms per env step (per call divided by B and K), the
machine's load average while it ran (other processes slow it down on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from sims.registry import make_env


def _time(fn, repeats: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def run(task: str, num_envs: int, obs_mode: str, size: int, chunk: int, repeats: int) -> dict:
    t0 = time.perf_counter()
    env = make_env(task, num_envs, obs_mode=obs_mode, image_size=(size, size), seed=0)
    start_s = time.perf_counter() - t0
    try:
        g = torch.Generator().manual_seed(0)
        reset_s = _time(lambda: env.reset(seed=list(range(num_envs))), 3)
        step_s = _time(lambda: env.step(torch.rand(num_envs, 7, generator=g) * 0.2 - 0.1), repeats)
        chunk_s = _time(lambda: env.chunk_step(torch.rand(num_envs, chunk, 7, generator=g) * 0.2 - 0.1),
                        max(repeats // chunk, 2))
    finally:
        env.close()
    return {"task": task, "num_envs": num_envs, "obs_mode": obs_mode, "image": size if obs_mode == "rgb" else None,
            "start_s": round(start_s, 2), "reset_s": round(reset_s, 3),
            "step_ms_per_env_step": round(step_s * 1000 / num_envs, 1),
            f"chunk{chunk}_ms_per_env_step": round(chunk_s * 1000 / (num_envs * chunk), 1),
            "load_avg_1min": round(os.getloadavg()[0], 2)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--task", default="libero:libero_spatial/0")
    p.add_argument("--chunk", type=int, default=8)
    p.add_argument("--repeats", type=int, default=16)
    args = p.parse_args()
    for num_envs, obs_mode in ((1, "state"), (2, "state"), (1, "rgb"), (2, "rgb")):
        print(json.dumps(run(args.task, num_envs, obs_mode, 128, args.chunk, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
