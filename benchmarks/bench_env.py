"""Env throughput: MujocoVecEnv (state obs, PushCube, random actions) vs a bare mujoco.batch
loop stepping the same model the same substeps per control step and writing ctrl; and
render frames/s. Prints a markdown table.

  python benchmarks/bench_env.py [--envs 64 256 1024] [--seconds 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from mujoco.batch import Batch  # noqa: E402

from sims.registry import make_env  # noqa: E402


def _timed(fn, seconds: float, warmup: int = 5) -> tuple[int, float]:
    """Call fn repeatedly for about `seconds`; return (calls, elapsed seconds)."""
    for _ in range(warmup):
        fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return n, elapsed


def ours_stepper(num_envs: int):
    """A step function of MujocoVecEnv.step with random actions (auto-resets included)."""
    env = make_env("PushCube", num_envs)
    env.reset(seed=0)
    g = torch.Generator().manual_seed(0)
    actions = [torch.rand(num_envs, 4, generator=g) * 2 - 1 for _ in range(64)]
    i = [0]

    def step():
        env.step(actions[i[0] % 64])
        i[0] += 1

    return step, env


def bare_stepper(env):
    """A step function of a bare Batch loop on env's model: same start states, same substeps,
    writes ctrl (random targets near the start), no observations."""
    batch = Batch(env.model, env.num_envs, env._batch.nthread)
    batch.state[:] = env._batch.state
    ctrl = batch.bind("ctrl")
    rng = np.random.default_rng(0)
    base = ctrl.copy()
    targets = [base + rng.uniform(-0.02, 0.02, base.shape) for _ in range(64)]
    i = [0]

    def step():
        ctrl[:] = targets[i[0] % 64]
        batch.step(None, env.substeps)
        i[0] += 1

    return step


def bench_steps(num_envs: int, seconds: float, rounds: int = 3) -> tuple[float, float]:
    """(ours, bare) env steps/s: the best of `rounds` alternating runs of each, so that load
    from other processes hits both alike."""
    ours, env = ours_stepper(num_envs)
    bare = bare_stepper(env)
    best_ours = best_bare = 0.0
    for _ in range(rounds):
        n, t = _timed(bare, seconds / rounds)
        best_bare = max(best_bare, n * num_envs / t)
        n, t = _timed(ours, seconds / rounds)
        best_ours = max(best_ours, n * num_envs / t)
    env.close()
    return best_ours, best_bare


def bench_render(size: int, seconds: float, num_envs: int = 64) -> float:
    """Frames/s of env.render (front camera) at size x size, num_envs frames per call."""
    env = make_env("PushCube", num_envs, render_size=(size, size))
    env.reset(seed=0)
    n, t = _timed(lambda: env.render(camera="front"), seconds, warmup=2)
    env.close()
    return n * num_envs / t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--seconds", type=float, default=6.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    env = make_env("PushCube", 64)
    print(f"Machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"os.cpu_count()={os.cpu_count()}; mujoco {mujoco.__version__}, torch {torch.__version__}")
    print(f"Date: {datetime.datetime.now().isoformat(timespec='seconds')}; load average before: "
          f"{load:.2f}")
    print(f"PushCube: timestep {env.model.opt.timestep} s, {env.substeps} substeps per control "
          f"step ({env.spec.control_hz:g} Hz), batch threads = {env._batch.nthread}, "
          f"torch threads = 1\n")
    env.close()
    print("| envs | MujocoVecEnv steps/s | bare mujoco.batch steps/s | ratio |")
    print("|---:|---:|---:|---:|")
    for n in args.envs:
        ours, bare = bench_steps(n, args.seconds)
        print(f"| {n} | {ours:,.0f} | {bare:,.0f} | {ours / bare:.2f} |", flush=True)
    print("\n| render (front camera, 64 envs per call) | frames/s |")
    print("|---|---:|")
    for size in (64, 128):
        print(f"| {size}x{size} | {bench_render(size, args.seconds):,.0f} |", flush=True)


if __name__ == "__main__":
    main()
