"""Cost of MetaWorld behind our VecEnv: worker start, reset, step and chunk, state-only and
rendered at 64 px (docs/metaworld.md). Run: python -m sims.metaworld.bench

Prints one JSON line per setting: env steps per second (B envs per call, K steps per chunk) and
the machine's 1-minute load average while it ran (other processes slow it down on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from sims.registry import make_env


def _time(fn, repeats: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def run(task: str, num_envs: int, obs_mode: str, size: int, chunk: int, repeats: int, workers: int | None) -> dict:
    t0 = time.perf_counter()
    env = make_env(task, num_envs, obs_mode=obs_mode, image_size=(size, size), seed=0, num_workers=workers)
    start_s = time.perf_counter() - t0
    try:
        g = torch.Generator().manual_seed(0)
        reset_s = _time(lambda: env.reset(seed=list(range(num_envs))), 2)
        step_s = _time(lambda: env.step(torch.rand(num_envs, 4, generator=g) * 2 - 1), repeats)
        chunk_s = _time(lambda: env.chunk_step(torch.rand(num_envs, chunk, 4, generator=g) * 2 - 1),
                        max(repeats // chunk, 2))
    finally:
        env.close()
    return {"task": task, "num_envs": num_envs, "workers": workers or min(num_envs, 2), "obs_mode": obs_mode,
            "image": size if obs_mode == "rgb" else None, "start_s": round(start_s, 2), "reset_s": round(reset_s, 3),
            "step_env_steps_per_s": round(num_envs / step_s), f"chunk{chunk}_env_steps_per_s":
            round(num_envs * chunk / chunk_s), "load_avg_1min": round(os.getloadavg()[0], 2)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunk", type=int, default=8)
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--size", type=int, default=64)
    args = p.parse_args()
    for task, n, workers in (("metaworld:pick-place-v3", 1, None), ("metaworld:MT10", 10, 1), ("metaworld:MT10", 10, 2)):
        for obs_mode in ("state", "rgb"):
            print(json.dumps(run(task, n, obs_mode, args.size, args.chunk, args.repeats, workers)), flush=True)


if __name__ == "__main__":
    main()
