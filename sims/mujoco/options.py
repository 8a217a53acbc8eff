"""The options both MuJoCo backends take (MujocoVecEnv in env.py, WarpVecEnv in warp_env.py):
observation and reward modes, cameras, and the physics substeps of one control step."""

from __future__ import annotations

from typing import Any, Sequence

from sims.env_args import check_choice, check_num_envs, parse_size
from sims.vecenv import EnvError

__all__ = ["CAMERAS", "OBS_MODES", "REWARD_MODES", "SUCCESS_BONUS", "check_choice", "check_options", "parse_size"]

OBS_MODES = ("state", "rgb")
REWARD_MODES = ("dense", "sparse", "staged")
SUCCESS_BONUS = 1.0
CAMERAS = ("front", "wrist")


def check_options(num_envs: Any, obs_mode: str, reward_mode: str, cameras: Sequence[str],
                  control_hz: float, timestep: float) -> int:
    """The number of physics steps per control step, 1 / (control_hz * timestep), which must be a
    positive integer; one-line EnvError on any bad argument."""
    check_choice("obs_mode", obs_mode, OBS_MODES)
    check_choice("reward_mode", reward_mode, REWARD_MODES)
    for cam in cameras:
        check_choice("cameras", cam, CAMERAS)
    check_num_envs(num_envs)
    substeps = round(1.0 / (control_hz * timestep)) if control_hz > 0 and timestep > 0 else 0
    if substeps < 1 or abs(substeps * timestep * control_hz - 1.0) > 1e-6:
        raise EnvError(f"control_hz/timestep: 1/(control_hz*timestep) must be a positive "
                       f"integer, got control_hz={control_hz}, timestep={timestep}")
    return int(substeps)
