"""Cost of ManiSkill domain randomisation: ms:PushCube-v1 step time with every supported knob
on against none, physx_cpu, envs in this process.

python benchmarks/bench_maniskill_randomization.py [--envs 8] [--repeats 5]
Best of `repeats` blocks of 50 steps, nominal and randomised alternating (the best block is
the least disturbed by other load); episodes of 10 steps, so resets (draws and the PhysX
writes of friction, mass and drive gains) are included.
"""

from __future__ import annotations

import argparse
import time

import torch

from sims.maniskill.randomization import SUPPORTED
from sims.registry import make_env

EVERY_KNOB = {"friction": [0.5, 1.5], "mass": [0.5, 2.0], "actuator_gain": [0.7, 1.3],
              "latency_steps": [0, 2], "action_noise": [0.0, 0.1], "obs_noise": [0.0, 0.01]}
assert set(EVERY_KNOB) == set(SUPPORTED)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    envs = {name: make_env("ms:PushCube-v1", args.envs, num_threads=1, max_episode_steps=10, seed=0,
                           randomization=block) for name, block in (("nominal", None), ("randomised", EVERY_KNOB))}
    best = {name: float("inf") for name in envs}
    action = torch.zeros(args.envs, 7)
    for _ in range(args.repeats):
        for name, env in envs.items():
            t = time.perf_counter()
            for _ in range(50):
                env.step(action)
            best[name] = min(best[name], (time.perf_counter() - t) / 50)
    for env in envs.values():
        env.close()
    print(", ".join(f"{name} {1000 * s:.1f} ms" for name, s in best.items()),
          f"per step of {args.envs} envs (best of {args.repeats} x 50 steps)")


if __name__ == "__main__":
    main()
