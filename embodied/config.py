"""Typed experiment configs: YAML files loaded into dataclasses, dotted overrides.

A config file is a nested mapping whose sections match `ExperimentConfig`'s
fields. `load_config(path, ["ppo.lr=1e-3", "env.num_envs=64"])` returns a fully
typed, validated `ExperimentConfig` (read and typed by embodied/config_loader.py, the
loader every command shares). Any unknown key or badly typed value raises
`ConfigError` with one line naming the key and what is allowed; nothing is
rewritten after loading.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from embodied.config_loader import ConfigError, apply_overrides, from_dict, load_mapping
from policies.configs import PolicyConfig, VLAPolicyConfig, every_policy_key, policy_config_class

__all__ = ["ConfigError", "ExperimentConfig", "PolicyConfig", "load_config", "config_from_dict", "saved_config",
           "to_dict"]


@dataclass
class EnvConfig:
    task: str = "PushCube"
    num_envs: int = 128
    obs_mode: Literal["state", "rgb"] = "state"
    reward_mode: Literal["dense", "staged", "sparse", "task"] = "dense"  # task: world models (docs/world_model.md)
    rollout: Literal["mean", "members"] = "mean"  # world models: how the ensemble steps (docs/world_model.md)
    model_noise: float = 0.0  # world models: noise per step, in units of the model's one-step error std
    allow_failed_model: bool = False  # world models: use one whose quality gate failed (its report.json)
    image_size: int = 64
    cameras: list[str] = field(default_factory=lambda: ["front"])  # rgb_<camera> keys with obs_mode rgb
    num_threads: int = 0  # physics threads; 0 = all cores
    max_episode_steps: int | None = None  # the time limit; null = the task's (MetaWorld's: 500)
    # domain randomisation {knob: [low, high]} drawn per env at each reset (docs/sim2real.md)
    randomization: dict[str, Any] | None = None
    reality: str | None = None  # a reality preset: name in configs/reality/ or a path
    # MuJoCo tasks: cpu (C MuJoCo on a thread pool) or warp (MuJoCo Warp on train.device; docs/tasks.md)
    backend: Literal["cpu", "warp"] = "cpu"


@dataclass
class PPOConfig:
    rollout_steps: int = 32  # T: env steps per env per iteration
    epochs: int = 5
    minibatches: int = 4
    lr: float = 3e-4
    critic_lr: float = 3e-4  # the value head's own learning rate
    lr_schedule: Literal["constant", "adaptive"] = "adaptive"
    desired_kl: float = 0.01  # for the adaptive schedule
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    value_clip: float | None = 0.2
    value_loss: Literal["huber", "mse"] = "huber"
    huber_delta: float = 10.0
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    # beta of a KL penalty to the reference policy, the one the run started from (policy.init_from,
    # e.g. the SFT policy): beta * k3(log-probs of the sampled actions under both) at logprob_level;
    # 0: no reference is kept. GRPO's KL term (DeepSeekMath); docs/rl.md
    kl_ref_coef: float = 0.0
    max_grad_norm: float = 1.0
    target_kl: float | None = None  # stop the update epochs early above this
    normalize_advantages: bool = True
    normalize_rewards: bool = False  # scale rewards by the running std of the discounted return (PPO)
    logprob_level: Literal["chunk", "action", "token"] = "chunk"  # granularity of the ratio
    reward_level: Literal["chunk", "action"] = "chunk"  # GAE per chunk, or per executed action
    critic_warmup_iters: int = 0  # first iterations update the value head only
    # old log-probs from the learner's own forward, not the rollout's; None: true exactly when
    # train.max_staleness >= 1 (a stale behaviour policy learned less: docs/distributed.md)
    recompute_log_probs: bool | None = None
    # the optimiser's state (policies/optim.py): adam (float32 moments), adam_fused (the same, one kernel),
    # adam_8bit (bitsandbytes' 8-bit moments, about 2 bytes per trained parameter instead of 8)
    optimizer: Literal["adam", "adam_fused", "adam_8bit"] = "adam"
    # keep the reference (the policy the run started from) to log KL(pi || pi_ref) of every update
    # (train/kl_ref_rollout) even without a penalty; false: no copy, no extra forward; null (auto):
    # on for policies of at most 100M parameters, whose copy is cheap (docs/rl.md)
    track_ref_kl: bool | None = None
    # advantages normalised within each task of a multi-task batch (mean 0, std 1 per task; GRPO:
    # the group-relative ones divided by their task's std) in place of the per-minibatch normalisation
    per_task_advantages: bool = False
    # demonstrations kept in the update: + bc_coef * the policy's imitation loss on a batch of
    # bc_batch_size items of bc_dataset (an `embodied collect` dataset) in every minibatch
    bc_coef: float = 0.0
    bc_dataset: str | None = None
    bc_batch_size: int = 32


@dataclass
class GRPOConfig:
    """GRPO: groups of envs reset with one seed; the ppo section's clip / epochs / lr apply."""

    group_size: int = 8  # G envs per group; env.num_envs must be a multiple
    reward: Literal["success", "return"] = "success"  # binary success or the shaped episode return
    filter_low: float = 0.0  # keep groups whose success rate r has low < r < high
    filter_high: float = 1.0
    filter_groups: bool = True  # False: keep every group (with reward=return, all-fail groups
    #                             still rank their members by how far they got)
    normalize_std: bool = True  # A = (R - mean) / (std + eps), else R - mean
    # dynamic sampling (DAPO, SimpleVLA-RL): groups whose members all succeed or all fail are dropped
    # and more groups are collected until the kept ones fill one batch (num_envs / group_size
    # groups) or max_collects collections were made; implies the filter (filter_low / filter_high)
    dynamic_sampling: bool = False
    max_collects: int = 4


