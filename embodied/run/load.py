"""Loading what a run wrote, for every command that replays or continues it: a checkpoint's
config (`config_from_checkpoint`, `resume_config` for `embodied train --resume`), and its
policy with the config to replay it under (`load_trained`: checkpoints, run directories and
bare policy directories). Imports no learner room: eval/, data/ and deploy/ load through it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embodied.config import ConfigError, ExperimentConfig, config_from_dict
from embodied.run.checkpoint import (CheckpointError, load_checkpoint, newer_checkpoints, policy_dir, resolve_checkpoint,
                                     resume_point, run_dir_of)
from policies.configs import POLICY_CONFIGS


def config_from_checkpoint(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """The config a checkpoint was trained with, with key=value overrides applied."""
    _, meta, _ = load_checkpoint(path)
    return config_from_dict(meta["config"], overrides, saved=True)


def load_trained(path: str | Path, overrides: list[str] = ()) -> tuple[Path, ExperimentConfig, Any]:
    """(checkpoint dir, its config with overrides, its policy in eval mode) of what `embodied eval`,
    `serve`, `sim2real` and `collect --policy` replay: a checkpoint, a checkpoints/ folder or a run
    directory of `embodied train`, or a policy directory (`embodied sft`'s final or its run
    directory, a checkpoint's policy/), whose config is `policy_config`'s. The policy's record
    (what it was trained on) falls back to the config's task for checkpoints written before
    records existed, and gains the simulator task behind a world model's name for those written
    before records held the env spec."""
    from policies.base import Policy

    try:
        ckpt = resolve_checkpoint(path)
    except CheckpointError:
        bare = policy_dir(path)
        if bare is None:
            raise CheckpointError(f"checkpoint not found: {path} (expected a checkpoint, checkpoints/, "
                                  "checkpoints/latest or run directory of `embodied train`, or a policy directory: "
                                  "`embodied sft`'s final)") from None
        policy = Policy.from_pretrained(bare)
        policy.eval()
        _with_sim_task(policy)
        return bare, policy_config(bare, policy, overrides), policy
    _, meta, _ = load_checkpoint(ckpt)
    cfg = config_from_dict(meta["config"], overrides, saved=True)
    policy = Policy.from_pretrained(ckpt / "policy")
    policy.eval()
    if not policy.record:
        policy.record = {"task": meta["config"]["env"]["task"]}
    _with_sim_task(policy)
    return ckpt, cfg, policy


def _with_sim_task(policy: Any) -> None:
    """A record written before records held the env spec names its env only (wm:DIR for a
    policy trained in a world model): add the simulator task behind it, from the task's family
    (sims.registry.sim_task), for policies.base.check_fits."""
    rec = policy.record
    if rec and rec.get("task") and not rec.get("env_spec") and not rec.get("sim_task"):
        from sims.registry import sim_task

        behind = sim_task(rec["task"])
        if behind != rec["task"]:
            policy.record = {**rec, "sim_task": behind}


def policy_config(path: Path, policy: Any, overrides: list[str] = ()) -> ExperimentConfig:
    """The config under which a bare policy directory is replayed: the defaults, with the env its
    record names (task, observation mode, the cameras of its rgb_<camera> keys, else a VLA's
    configured cameras) and the image size of its vision tower, then `overrides`; the task's own
    time limit, as `embodied sft` evaluates. CheckpointError (one line) if it records no task and
    no env.task= is given."""
    rec = policy.record or {}
    if not rec.get("task") and not any(o.strip().startswith("env.task=") for o in overrides):
        raise CheckpointError(f"{path / 'config.json'}: records no task the policy was trained on (`embodied sft` "
                              "records it); allowed: env.task=TASK after the path (embodied eval)")
    env: dict[str, Any] = {k: rec[k] for k in ("task", "obs_mode") if rec.get(k)}
    cams = [k[len("rgb_"):] for k in rec.get("obs_keys") or [] if k.startswith("rgb_")]
    cams = cams or list(getattr(policy.config, "cameras", None) or [])  # a VLA's own cameras
    if cams:
        env["cameras"] = cams
        env.setdefault("obs_mode", "rgb")
    vision = getattr(policy.config, "vision", None)
    if isinstance(vision, dict) and vision.get("image_size"):
        env["image_size"] = int(vision["image_size"])
    named = policy.name in POLICY_CONFIGS
    raw = {"env": env, "policy": {"name": policy.name, "init_from": str(path)} if named else {}}
    return config_from_dict(raw, overrides)


def resume_config(path: str | Path, overrides: list[str] = ()) -> tuple[ExperimentConfig, Path]:
    """(config, checkpoint) of `embodied train --resume PATH key=value...`. The run continues in
    the run directory PATH names (a copied run resumes in place), not the one its config
    records; `train.run_dir=NEW` continues it in a new run. ConfigError if continuing an older
    checkpoint in its own run would leave later checkpoints behind `latest`."""
    ckpt = resume_point(path)
    _, meta, _ = load_checkpoint(ckpt)
    cfg = config_from_dict(meta["config"], overrides, saved=True)
    if cfg.env.task != meta["config"]["env"]["task"]:
        raise ConfigError(f"env.task: {cfg.env.task}, but the run resumed from {ckpt} trains on "
                          f"{meta['config']['env']['task']}; allowed: {meta['config']['env']['task']} (another task is a "
                          f"new run: policy.init_from={ckpt / 'policy'})")
    own = run_dir_of(ckpt)
    if not any(o.strip().startswith("train.run_dir=") for o in overrides):
        if own is None:
            raise ConfigError(f"--resume: {path} is a checkpoint outside a run directory (RUN/checkpoints/NAME); "
                              "name the run to continue it in: train.run_dir=DIR")
        cfg.train.run_dir = str(own)
    named = Path(path)
    picked = not ((named / "latest").is_file() or (named / "checkpoints" / "latest").is_file())
    if picked and own is not None and Path(cfg.train.run_dir).resolve() == own.resolve():
        later = newer_checkpoints(ckpt)
        if later:
            raise ConfigError(f"--resume: {ckpt.name} is older than {', '.join(later)} of {own}; continuing it there "
                              f"would overwrite them and move `latest` back; allowed: --resume {own} (its newest "
                              f"checkpoint), or train.run_dir=NEW_DIR to branch a new run from {ckpt.name}")
    return cfg, ckpt
