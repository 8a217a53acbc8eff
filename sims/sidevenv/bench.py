"""Cost of a side-venv env behind our VecEnv (sims/libero/bench.py, sims/metaworld/bench.py run
it with their settings): worker start, reset, step and chunk; one JSON-able dict per setting with
ms per env step and env steps per second (B envs per call, K steps per chunk), and the machine's
1-minute load average while it ran (other processes slow it down on a shared machine)."""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import torch

from sims.registry import make_env


def _time(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def cost(task: str, num_envs: int, obs_mode: str, size: int, chunk: int, repeats: int, action_dim: int,
         scale: float = 1.0, **kwargs: Any) -> dict:
    """Timings of make_env(task, num_envs, obs_mode, image_size=size, **kwargs) with uniform random
    actions in [-scale, scale] of width action_dim."""
    t0 = time.perf_counter()
    env = make_env(task, num_envs, obs_mode=obs_mode, image_size=(size, size), seed=0, **kwargs)
    start_s = time.perf_counter() - t0
    try:
        g = torch.Generator().manual_seed(0)

        def act(*shape: int) -> torch.Tensor:
            return (torch.rand(*shape, action_dim, generator=g) * 2 - 1) * scale

        reset_s = _time(lambda: env.reset(seed=list(range(num_envs))), 2)
        step_s = _time(lambda: env.step(act(num_envs)), repeats)
        chunk_s = _time(lambda: env.chunk_step(act(num_envs, chunk)), max(repeats // chunk, 2))
    finally:
        env.close()
    return {"task": task, "num_envs": num_envs, **kwargs, "obs_mode": obs_mode,
            "image": size if obs_mode == "rgb" else None, "start_s": round(start_s, 2), "reset_s": round(reset_s, 3),
            "step_ms_per_env_step": round(step_s * 1000 / num_envs, 1),
            f"chunk{chunk}_ms_per_env_step": round(chunk_s * 1000 / (num_envs * chunk), 1),
            "step_env_steps_per_s": round(num_envs / step_s), f"chunk{chunk}_env_steps_per_s":
            round(num_envs * chunk / chunk_s), "load_avg_1min": round(os.getloadavg()[0], 2)}
