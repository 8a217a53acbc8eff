"""Where the time of MT10 RL from state goes, phase by phase, in one process: MetaWorld's env step
alone (random actions: the ceiling of the side-venv workers), the PPO rollout of the MLP policy
(the same env with the policy's forward, auto-resets and the rollout buffers), the PPO update and
the seeded evaluation. Every phase reports env steps per second (or seconds) and the machine's
1-minute load average, so settings can be compared within one run on a shared machine.

    python benchmarks/bench_rl_throughput.py POLICY_DIR --envs 40,80 --workers 2
    python benchmarks/bench_rl_throughput.py POLICY_DIR --envs 40 --config configs/rl/rl_mt10_state_ppo_mlp.yaml

POLICY_DIR: a save_pretrained MLP (python -m embodied.imitation.bc on MT10 demos). The reset
time is the part of the rollout spent in the extra worker exchange that resets finished envs
(sims/sidevenv/env.py: a step that ends an episode is followed by a reset request).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TASK = "metaworld:MT10@goal"


def timed_resets(env: Any) -> dict[str, float]:
    """Wrap env._reset_ids (the side-venv reset exchange) to sum its seconds and calls."""
    acc = {"seconds": 0.0, "calls": 0}
    inner = env._reset_ids

    def reset_ids(ids: Any, seeds: list[int]) -> None:
        t0 = time.perf_counter()
        inner(ids, seeds)
        acc["seconds"] += time.perf_counter() - t0
        acc["calls"] += 1

    env._reset_ids = reset_ids
    return acc


def load() -> float:
    return round(os.getloadavg()[0], 2)


def measure(policy_dir: str, config: str, num_envs: int, workers: int, steps: int, eval_episodes: int,
            overrides: list[str]) -> dict[str, Any]:
    """One setting's phases: env steps/s of the env alone and of the rollout, the update's and the
    evaluation's seconds, the reset exchange's share of the rollout."""
    from embodied.config import load_config
    from embodied.eval.evaluate import evaluate
    from embodied.rl.registry import algorithm
    from policies.registry import build_policy
    from sims.registry import make_env

    cfg = load_config(config, [f"policy.init_from={policy_dir}", f"env.num_envs={num_envs}",
                               f"ppo.rollout_steps={max(steps // num_envs, 1)}", "ppo.bc_coef=0", *overrides])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    kw = dict(obs_mode="state", reward_mode=cfg.env.reward_mode, max_episode_steps=cfg.env.max_episode_steps,
              num_workers=workers)
    out: dict[str, Any] = {"num_envs": num_envs, "workers": workers, "load_start": load()}
    t0 = time.perf_counter()
    env = make_env(TASK, num_envs, **kw)
    out["start_s"] = round(time.perf_counter() - t0, 1)
    try:
        env.reset(seed=list(range(num_envs)))
        g = torch.Generator().manual_seed(0)
        n = max(steps // num_envs, 1)
        t0 = time.perf_counter()
        for _ in range(n):
            env.step(torch.rand(num_envs, 4, generator=g) * 2 - 1)
        out["env_steps_per_s"] = round(n * num_envs / (time.perf_counter() - t0))

        policy = build_policy(cfg.policy, env.spec)
        alg = algorithm("ppo")
        collector, learner = alg.collector(cfg, env, policy), alg.learner(cfg, policy)
        collector.reset(seed=1)
        resets = timed_resets(env)
        t0 = time.perf_counter()
        traj = collector.collect()
        dt = time.perf_counter() - t0
        out["rollout_env_steps_per_s"] = round(int(traj.valid.sum()) / dt)
        out["rollout_reset_share"] = round(resets["seconds"] / dt, 3)
        out["rollout_reset_calls_per_step"] = round(resets["calls"] / n, 3)
        t0 = time.perf_counter()
        learner.update(traj)
        out["update_s"] = round(time.perf_counter() - t0, 2)
        out["update_env_steps_per_s"] = round(int(traj.valid.sum()) / (time.perf_counter() - t0))
    finally:
        env.close()
    if eval_episodes:
        from sims.registry import batch_for

        eval_env = make_env(TASK, batch_for(TASK, eval_episodes, 64), **kw)
        try:
            t0 = time.perf_counter()
            res = evaluate(policy, eval_env, list(range(eval_episodes)))
            dt = time.perf_counter() - t0
            out["eval_s"] = round(dt, 1)
            out["eval_success"] = res.success_rate
        finally:
            eval_env.close()
    out["load_end"] = load()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("policy", help="save_pretrained MLP policy directory (MT10 from state)")
    ap.add_argument("--config", default="configs/rl/rl_mt10_state_ppo_mlp.yaml")
    ap.add_argument("--envs", default="40,80", help="comma-separated env counts, one setting each")
    ap.add_argument("--workers", default="2", help="comma-separated worker counts")
    ap.add_argument("--steps", type=int, default=4000, help="env steps per phase and setting")
    ap.add_argument("--eval-episodes", type=int, default=50)
    ap.add_argument("--set", nargs="*", default=[], help="config overrides")
    args = ap.parse_args()
    rows = []
    for w in map(int, args.workers.split(",")):
        for b in map(int, args.envs.split(",")):
            rows.append(measure(args.policy, args.config, b, w, args.steps, args.eval_episodes, args.set))
            print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
