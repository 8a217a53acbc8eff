"""Env steps per second of synchronous vs pipelined rollout over roles (embodied/distributed).

The policy is an MLP whose width is picked so that one inference on the whole batch takes about
as long as one env step of the whole batch (a balanced load, where a 2-stage pipeline can at
most double the throughput). Modes, all with backend local and the same envs:

    train.py     the single-process RolloutCollector (one VecEnv, `--threads` physics threads,
                 torch on `--threads` threads): what `embodied train` does today
    sync         2 env-worker shards and a rollout role, stages=1: infer, then step
    pipelined    the same roles, stages=2: one stage's envs step on their worker's thread
                 while the policy infers for the other stage

Usage: python benchmarks/bench_pipeline.py [--envs 64] [--steps 32] [--repeats 3]
Repeats alternate the modes; the table gives the median of each and the ratios to sync, and
the CPU time this process got per second of wall time while collecting (cpu/wall): on a
2-core machine a pipeline can only pay where it is near 2 in pipelined mode; on a machine
shared with other jobs it is lower, and the ratio says so.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch

from embodied.config import load_config
from embodied.distributed.backend import LocalBackend
from embodied.distributed.loop import build_roles
from embodied.distributed.placement import preset
from embodied.rollout import RolloutCollector
from embodied.train import build_env
from policies.registry import build_policy


def config(envs: int, steps: int, hidden: int, threads: int) -> object:
    return load_config(None, [f"env.task=PushCube", f"env.num_envs={envs}", f"ppo.rollout_steps={steps}",
                              f"policy.hidden_sizes=[{hidden},{hidden}]", f"env.num_threads={threads}"])


def balance(envs: int, threads: int) -> tuple[int, float, float]:
    """-> (hidden width, env step seconds, inference seconds) with inference closest to an env step."""
    cfg = config(envs, 1, 64, threads)
    env = build_env(cfg.env)
    obs, _ = env.reset(seed=0)
    action = torch.zeros(envs, env.spec.action_dim)
    t = time.perf_counter()
    for _ in range(20):
        obs = env.step(action).obs
    env_s = (time.perf_counter() - t) / 20
    best = None
    for hidden in (64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096):
        policy = build_policy(config(envs, 1, hidden, threads).policy, env.spec)
        with torch.no_grad():
            policy.act(obs)
            t = time.perf_counter()
            for _ in range(10):
                policy.act(obs)
        inf_s = (time.perf_counter() - t) / 10
        if best is None or abs(inf_s - env_s) < abs(best[2] - env_s):
            best = (hidden, env_s, inf_s)
        if inf_s > env_s:
            break
    env.close()
    return best


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_train_py(cfg: object, threads: int) -> tuple[float, float]:
    torch.set_num_threads(threads)
    env = build_env(cfg.env)
    torch.manual_seed(0)
    collector = RolloutCollector(env, build_policy(cfg.policy, env.spec), cfg.ppo.rollout_steps)
    collector.reset(seed=0)
    collector.collect()  # warm-up
    t, c = time.perf_counter(), cpu_seconds()
    traj = collector.collect()
    wall = time.perf_counter() - t
    env.close()
    return int(traj.valid.sum()) / wall, (cpu_seconds() - c) / wall


def run_roles(cfg: object, stages: int) -> tuple[float, float]:
    torch.set_num_threads(1)
    place = preset("pipelined" if stages > 1 else "collocated", env_workers=2)
    backend = LocalBackend(place)
    try:
        collector, _ = build_roles(cfg, place, backend)
        collector.reset(seed=0)
        collector.collect()  # warm-up
        c = cpu_seconds()
        batch = collector.collect()
        wall = batch.seconds["collect"]
        return batch.env_steps / wall, (cpu_seconds() - c) / wall
    finally:
        backend.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="physics and torch threads of the train.py mode")
    args = ap.parse_args()

    torch.set_num_threads(1)
    hidden, env_s, inf_s = balance(args.envs // 2, 1)  # one stage: half the batch, one thread
    print(f"balanced load: MLP [{hidden},{hidden}]; half-batch env step {env_s * 1e3:.1f} ms, "
          f"inference {inf_s * 1e3:.1f} ms (1 thread each)")
    roles_cfg = config(args.envs, args.steps, hidden, 1)
    rates: dict[str, list[tuple[float, float]]] = {"train.py": [], "sync": [], "pipelined": []}
    for _ in range(args.repeats):
        rates["train.py"].append(run_train_py(config(args.envs, args.steps, hidden, args.threads), args.threads))
        rates["sync"].append(run_roles(roles_cfg, 1))
        rates["pipelined"].append(run_roles(roles_cfg, 2))
    sync = statistics.median(x for x, _ in rates["sync"])
    print(f"{'mode':<10} {'env steps/s (median)':>21} {'vs sync':>8} {'cpu/wall':>9}  runs")
    for mode, r in rates.items():
        med, cpu = statistics.median(x for x, _ in r), statistics.median(c for _, c in r)
        print(f"{mode:<10} {med:>21.0f} {med / sync:>7.2f}x {cpu:>9.2f}  {', '.join(f'{x:.0f}' for x, _ in r)}")


if __name__ == "__main__":
    main()
