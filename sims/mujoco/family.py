"""The MuJoCo tasks' family: every name without a registered prefix ("PushCube", "Compose"),
one task class per file in sims/mujoco/tasks/ (docs/tasks.md)."""

from __future__ import annotations

from typing import Any

from sims.family import Family, register_family


def _make(task: str, num_envs: int, backend: str = "cpu", **kwargs: Any) -> Any:
    """MujocoVecEnv (backend "cpu": C MuJoCo) or WarpVecEnv ("warp": MuJoCo Warp) of `task`."""
    from sims.mujoco.tasks.registry import task_class

    cls = task_class(task)
    if backend == "warp":
        from sims.mujoco.warp_env import WarpVecEnv

        return WarpVecEnv(cls(), num_envs, **kwargs)
    from sims.mujoco.env import MujocoVecEnv

    return MujocoVecEnv(cls(), num_envs, **kwargs)


def _expert(task: str) -> Any:
    from sims.mujoco.tasks.registry import task_class

    return task_class(task).expert


def _names() -> list[str]:
    from sims.mujoco.tasks.registry import task_names

    return task_names()


def _knobs(task: str = "") -> tuple[str, ...]:
    from sims.mujoco.randomization import KNOBS

    return tuple(KNOBS)


register_family(Family(
    name="mujoco", prefix="", make=_make, pattern="<MuJoCo task>", title="MuJoCo tasks", doc="docs/tasks.md",
    expert=_expert, names=_names, knobs=_knobs, backends=("cpu", "warp"), twin=True))
