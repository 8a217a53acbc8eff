"""Checks of the arguments every batched env takes (num_envs, a choice, an image size, the
cameras it renders, the camera of `render`), each a one-line EnvError naming the field and
what is allowed."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from sims.vecenv import EnvError


def check_choice(field: str, value: Any, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise EnvError(f"{field}: unknown value {value!r}; allowed: {', '.join(allowed)}")


def check_num_envs(num_envs: Any) -> int:
    """num_envs -> B, a positive int."""
    if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise EnvError(f"num_envs: expected a positive int, got {num_envs!r}")
    return int(num_envs)


def parse_size(field: str, value: Any) -> tuple[int, int]:
    """An int or (H, W) -> (H, W), each in [8, 1024]."""
    if isinstance(value, (int, np.integer)):
        value = (value, value)
    try:
        h, w = (int(v) for v in value)
    except (TypeError, ValueError):
        raise EnvError(f"{field}: expected (H, W), got {value!r}") from None
    if not (8 <= h <= 1024 and 8 <= w <= 1024):
        raise EnvError(f"{field}: H and W must be in [8, 1024], got {(h, w)}")
    return h, w


def check_common(num_envs: Any, obs_mode: str, cameras: Sequence[str], available: Sequence[str], owner: str,
                 missing: str) -> tuple[int, tuple[str, ...]]:
    """(B, the cameras rendered) from num_envs, obs_mode ("state" or "rgb") and the cameras asked
    for, each one of `available` (`owner` names who has them); with "rgb" at least one, else
    the message says it `missing` (e.g. "at least one of: front, wrist")."""
    check_choice("obs_mode", obs_mode, ("state", "rgb"))
    B = check_num_envs(num_envs)
    cams = tuple(cameras) if obs_mode == "rgb" else ()
    for cam in cams:
        if cam not in available:
            raise EnvError(f"cameras: unknown camera {cam!r}; {owner} has: {', '.join(available) or 'none'}")
    if obs_mode == "rgb" and not cams:
        raise EnvError(f"cameras: obs_mode='rgb' needs {missing}")
    return B, cams


def render_camera(camera: str | None, cameras: Sequence[str], what: str) -> str:
    """The camera render() draws: `camera`, default the first of the env's `cameras` (those it
    renders; none: `what` names the env in the message)."""
    if not cameras:
        raise EnvError(f"render: this {what} env has no cameras; make it with obs_mode='rgb'")
    cam = camera or cameras[0]
    if cam not in cameras:
        raise EnvError(f"camera: {cam!r} is not rendered by this env; allowed: {', '.join(cameras)}")
    return cam
