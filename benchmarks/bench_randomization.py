"""Cost of domain randomisation: PushCube step time with every knob on against none.

python benchmarks/bench_randomization.py [--envs 32] [--threads 1]
Best of 5 x 3 repeats of 20 steps, nominal and randomised alternating (the best is the least
disturbed by other load); episodes of 10 steps, so resets (and their draws) are included.
"""

from __future__ import annotations

import argparse
import time

import torch

from sims.registry import make_env

EVERY_KNOB = {"friction": [0.5, 1.5], "mass": [0.5, 2], "actuator_gain": [0.8, 1.2],
              "latency_steps": [0, 2], "action_noise": [0, 0.1], "obs_noise": [0, 0.01],
              "light_tilt": [0, 30], "light_azimuth": [-180, 180], "light_intensity": [0.7, 1.3],
              "light_warmth": [-0.2, 0.2], "table_color": [-0.1, 0.1], "object_color": [-0.1, 0.1],
              "camera_pos": [-0.02, 0.02], "camera_rot": [-3, 3], "camera_fovy": [-5, 5]}


def step_ms(mode: str, randomization: dict | None, envs: int, threads: int) -> float:
    env = make_env("PushCube", envs, obs_mode=mode, image_size=64, num_threads=threads, seed=0,
                   randomization=randomization, max_episode_steps=10)
    env.reset(seed=0)
    a = torch.zeros(envs, 4)
    for _ in range(5):
        env.step(a)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(20):
            env.step(a)
        best = min(best, (time.perf_counter() - t) / 20)
    env.close()
    return best * 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--envs", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    for mode in ("state", "rgb"):
        base = dr = float("inf")
        for _ in range(5):
            base = min(base, step_ms(mode, None, args.envs, args.threads))
            dr = min(dr, step_ms(mode, EVERY_KNOB, args.envs, args.threads))
        print(f"{mode}: {base:.1f} ms/step nominal, {dr:.1f} ms/step with every knob "
              f"({args.envs} envs, {args.threads} thread(s))")


if __name__ == "__main__":
    main()