@dataclass
class TrainConfig:
    algorithm: str = "ppo"  # a name in embodied/rl/registry.py: ppo, grpo (checked there: add_check)
    seed: int = 0
    total_steps: int = 1_000_000  # env steps, summed over envs
    run_dir: str = "runs/default"
    eval_every: int = 10  # iterations; 0 disables periodic evaluation
    eval_episodes: int = 64
    # false: evaluate the policy as it samples (the exploring policy RL optimises; its draws are
    # seeded, so an evaluation repeats exactly) instead of its deterministic act
    eval_deterministic: bool = True
    video_episodes: int = 2
    save_every: int = 10  # iterations
    torch_threads: int = 0  # 0 = leave torch's default
    progress: bool = True
    # where the policy, the rollout buffers and the learner live: auto (CUDA when present), cpu,
    # cuda or cuda:N (embodied/run/device.py); ManiSkill envs then run on physx_cuda / physx_cpu
    device: str = "auto"
    # Roles (docs/distributed.md): null/null keeps the single-process loop of embodied/rl/train.py;
    # setting either runs env workers, rollout and learner as roles (backend null means local).
    backend: Literal["local", "ray"] | None = None
    placement: str | dict[str, Any] | None = None  # a preset name, or {preset, env, rollout, learner, stages, address}
    max_staleness: int = 0  # roles only: k collects up to k batches ahead while the learner updates
    # roles on Ray only: a learner whose process died is restarted in the run up to this many times, the run
    # rolled back to its last checkpoint (0: it ends the run; backend local: a learner's error is an exception)
    learner_restarts: int = 3


@dataclass
class ExperimentConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    # one class per policy, picked by policy.name (policies/configs.py): only that policy's keys
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


def load_config(path: str | Path | None, overrides: list[str] = ()) -> ExperimentConfig:
    """Read a YAML file (or the defaults when path is None), apply key=value overrides
    (embodied/config_loader.py)."""
    return config_from_dict(load_mapping(path, overrides))


def config_from_dict(raw: dict[str, Any], overrides: list[str] = (), saved: bool = False) -> ExperimentConfig:
    """Validate a nested mapping plus overrides. saved: raw is a config a checkpoint saved
    (meta.json; saved_config), read as it was trained."""
    if saved:
        raw = saved_config(raw)
    cfg = from_dict(ExperimentConfig, apply_overrides(raw, overrides))
    from embodied.run.device import DeviceError, check_device  # late: it imports torch

    try:
        check_device(cfg.train.device)
    except DeviceError as e:
        raise ConfigError(str(e)) from None
    _check_across_sections(cfg)
    if cfg.env.max_episode_steps is not None and cfg.env.max_episode_steps < 1:
        raise ConfigError(f"env.max_episode_steps: {cfg.env.max_episode_steps}; allowed: an integer >= 1, or null "
                          "(the task's own time limit)")
    _check_randomization(cfg.env)
    _check_roles(cfg)
    return cfg


