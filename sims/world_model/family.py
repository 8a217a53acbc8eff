"""The world models' family: "wm:<dir>", a model trained by `embodied world-model train`
(docs/world_model.md), stepped as an env."""

from __future__ import annotations

from typing import Any

from sims.family import Family, OwnKwarg, register_family

ALLOWED = ("obs_mode", "expected_task", "max_episode_steps", "seed", "keyframes", "reward_mode", "cameras",
           "image_size", "rollout", "model_noise", "allow_failed_model")


def _make(task: str, num_envs: int, **kwargs: Any) -> Any:
    """Of make_env's kwargs it takes ALLOWED; the others (physics settings) have no meaning here."""
    from sims.world_model.env import WorldModelVecEnv

    return WorldModelVecEnv(task.removeprefix("wm:"), num_envs,
                            **{k: v for k, v in kwargs.items() if k in ALLOWED and v is not None})


def _sim_task(task: str) -> str:
    """The task the world model at wm:<dir> learned (its config.json), or the name if unreadable."""
    import json
    from pathlib import Path

    try:
        return json.loads((Path(task.removeprefix("wm:")) / "config.json").read_text())["config"]["task"]
    except (OSError, ValueError, KeyError, TypeError):
        return task


register_family(Family(
    name="world_model", prefix="wm:", make=_make, pattern="wm:<world model dir>", title="world models",
    doc="docs/world_model.md", sim_task=_sim_task,
    own_kwargs=(OwnKwarg("rollout", "steps a world model's ensemble", "mean", "mean"),
                OwnKwarg("model_noise", "perturbs a world model's steps", 0.0, "0"),
                OwnKwarg("allow_failed_model", "uses a world model that failed its quality gate", False, "false"))))
