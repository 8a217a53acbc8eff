"""ManiSkill3 throughput: our adapter (ManiSkillVecEnv) against bare ManiSkill stepping.

    .venv/bin/python benchmarks/bench_maniskill.py                    # CPU: 1 env, in process
    .venv/bin/python benchmarks/bench_maniskill.py --envs 1024        # GPU: physx_cuda

Both sides step random actions in [-1, 1] with state observations, pd_ee_delta_pose and
normalized dense rewards; the adapter adds auto-reset, privileged obs and instructions. On CPU
bare ManiSkill is one single-env instance (physx_cpu allows one env per instance), and the
adapter runs its envs in --workers processes (0: in process).
"""

from __future__ import annotations

import argparse
import time

import torch


def bare_steps_per_s(env_id: str, num_envs: int, steps: int) -> float:
    """Env steps/s of gym.make(env_id) stepped directly (num_envs > 1 needs CUDA)."""
    from sims.maniskill import lavapipe

    lavapipe.configure()
    import gymnasium as gym

    import mani_skill.envs  # noqa: F401

    cuda = torch.cuda.is_available()
    env = gym.make(env_id, num_envs=num_envs, obs_mode="state", control_mode="pd_ee_delta_pose",
                   reward_mode="normalized_dense", sim_backend="physx_cuda" if cuda else "physx_cpu",
                   render_backend="gpu" if cuda else "cpu")
    env.reset(seed=0)
    return _timed_steps(env, env.unwrapped.device, num_envs, steps)


def adapter_steps_per_s(task: str, num_envs: int, steps: int, workers: int = 1) -> float:
    """Env steps/s of make_env(task) (our VecEnv, auto-reset included)."""
    from sims.registry import make_env

    env = make_env(task, num_envs, num_threads=workers)
    env.reset(seed=0)
    return _timed_steps(env, env.device, num_envs, steps)


def _timed_steps(env, device: torch.device, num_envs: int, steps: int) -> float:
    """Env steps/s over `steps` random-action steps after 5 warm-up steps; closes env."""
    cuda = torch.device(device).type == "cuda"
    actions = [torch.rand(num_envs, 7, device=device) * 2 - 1 for _ in range(16)]
    for a in actions[:5]:
        env.step(a)
    _sync(cuda)
    t = time.perf_counter()
    for k in range(steps):
        env.step(actions[k % 16])
    _sync(cuda)
    rate = steps * num_envs / (time.perf_counter() - t)
    env.close()
    return rate


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="PickCube-v1")
    p.add_argument("--envs", type=int, default=1)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    args = p.parse_args()
    torch.set_num_threads(1)
    bare = bare_steps_per_s(args.task, args.envs, args.steps)
    print(f"bare ManiSkill {args.task} x{args.envs}: {bare:.0f} env steps/s")
    if torch.cuda.is_available():
        ours = adapter_steps_per_s("ms:" + args.task, args.envs, args.steps)
        print(f"adapter x{args.envs}: {ours:.0f} env steps/s ({ours / bare:.2f}x bare)")
        return
    ours = adapter_steps_per_s("ms:" + args.task, args.envs, args.steps, workers=1)
    print(f"adapter x{args.envs}, in process: {ours:.0f} env steps/s ({ours / bare:.2f}x bare)")
    for w in args.workers:
        if w > 1:
            n = max(args.envs, w)
            rate = adapter_steps_per_s("ms:" + args.task, n, args.steps, workers=w)
            print(f"adapter x{n}, {w} worker processes: {rate:.0f} env steps/s ({rate / bare:.2f}x one bare env)")


if __name__ == "__main__":
    main()
