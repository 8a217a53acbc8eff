"""ManiSkill3's family: "ms:<env id>[@<control mode>]" (the `maniskill` extra, docs/maniskill.md)."""

from __future__ import annotations

from typing import Any

from sims.family import Family, lazy, register_family

# sims.maniskill.tasks.names() without importing it (it imports torch); tests/test_cli_startup.py
# checks that they agree.
TASK_NAMES = ("ms:PickCube-v1", "ms:PushCube-v1", "ms:StackCube-v1", "ms:PullCube-v1", "ms:PegInsertionSide-v1")


def _expert(task: str) -> Any:
    """The scripted expert (pd_ee_delta_pose, A = 7); "@pd_joint_delta_pos": the mplib
    motion-planning expert (A = 8; sims/maniskill/mplib_expert.py)."""
    if task.partition("@")[2] == "pd_joint_delta_pos":
        from sims.maniskill.mplib_expert import expert_for

        return expert_for(task)
    from sims.maniskill.expert import expert_for

    return expert_for(task)


def _knobs(task: str = "") -> tuple[str, ...]:
    from sims.maniskill.randomization import SUPPORTED

    return tuple(SUPPORTED)


def _versions() -> dict[str, str]:
    from importlib import metadata

    return {name: metadata.version(name) for name in ("mani_skill", "sapien")}


def _device_kwargs(device: Any) -> dict:
    """physx_cuda on a CUDA device (observations never leave the GPU), physx_cpu otherwise."""
    return {"sim_backend": "physx_cuda" if device.type == "cuda" else "physx_cpu"}


register_family(Family(
    name="maniskill", prefix="ms:", make=lazy("sims.maniskill.env:ManiSkillVecEnv", drop_none=True), pattern="ms:<ManiSkill env id>", title="ManiSkill tasks",
    setup="the maniskill extra", doc="docs/maniskill.md", expert=_expert, names=lambda: list(TASK_NAMES), knobs=_knobs, versions=_versions,
    device_kwargs=_device_kwargs))
