"""The ManiSkill3 tasks we support, their instruction templates and motion-planning solutions.

Names: our task name is "ms:" + the ManiSkill env id, e.g. "ms:PickCube-v1". A control mode
other than the default may follow after "@": "ms:PickCube-v1@pd_ee_delta_pos" (so that a
config's `env.task` can choose it); make_env's `control_mode=` does the same.

Only tasks whose assets ship with the mani-skill wheel are in the table; a ManiSkill task that
needs downloaded assets (YCB objects, PartNet-Mobility cabinets, ...) is refused at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sims.vecenv import EnvError

PREFIX = "ms:"
DEFAULT_CONTROL_MODE = "pd_ee_delta_pose"
# Panda control modes whose actions are normalised to [-1, 1] (our action contract).
CONTROL_MODES = ("pd_ee_delta_pose", "pd_ee_delta_pos", "pd_joint_delta_pos",
                 "pd_ee_target_delta_pose", "pd_ee_target_delta_pos", "pd_joint_target_delta_pos")


@dataclass(frozen=True)
class MsTask:
    env_id: str  # ManiSkill env id
    templates: tuple[str, ...]  # instructions; one is drawn per episode from its seed
    solution: str | None  # module in mani_skill.examples.motionplanning.panda.solutions


TASKS: dict[str, MsTask] = {t.env_id: t for t in (
    MsTask("PickCube-v1", (
        "pick up the red cube and move it to the green goal",
        "lift the red cube to the green sphere",
        "grasp the red cube and bring it to the green target point",
    ), "pick_cube"),
    MsTask("PushCube-v1", (
        "push the blue cube onto the red and white target",
        "slide the blue cube forward into the target circle",
        "push the blue cube to the red target",
    ), "push_cube"),
    MsTask("StackCube-v1", (
        "stack the red cube on top of the green cube",
        "put the red cube on the green cube",
        "place the red cube onto the green cube and let go",
    ), "stack_cube"),
    MsTask("PullCube-v1", (
        "pull the blue cube back onto the red and white target",
        "drag the blue cube toward the robot into the target circle",
        "pull the blue cube to the red target",
    ), "pull_cube"),
    MsTask("PegInsertionSide-v1", (
        "insert the orange peg sideways into the hole of the box",
        "push the peg into the hole on the side of the box",
        "put the orange peg into the box's side hole",
    ), "peg_insertion_side"),
)}


def parse_name(task: str) -> tuple[MsTask, str | None]:
    """"ms:<EnvId>[@<control_mode>]" -> (task entry, control mode or None); EnvError if unknown
    or if the task needs downloaded assets."""
    if not task.startswith(PREFIX):
        raise EnvError(f"task: {task!r} is not a ManiSkill task (names start with {PREFIX!r})")
    env_id, _, mode = task[len(PREFIX):].partition("@")
    if env_id not in TASKS:
        from mani_skill.utils.registration import REGISTERED_ENVS  # light: no SAPIEN scene

        spec = REGISTERED_ENVS.get(env_id)
        assets = list(getattr(spec, "asset_download_ids", None) or []) if spec else []
        if assets:
            raise EnvError(f"task: {task} needs downloaded ManiSkill assets ({', '.join(assets)}), "
                           f"which are not available offline; use one of {', '.join(names())}")
        what = "is not in our ManiSkill task table" if spec else "is unknown"
        raise EnvError(f"task: {task} {what}; allowed: {', '.join(names())}")
    return TASKS[env_id], (mode or None)


def check_control_mode(mode: str) -> str:
    if mode not in CONTROL_MODES:
        raise EnvError(f"control_mode: unknown or unsupported {mode!r}; allowed: {', '.join(CONTROL_MODES)}")
    return mode


def names() -> list[str]:
    return [PREFIX + k for k in TASKS]


def instruction(task: MsTask, seed: int) -> str:
    """The instruction of an episode reset with `seed` (equal seeds, equal instruction)."""
    k = np.random.default_rng([int(seed), 0x1A57]).integers(len(task.templates))
    return task.templates[int(k)]
