"""The PPO learner: advantages, update epochs over minibatches, diagnostics."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from embodied.algorithms import gae, ppo_policy_loss, value_loss
from embodied.config import PPOConfig
from embodied.trajectory import Trajectory


def flatten_time(x: torch.Tensor) -> torch.Tensor:
    """[T, B, ...] -> [T * B, ...]."""
    return x.reshape(-1, *x.shape[2:])


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    var = target.var()
    return float("nan") if var == 0 else float(1.0 - (target - pred).var() / var)


class PPOLearner:
    """Updates a Policy with the clipped PPO objective from one Trajectory at a time."""

    def __init__(self, policy: Any, cfg: PPOConfig):
        self.policy, self.cfg = policy, cfg
        groups = [{"params": list(policy.actor_parameters()), "lr": cfg.lr, "name": "actor"}]
        critic = list(policy.critic_parameters())
        if critic:
            groups.append({"params": critic, "lr": cfg.critic_lr, "name": "critic"})
        self.optimizer = torch.optim.Adam(groups, eps=1e-5)

    def update(self, traj: Trajectory) -> dict[str, float]:
        cfg, policy = self.cfg, self.policy
        # Advantages at chunk level: [T, B].
        advantages, returns = gae(traj.chunk_rewards, traj.values, traj.dones, traj.last_value,
                                  cfg.gamma, cfg.gae_lambda, traj.bootstrap)
        obs = {k: flatten_time(v) for k, v in traj.obs.items()}
        replay = {k: flatten_time(v) for k, v in traj.replay.items()}
        instructions = [s for step in traj.instructions for s in step]
        old_log_probs, old_values = flatten_time(traj.log_probs), flatten_time(traj.values)
        adv_all, ret_all = flatten_time(advantages), flatten_time(returns)

        n = old_log_probs.shape[0]
        mb_size = n // cfg.minibatches
        sums: dict[str, float] = {}
        count = 0
        stop = False
        for _epoch in range(cfg.epochs):
            perm = torch.randperm(n)
            epoch_kl = []
            for start in range(0, mb_size * cfg.minibatches, mb_size):
                idx = perm[start:start + mb_size]
                mb_obs = {k: v[idx] for k, v in obs.items()}
                if instructions:
                    mb_obs["instruction"] = [instructions[i] for i in idx.tolist()]
                ev = policy.evaluate(mb_obs, {k: v[idx] for k, v in replay.items()})
                adv = adv_all[idx]
                if cfg.normalize_advantages:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss, st = ppo_policy_loss(ev.log_prob, old_log_probs[idx], adv,
                                              cfg.clip_low, cfg.clip_high, cfg.dual_clip)
                loss = pg_loss - cfg.entropy_coef * ev.entropy.mean()
                v_loss = torch.zeros(())
                if ev.value is not None:
                    v_loss = value_loss(ev.value, old_values[idx], ret_all[idx], cfg.value_clip,
                                        cfg.huber_delta if cfg.value_loss == "huber" else None)
                    loss = loss + cfg.value_coef * v_loss
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()

                epoch_kl.append(st.approx_kl.item())
                for key, val in (("policy_loss", pg_loss), ("value_loss", v_loss),
                                 ("entropy", ev.entropy.mean()), ("approx_kl", st.approx_kl),
                                 ("clip_fraction", st.clip_fraction), ("ratio", st.ratio_mean),
                                 ("grad_norm", grad_norm)):
                    sums[key] = sums.get(key, 0.0) + float(val.detach() if torch.is_tensor(val) else val)
                count += 1
                if cfg.target_kl is not None and st.approx_kl.item() > 1.5 * cfg.target_kl:
                    stop = True
                    break
            self._adapt_lr(sum(epoch_kl) / len(epoch_kl))
            if stop:
                break
        stats = {k: v / max(count, 1) for k, v in sums.items()}
        stats["explained_variance"] = explained_variance(traj.values.flatten(), returns.flatten())
        stats["lr"] = self.optimizer.param_groups[0]["lr"]
        stats["minibatch_updates"] = float(count)
        stats["advantage_mean"] = float(advantages.mean())
        return stats

    def _adapt_lr(self, kl: float) -> None:
        """rsl_rl-style adaptive schedule: keep the actor's KL near desired_kl."""
        if self.cfg.lr_schedule != "adaptive":
            return
        group = self.optimizer.param_groups[0]
        if kl > 2.0 * self.cfg.desired_kl:
            group["lr"] = max(1e-5, group["lr"] / 1.5)
        elif 0.0 < kl < 0.5 * self.cfg.desired_kl:
            group["lr"] = min(1e-2, group["lr"] * 1.5)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