def saved_config(raw: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's saved config as this version reads it. Checkpoints written before the
    per-policy sections (policies/configs.py) hold every policy's keys in `policy`; the keys its
    policy's class has not were never read, and are dropped. Other keys are left to the loader."""
    pol = raw.get("policy")
    if not isinstance(pol, dict):
        return raw
    try:
        cls = policy_config_class(pol.get("name", "mlp"))
    except ValueError:
        return raw  # the loader names the bad name
    own = {f.name for f in dataclasses.fields(cls)}
    foreign = every_policy_key() - own
    return {**raw, "policy": {k: v for k, v in pol.items() if k not in foreign}}


def with_stale_defaults(cfg: ExperimentConfig, max_staleness: int) -> ExperimentConfig:
    """cfg with ppo.recompute_log_probs None (unset) resolved: true exactly when the rollout runs
    max_staleness >= 1 versions behind (a stale behaviour policy learned less; docs/distributed.md)."""
    if cfg.ppo.recompute_log_probs is not None:
        return cfg
    return dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, recompute_log_probs=max_staleness > 0))


def _check_roles(cfg: ExperimentConfig) -> None:
    """train.backend / train.placement: what can be checked without this machine or a cluster
    (preset, fields, counts, stages, staleness); resources and the address are checked when
    training starts (embodied/distributed/trainer.py). One-line ConfigError."""
    n = cfg.train.learner_restarts
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(f"train.learner_restarts: {n!r}; allowed: an integer >= 0 (0: a dead learner ends the run)")
    k = cfg.train.max_staleness
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ConfigError(f"train.max_staleness: {k!r}; allowed: an integer >= 0 (0: synchronous; k: collect up "
                          f"to k batches ahead during the update)")
    if cfg.train.backend is None and cfg.train.placement is None:
        if k:
            raise ConfigError(f"train.max_staleness: {k} runs over roles; set train.backend or train.placement "
                              "(the single-process loop is synchronous)")
        return
    from embodied.distributed.placement import PlacementError, placement_from_dict

    raw = cfg.train.placement
    try:
        place = placement_from_dict({"preset": raw} if isinstance(raw, str) else raw)
    except PlacementError as e:
        raise ConfigError(f"train.{e}") from None
    if place.env.count > cfg.env.num_envs:
        raise ConfigError(f"train.placement.env.count: {place.env.count} env workers for env.num_envs="
                          f"{cfg.env.num_envs}; allowed: at most env.num_envs")
    if place.address is not None and (cfg.train.backend or "local") == "local":
        raise ConfigError(f"train.placement.address: {place.address!r} joins a Ray cluster; set train.backend=ray "
                          f"or leave the address null")
    if place.learner.count > 1 and (cfg.train.backend or "local") == "local":
        raise ConfigError(f"train.placement.learner.count: {place.learner.count} with backend local; allowed: 1 "
                          f"(data-parallel learners run as processes: train.backend=ray)")


def _check_randomization(env: EnvConfig) -> None:
    """env.randomization / env.reality: the knobs of sims/mujoco/randomization.py; one-line ConfigError."""
    if env.randomization is None and env.reality is None:
        return
    from sims.mujoco.randomization import RandomizationError, load_preset, parse

    try:
        if env.randomization is not None and env.reality is not None:
            raise RandomizationError("env.reality: give a reality preset or env.randomization, not both")
        if env.reality is not None:
            load_preset(env.reality)
        else:
            parse(env.randomization, "env.randomization")
    except RandomizationError as e:
        raise ConfigError(str(e)) from None


CHECKS: list[Callable[[ExperimentConfig], None]] = []
"""More checks of every config loaded, added by the room that owns what they check: the algorithm
table (embodied/rl/registry.py, imported with any module of embodied.rl) adds train.algorithm's
name and its entry's settings check. So this module imports no learner room, and a command that
only replays a checkpoint (eval, serve, collect) does not check training settings."""


def add_check(check: Callable[[ExperimentConfig], None]) -> Callable[[ExperimentConfig], None]:
    """Run `check(cfg)` (ConfigError on one line) on every config loaded from now on."""
    if check not in CHECKS:
        CHECKS.append(check)
    return check


def _check_across_sections(cfg: ExperimentConfig) -> None:
    """Constraints that tie two sections together; one-line ConfigError."""
    for check in CHECKS:
        check(cfg)
    if cfg.ppo.kl_ref_coef < 0 or (cfg.ppo.kl_ref_coef > 0 and not cfg.policy.init_from):
        raise ConfigError(f"ppo.kl_ref_coef: {cfg.ppo.kl_ref_coef}; allowed: 0, or > 0 with policy.init_from set "
                          "(the reference policy the penalty keeps RL near)")
    if cfg.ppo.reward_level == "action" and isinstance(cfg.policy, VLAPolicyConfig) and cfg.policy.critic_obs is None:
        raise ConfigError("policy.critic_obs: ppo.reward_level=action needs a fresh per-action value head; "
                          "set critic_obs to prefix or privileged")


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
