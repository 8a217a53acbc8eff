"""Learners: advantages, then clipped policy-gradient epochs over minibatches, diagnostics.

PPOLearner takes GAE advantages from a critic; GRPOLearner takes group-relative episode
advantages and no critic. Both share `PolicyGradientLearner.optimize`, which computes the
ratio at the configured granularity (ppo.logprob_level):
    chunk   one ratio per policy step, from log_prob [N]
    action  one ratio per scored chunk position, log_prob_parts summed over A  [N, P]
    token   one ratio per action element (an AR token), log_prob_parts        [N, P * A]
P is n, the executed actions, for policies whose executed actions have a density of their
own (Gaussian, AR: its later tokens cannot change earlier ones), and K, the whole chunk, for
the flow VLA, whose chain is scored whole (docs/rl.md). The step's advantage is shared by all
its parts; parts of substeps that were not executed because the episode ended inside the
chunk are masked out.

With ppo.reward_level=action, PPO's GAE runs over executed actions (a per-action critic,
advantages [N, n]): an action ratio takes its own action's advantage, a token ratio its
action's, and a chunk ratio the advantage of the chunk's first action (which sums the whole
chunk's discounted TD errors).

With ppo.kl_ref_coef = beta > 0 the learner keeps a frozen copy of the policy as it was built
(policy.init_from: the SFT policy; a resumed run loads its checkpoint after the learner is made)
and adds beta * KL(pi || pi_ref), estimated per ratio element from the sampled actions (k3), to
the loss: the reference's log-probs are computed once per update, at the ratio's level.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from embodied.rl import diagnostics as diag
from embodied.rl.algorithms import (action_level_gae, gae, grpo_advantages, grpo_keep_mask, kl_to_reference,
                                    ppo_policy_loss, value_loss)
from embodied.rl.levels import advantages_at_level, at_level, explained_variance, flatten_time, per_task
from embodied.rl.return_scaler import ReturnScaler
from embodied.rl.trajectory import Trajectory
from embodied.run.device import autocast, module_device, uses_bf16
from policies.optim import make_optimizer
from policies.vla.modes import shared_reference

if TYPE_CHECKING:
    from embodied.config import GRPOConfig, PPOConfig


TRACK_REF_MAX_PARAMS = 100_000_000  # ppo.track_ref_kl null: a reference copy for policies up to this size


class PolicyGradientLearner:
    """The optimiser and the clipped-objective epochs shared by PPO and GRPO."""

    def __init__(self, policy: Any, cfg: PPOConfig):
        self.policy, self.cfg = policy, cfg
        self.iteration = 0
        # the minibatch permutations' stream: None draws from torch's global one (train.py); a
        # learner on its own thread beside the rollout role passes its own (distributed/roles.py)
        self.generator: torch.Generator | None = None
        groups = [{"params": list(policy.actor_parameters()), "lr": cfg.lr, "name": "actor"}]
        critic = list(policy.critic_parameters())
        if critic:
            groups.append({"params": critic, "lr": cfg.critic_lr, "name": "critic"})
        self.optimizer = make_optimizer(groups, cfg.optimizer, eps=1e-5, field="ppo.optimizer")  # policies/optim.py
        # the policy's device; bf16 autocast of its forward for VLAs on CUDA, the losses in float32
        self.device = module_device(policy)
        self.bf16 = uses_bf16(policy, self.device)
        # ppo.kl_ref_coef: the policy as built, frozen (not saved: a resumed run builds it again);
        # ppo.track_ref_kl keeps it to log the KL to it (train/kl_ref_rollout) without a penalty
        track = (cfg.track_ref_kl if cfg.track_ref_kl is not None
                 else sum(p.numel() for p in policy.parameters()) <= TRACK_REF_MAX_PARAMS)
        keep_ref = cfg.kl_ref_coef > 0 or track
        # (its frozen weights are the policy's own: policies/vla/modes.py shared_reference)
        self.reference = shared_reference(policy) if keep_ref else None
        self.demos = None  # ppo.bc_coef > 0: a DemoSampler (embodied/rl/demos.py), set by the registry

    def optimize(self, traj: Trajectory, advantages: torch.Tensor, returns: torch.Tensor | None,
                 step_mask: torch.Tensor | None = None, train_actor: bool = True,
                 step_weights: torch.Tensor | None = None, normalize: bool | None = None) -> dict[str, float]:
        """Update epochs on advantages [T, B], or [T, B, n] per executed action (returns of the
        same shape train the critic; None: no critic loss); step_mask bool [T, B] drops steps
        (GRPO: after the episode, filtered groups); step_weights float [T, B] weigh the steps in
        the policy loss (default: equal); normalize: per-minibatch advantage normalisation
        (default: cfg.normalize_advantages)."""
        cfg, policy = self.cfg, self.policy
        normalize = cfg.normalize_advantages if normalize is None else normalize
        obs = {k: flatten_time(v) for k, v in traj.obs.items()}
        replay = {k: flatten_time(v) for k, v in traj.replay.items()}
        instructions = [s for step in traj.instructions for s in step]
        keep = (torch.ones(traj.log_probs.numel(), dtype=torch.bool, device=traj.log_probs.device)
                if step_mask is None else flatten_time(step_mask))
        rows = keep.nonzero().flatten()  # samples that enter the loss
        valid = flatten_time(traj.valid)
        old_lp, old_parts = flatten_time(traj.log_probs), traj.log_prob_parts
        old_parts = None if old_parts is None else flatten_time(old_parts)
        old_values, adv_all = flatten_time(traj.values), flatten_time(advantages)
        if adv_all.dim() == 2 and old_values.dim() == 1:  # per-action GAE with a chunk-1 policy
            old_values = old_values[:, None]
        w_all = None if step_weights is None else flatten_time(step_weights)
        ret_all = None if returns is None else flatten_time(returns)

        def minibatch(idx: torch.Tensor) -> dict[str, Any]:
            mb = {k: v[idx] for k, v in obs.items()}
            if instructions:
                mb["instruction"] = [instructions[i] for i in idx.tolist()]
            return mb

        def log_probs_of(policy: Any, lp: torch.Tensor, parts: torch.Tensor | None):
            """lp [N] and parts (or None) with the kept rows' entries replaced by policy's log-probs
            of the sampled actions, in minibatch-sized chunks, without gradients."""
            lp, parts = lp.clone(), None if parts is None else parts.clone()
            with torch.no_grad():
                for chunk in rows.split(max(1, len(rows) // cfg.minibatches)):
                    ev = self._evaluate(minibatch(chunk), {k: v[chunk] for k, v in replay.items()}, policy)
                    lp[chunk] = ev.log_prob
                    if parts is not None and ev.log_prob_parts is not None:
                        parts[chunk] = ev.log_prob_parts
            return lp, parts

        if cfg.recompute_log_probs and train_actor:  # old log-probs from this learner's own forward
            old_lp, old_parts = log_probs_of(self.policy, old_lp, old_parts)
        ref_lp = ref_parts = None
        if self.reference is not None and train_actor:  # the reference's log-probs of the sampled actions
            ref_lp, ref_parts = log_probs_of(self.reference, old_lp, old_parts)
        # per-task diagnostics where the envs run several tasks (embodied/rl/diagnostics.py)
        ti = diag.task_index(traj.tasks, traj.num_envs)
        sample_task = None if ti is None else ti[1].to(keep.device)[
            torch.arange(len(keep), device=keep.device) % traj.num_envs]  # [T * B]
        tally = None if ti is None else diag.TaskTally(ti[0])
        extra: dict[str, float] = {}
        if ref_lp is not None:  # KL(behaviour || reference) before the update, per sample
            b, m = at_level(old_lp[rows], None if old_parts is None else old_parts[rows], valid[rows], cfg.logprob_level)
            r, _ = at_level(ref_lp[rows], None if ref_parts is None else ref_parts[rows], valid[rows], cfg.logprob_level)
            m = m.float() if w_all is None else m * w_all[rows, None]
            d = r - b
            per_row, w = diag.row_means(torch.expm1(d) - d, m)
            extra["kl_ref_rollout"] = float((per_row * w).sum() / w.sum().clamp_min(1e-12))
            if tally is not None:
                tally.add("kl_ref_rollout", per_row, w, sample_task[rows])

        n = len(rows)
        mb_size = max(1, n // cfg.minibatches)
        sums: dict[str, torch.Tensor] = {}  # on the device: one host read at the end
        maxes: dict[str, float] = {}
        count, stop = 0, False
        for _epoch in range(cfg.epochs):
            # drawn on the CPU (the same permutations on every device), used where the rows are
            perm = rows[torch.randperm(n, generator=self.generator).to(rows.device)]
            epoch_kl = []
            for start in range(0, mb_size * min(cfg.minibatches, n), mb_size):
                idx = perm[start:start + mb_size]
                ev = self._evaluate(minibatch(idx), {k: v[idx] for k, v in replay.items()})
                adv = adv_all[idx]  # [M] or [M, n]
                v_mask = None if adv.dim() == 1 else valid[idx, :adv.shape[1]]
                if normalize and len(idx) > 1:
                    a = adv if v_mask is None else adv[v_mask]
                    adv = (adv - a.mean()) / (a.std() + 1e-8)
                new_lp, mask = at_level(ev.log_prob, ev.log_prob_parts, valid[idx], cfg.logprob_level)
                old, _ = at_level(old_lp[idx], None if old_parts is None else old_parts[idx],
                                  valid[idx], cfg.logprob_level)
                if w_all is not None:  # a weighted mean: mask entries carry their step's weight
                    mask = mask * w_all[idx, None]
                P, width = (1, 1) if ev.log_prob_parts is None else ev.log_prob_parts.shape[1:]
                pg_loss, st = ppo_policy_loss(new_lp, old, advantages_at_level(adv, P, width, cfg.logprob_level),
                                              cfg.clip_low, cfg.clip_high, cfg.dual_clip, mask)
                zero = torch.zeros((), device=pg_loss.device)
                loss = (pg_loss - cfg.entropy_coef * ev.entropy.mean()) if train_actor else zero
                ref_kl = zero
                if ref_lp is not None and cfg.kl_ref_coef > 0:
                    ref, _ = at_level(ref_lp[idx], None if ref_parts is None else ref_parts[idx], valid[idx],
                                      cfg.logprob_level)
                    ref_kl = kl_to_reference(new_lp, ref, mask)
                    loss = loss + cfg.kl_ref_coef * ref_kl
                bc = None
                if self.demos is not None and cfg.bc_coef > 0 and train_actor:  # demonstrations kept in the update
                    d_obs, d_act = self.demos.sample()
                    with autocast(self.device, self.bf16):
                        bc = policy.sft_loss(d_obs, d_act).float()
                    loss = loss + cfg.bc_coef * bc
                v_loss = zero
                if ev.value is not None and ret_all is not None:
                    v_loss = value_loss(ev.value.view_as(ret_all[idx]), old_values[idx], ret_all[idx], cfg.value_clip,
                                        cfg.huber_delta if cfg.value_loss == "huber" else None, v_mask)
                    loss = loss + cfg.value_coef * v_loss
                self.optimizer.zero_grad(set_to_none=True)
                if loss.requires_grad:
                    loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()

                epoch_kl.append(st.approx_kl.item())
                maxes["ratio_max"] = max(maxes.get("ratio_max", 0.0), float(st.ratio_max))
                replay_mb = {k: v[idx] for k, v in replay.items()}
                gaussian = "stochastic" in replay_mb or getattr(policy, "name", "") in ("mlp", "cnn")
                noise = diag.noise_stats(ev.entropy, diag.elements_per_sample(replay_mb, ev.log_prob_parts), gaussian)
                for key, val in (("policy_loss", pg_loss), ("value_loss", v_loss),
                                 ("entropy", ev.entropy.mean()), ("approx_kl", st.approx_kl),
                                 ("clip_fraction", st.clip_fraction), ("ratio", st.ratio_mean),
                                 ("ratio_abs_dev", st.ratio_abs_dev), ("grad_norm", grad_norm),
                                 *noise.items()) + (
                        (("ref_kl", ref_kl),) if ref_lp is not None and cfg.kl_ref_coef > 0 else ()) + (
                        (("bc_loss", bc),) if bc is not None else ()):
                    val = val.detach().float() if torch.is_tensor(val) else torch.tensor(float(val))
                    sums[key] = sums.get(key, 0.0) + val.to(zero.device)
                if tally is not None and train_actor:  # the ratio's statistics per task
                    with torch.no_grad():
                        ratio = torch.exp(new_lp.detach() - old)
                        clipped = ((ratio < 1.0 - cfg.clip_low) | (ratio > 1.0 + cfg.clip_high)).float()
                        m = mask.float()
                        task = sample_task[idx]
                        for key, x in (("clip_fraction", clipped), ("ratio_abs_dev", (ratio - 1.0).abs()),
                                       ("approx_kl", (ratio - 1.0) - torch.log(ratio))):
                            per_row, w = diag.row_means(x, m)
                            tally.add(key, per_row, w, task)
                count += 1
                if cfg.target_kl is not None and st.approx_kl.item() > 1.5 * cfg.target_kl:
                    stop = True
                    break
            if train_actor and epoch_kl:
                self._adapt_lr(sum(epoch_kl) / len(epoch_kl))
            if stop:
                break
        stats = {k: float(v) / max(count, 1) for k, v in sums.items()}
        stats.update(maxes)
        stats.update(extra)
        if tally is not None:
            stats.update(tally.means())
        stats["lr"] = self.optimizer.param_groups[0]["lr"]
        stats["minibatch_updates"] = float(count)
        stats["samples"] = float(n)
        self.iteration += 1
        return stats

    def _evaluate(self, obs: dict[str, Any], replay: dict[str, torch.Tensor], policy: Any = None) -> Any:
        """(policy or self.policy).evaluate under the learner's autocast; log-probs, entropy and
        values in float32."""
        with autocast(self.device, self.bf16):
            ev = (self.policy if policy is None else policy).evaluate(obs, replay)
        return dataclasses.replace(
            ev, log_prob=ev.log_prob.float(), entropy=ev.entropy.float(),
            value=None if ev.value is None else ev.value.float(),
            log_prob_parts=None if ev.log_prob_parts is None else ev.log_prob_parts.float())

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
        return {"optimizer": self.optimizer.state_dict(), "iteration": self.iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.iteration = state.get("iteration", 0)


class PPOLearner(PolicyGradientLearner):
    """PPO: chunk-level GAE from the critic; the first `critic_warmup_iters` updates train
    the value head only. With ppo.normalize_rewards the rewards are scaled by ReturnScaler
    before GAE; the critic then learns returns of the scaled rewards."""

    def __init__(self, policy: Any, cfg: PPOConfig):
        super().__init__(policy, cfg)
        self.reward_scaler = ReturnScaler(cfg.gamma) if cfg.normalize_rewards else None

    def update(self, traj: Trajectory) -> dict[str, float]:
        cfg = self.cfg
        if self.reward_scaler is not None:
            if cfg.reward_level == "action":
                scaled = self.reward_scaler(traj.rewards, traj.valid, traj.dones)
            else:
                chunk = traj.chunk_rewards[..., None]  # [T, B, 1]
                scaled = self.reward_scaler(chunk, torch.ones_like(chunk, dtype=torch.bool), traj.dones)
                # the chunk's scaled reward as its first substep's, so that chunk_rewards sums to it
                scaled = torch.cat([scaled, torch.zeros_like(traj.rewards[..., 1:])], dim=-1)
            traj = dataclasses.replace(traj, rewards=scaled)
        if cfg.reward_level == "action":
            values = traj.values if traj.values.dim() == 3 else traj.values[..., None]  # [T, B, n]
            n = values.shape[2]
            if n != traj.rewards.shape[2]:
                raise ValueError(f"ppo.reward_level=action: the critic gives {n} value(s) per step for chunks "
                                 f"of {traj.rewards.shape[2]} actions; build the policy with a per-action critic")
            advantages, returns = action_level_gae(traj.rewards, values, traj.valid, traj.dones, traj.last_value,
                                                   cfg.gamma, cfg.gae_lambda, traj.bootstrap)  # [T, B, n]
            sel = traj.valid
        else:
            if traj.values.dim() == 3:
                raise ValueError("ppo.reward_level=chunk: the policy's critic gives one value per action; "
                                 "set ppo.reward_level=action, or a fresh one-value critic with policy.critic_obs")
            advantages, returns = gae(traj.chunk_rewards, traj.values, traj.dones, traj.last_value,
                                      cfg.gamma, cfg.gae_lambda, traj.bootstrap)  # [T, B]
            values, sel = traj.values, torch.ones_like(traj.values, dtype=torch.bool)
        warmup = self.iteration < cfg.critic_warmup_iters
        signal = diag.rollout_signal(traj.success, advantages, sel, traj.tasks)
        normalize = None
        if cfg.per_task_advantages:  # each task's advantages to mean 0, std 1 over the rollout
            advantages = per_task(advantages, sel, traj.tasks, centre=True)
            normalize = False
        stats = self.optimize(traj, advantages, returns, train_actor=not warmup, normalize=normalize)
        stats.update(signal)
        stats["explained_variance"] = explained_variance(values[sel], returns[sel])
        stats["advantage_mean"] = float(advantages.mean())
        stats["critic_warmup"] = float(warmup)
        if self.reward_scaler is not None:
            rs = self.reward_scaler
            stats["reward_scale"] = float(1.0 / torch.sqrt(rs.stats.var[0] + rs.eps))
        return stats

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.reward_scaler is not None and "reward_scaler" in state:
            self.reward_scaler.load_state_dict(state["reward_scaler"])


class GRPOLearner(PolicyGradientLearner):
    """GRPO: one episode per env, envs grouped by reset seed (traj.group_ids); every step of
    an episode gets its group-normalised return as advantage; all-success / all-fail groups
    (outside filter_low < rate < filter_high) are dropped unless filter_groups is off; no
    critic; a KL term to the reference policy only with ppo.kl_ref_coef > 0.

    Each episode weighs the same in the loss (its steps get weight 1 / its length, GRPO's
    per-sequence mean): with equal step weights, long failed episodes (time-outs) would
    outweigh short successful ones and push down the likelihood of ordinary actions. For the
    same reason the advantages are not normalised again per minibatch (ppo.normalize_advantages
    does not apply): a mean over steps is dominated by the long failed episodes, and
    subtracting it would give each group a positive episode-weighted sum, raising the
    likelihood of every sampled action and collapsing the exploration noise."""

    def __init__(self, policy: Any, cfg: PPOConfig, grpo: GRPOConfig):
        super().__init__(policy, cfg)
        self.grpo = grpo

    def update(self, traj: Trajectory) -> dict[str, float]:
        if traj.group_ids is None or traj.episode_mask is None:
            raise ValueError("GRPO needs a trajectory of grouped episodes (embodied.rl.episodes.GroupCollector)")
        g = self.grpo
        mask = traj.episode_mask  # [T, B] steps of each env's episode
        success = (traj.success & mask).any(0)  # [B]
        ret = success.float() if g.reward == "success" else (traj.chunk_rewards * mask).sum(0)
        adv = grpo_advantages(ret, traj.group_ids, normalize_std=g.normalize_std)  # [B]
        keep = (grpo_keep_mask(success, traj.group_ids, g.filter_low, g.filter_high)
                if g.filter_groups or g.dynamic_sampling else torch.ones_like(success))  # [B]
        signal = diag.group_signal(success, adv * keep, traj.group_ids, traj.tasks)  # before per-task scaling
        if self.cfg.per_task_advantages:  # each task's kept advantages to RMS 1 (already centred per group)
            adv = per_task(adv, keep, traj.tasks, centre=False)
        step_mask = mask & keep[None, :]
        weights = mask.float() / mask.sum(0, keepdim=True).clamp(min=1)  # [T, B], 1 per episode
        stats = {"kept_groups": float(keep.float().sum() / traj.group_ids.bincount().max()),
                 "group_success": float(success.float().mean()), "episode_return": float(ret.mean()), **signal}
        if step_mask.any():
            stats.update(self.optimize(traj, adv[None, :].expand_as(mask), None, step_mask,
                                       step_weights=weights, normalize=False))
        else:
            self.iteration += 1
        return stats
