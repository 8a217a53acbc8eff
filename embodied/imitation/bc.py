"""Behaviour cloning of the MLP Gaussian policy (policies/mlp.py) on demonstrations:
`python -m embodied.imitation.bc DATASET --out DIR`.

DATASET is a LeRobot v3 dataset of `embodied collect` (or any with `action` and the column of
obs_key: observation.environment_state for privileged, observation.state for state): every
committed episode is read (or the first `--episodes`), each frame is one
(observation, action) pair. The policy is a fresh MLPActorCritic on obs_key; its observation
normaliser takes the dataset's mean and variance (the variance floored at VAR_FLOOR, so that a
column that never moved in the demos is not blown up by a later change) with the frame count
as its count, so that PPO's running updates move it as if it had seen the demos (`--norm-count`
gives another count: 1e12 keeps it at the demos' statistics, each PPO update moving it by
about frames / 1e12). The loss is
the policy's sft_loss, the Gaussian negative log-likelihood of the labels: the mean and the
state-independent log std learn together. With `log_std` set, the log std is overwritten
after training (the exploration noise PPO starts from). The critic stays as initialised.

DIR is a save_pretrained directory: `embodied train CONFIG policy.name=mlp
policy.init_from=DIR` runs PPO from it (policies/registry.py), and LIBERO's protocol evaluates
it (`python -m embodied.eval.libero_protocol DIR --task ...`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from embodied.data.dataset import read_episodes
from embodied.data.layout import DatasetError
from policies.mlp import MLPActorCritic, MLPConfig
from policies.normalizer import RunningNormalizer

VAR_FLOOR = 1e-4  # (1 cm)^2 for positions: the smallest variance the normaliser divides by


def load_pairs(root: str | Path, obs_key: str, episodes: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(observations float32 [N, D], actions float32 [N, A], episodes read) of the first
    `episodes` committed episodes (0: all); DatasetError (one line) when the dataset has no
    such column or no episode."""
    key, obs, act, n = f"obs.{obs_key}", [], [], 0
    for ep in read_episodes(root, list(range(episodes)) if episodes else None):
        if key not in ep:
            raise DatasetError(f"{root}: episodes have no {key} (obs_key {obs_key!r}); "
                               f"they have {sorted(k for k in ep if k.startswith('obs.'))}")
        obs.append(ep[key].float())
        act.append(ep["action"].float())
        n += 1
    if n == 0:
        raise DatasetError(f"{root}: holds no episodes")
    return torch.cat(obs), torch.cat(act), n


def behaviour_clone(obs: torch.Tensor, actions: torch.Tensor, obs_key: str = "privileged",
                    hidden: tuple[int, ...] = (256, 256), activation: str = "tanh", steps: int = 3000,
                    batch_size: int = 256, lr: float = 1e-3, seed: int = 0,
                    log_std: float | None = None,
                    norm_count: float | None = None) -> tuple[MLPActorCritic, dict[str, float]]:
    """A fresh MLPActorCritic fitted to (obs [N, D], actions [N, A]) with Adam on minibatches
    of the Gaussian NLL; returns it with the final NLL and the action MSE of its mean over all
    pairs. norm_count: the normaliser's count (default N, the number of pairs)."""
    if steps < 1 or batch_size < 1 or lr <= 0:
        raise ValueError(f"steps, batch_size and lr must be positive, got {steps}, {batch_size}, {lr}")
    if norm_count is not None and not norm_count >= 1:
        raise ValueError(f"norm_count: {norm_count} must be >= 1 (or unset: the number of pairs)")
    torch.manual_seed(seed)
    policy = MLPActorCritic(MLPConfig(obs_dim=obs.shape[1], action_dim=actions.shape[1], obs_key=obs_key,
                                      hidden_sizes=list(hidden), activation=activation))
    norm = policy.normalizer
    if isinstance(norm, RunningNormalizer):
        norm.mean.copy_(obs.mean(0))
        norm.var.copy_(obs.var(0, unbiased=False).clamp_min(VAR_FLOOR))
        norm.count.fill_(len(obs) if norm_count is None else float(norm_count))
    opt = torch.optim.Adam(policy.actor_parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 0.1)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(len(obs), (batch_size,), generator=g)
        loss = policy.sft_loss({obs_key: obs[idx]}, actions[idx, None])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        nll = float(policy.sft_loss({obs_key: obs}, actions[:, None]))
        mse = float((policy.actor_mean({obs_key: obs}) - actions).pow(2).mean())
        if log_std is not None:
            policy.log_std.fill_(float(log_std))
    return policy, {"nll": nll, "action_mse": mse, "learned_log_std": policy.log_std.mean().item()
                    if log_std is None else float("nan")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="behaviour cloning of the MLP Gaussian policy on a demo dataset")
    p.add_argument("dataset", help="LeRobot v3 dataset (embodied collect)")
    p.add_argument("--out", required=True, help="save_pretrained directory to write")
    p.add_argument("--episodes", type=int, default=0, help="the first N episodes only (few-shot); 0: all")
    p.add_argument("--obs-key", default="privileged", choices=("privileged", "state"))
    p.add_argument("--hidden", default="256,256", help="hidden layer sizes, comma-separated")
    p.add_argument("--activation", default="tanh", choices=("tanh", "elu", "relu"))
    p.add_argument("--steps", type=int, default=3000, help="gradient steps")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-std", type=float, default=None, help="set the log std after training (PPO's start)")
    p.add_argument("--norm-count", type=float, default=None,
                   help="the normaliser's count (default: the frame count); 1e12 keeps the demos' statistics under PPO")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    try:
        hidden = tuple(int(h) for h in a.hidden.split(","))
    except ValueError:
        p.error(f"--hidden: expected comma-separated integers, got {a.hidden!r}")
    t0 = time.monotonic()
    try:
        if a.episodes < 0:
            raise ValueError(f"--episodes: {a.episodes} must be >= 0 (0: all)")
        obs, actions, episodes = load_pairs(a.dataset, a.obs_key, a.episodes)
        policy, fit = behaviour_clone(obs, actions, a.obs_key, hidden, a.activation, a.steps, a.batch_size,
                                      a.lr, a.seed, a.log_std, a.norm_count)
    except (DatasetError, ValueError) as e:
        raise SystemExit(f"embodied.imitation.bc: {e}")
    from embodied.data.layout import read_info

    policy.record = {"task": (read_info(a.dataset).get("embodied") or {}).get("task"), "obs_mode": "state",
                     "obs_keys": [a.obs_key], "action_dim": int(policy.config.action_dim), "dataset": str(a.dataset)}
    policy.save_pretrained(a.out)
    info: dict[str, Any] = {"dataset": a.dataset, "episodes": episodes, "frames": len(obs), **fit,
                            "seconds": round(time.monotonic() - t0, 1)}
    print(json.dumps(info))


if __name__ == "__main__":
    main()
