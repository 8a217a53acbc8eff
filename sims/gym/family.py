"""The gymnasium family: "gym:<env id>" (any registered gymnasium env, with its preset mapping
if sims/gym/mapping.py has one) or "gym:<file>.yaml" (a mapping file), docs/gym.md."""

from __future__ import annotations

from typing import Any

from sims.family import Family, register_family


def _make(task: str, num_envs: int, mapping: dict | None = None, **kwargs: Any) -> Any:
    """In this process (sims/gym/env.py), or in a side venv's workers when the mapping names
    an interpreter (sims/gym/side.py)."""
    from sims.gym.mapping import load_mapping

    m = load_mapping(task, mapping)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if m.python:
        from sims.gym.side import GymSideVecEnv

        return GymSideVecEnv(task, num_envs, m, **kwargs)
    from sims.gym.env import GymVecEnv

    return GymVecEnv(task, num_envs, m, **kwargs)


def _expert(task: str) -> Any:
    """A preset's scripted expert (sims/gym/experts.py), reading the mapping's privileged columns."""
    import gymnasium as gym

    from sims.gym.experts import expert_for
    from sims.gym.mapping import columns, load_mapping

    m = load_mapping(task)
    width = int(gym.spaces.flatdim(gym.make(m.env_id).observation_space)) if m.env_id in gym.registry else 0
    return expert_for(m, columns(m, width)[1])


def _names() -> list[str]:
    from sims.gym.mapping import PRESETS

    return [f"gym:{k}" for k in PRESETS] + ["gym:<any gymnasium env id>", "gym:<mapping>.yaml"]


def _versions() -> dict[str, str]:
    from importlib import metadata

    return {"gymnasium": metadata.version("gymnasium")}


register_family(Family(
    name="gym", prefix="gym:", make=_make, pattern="gym:<gymnasium env id>", title="gymnasium envs",
    doc="docs/gym.md", expert=_expert, names=_names, cameras=("render",), default_cameras=("render",), versions=_versions))
