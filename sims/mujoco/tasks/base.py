"""Task hooks, ManiSkill style, and the observation layout shared by all tasks.

A task says what is on the table (`scene`), how an episode is randomised
(`sample_episode`), what the language instruction is, when it succeeds or fails
(`evaluate`) and how far along an episode is (`progress`, a staged ManiSkill-like score in
[0, 1]). The env does the rest. Every hook is vectorised over envs: arrays have leading dim n
(the envs concerned).

The hooks that run at every step (`evaluate`, `progress`, `privileged`) are written against the
array API (`array_api_compat`): they run on numpy arrays under the C backend and on torch tensors
on the env's device under MuJoCo Warp (sims/mujoco/warp_env.py), so one task file serves both.
`sample_episode`, `instruction` and `expert` stay numpy (host side, seeded per env).

Rewards made from progress P and success (reward_mode):
  "dense":  P(s_t+1) - P(s_t) + 1[success]  (potential-based shaping plus a success bonus: a
            policy gains nothing by hovering short of success, whatever its discount)
  "staged": P(s_t+1), or 1 on success (ManiSkill's normalised dense reward; with episodes that
            end on success and a discount near 1 it pays to hover just short of success)
  "sparse": 1[success]

Observation layout (float32):
  state [9]:       tcp xyz, tcp velocity xyz, finger gap, gap velocity, gripper command
  privileged:      state, then the task's extras (see `CUBE_EXTRAS`, `REACH_EXTRAS`)
"""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np
from array_api_compat import array_namespace
from array_api_compat import device as array_device

from sims.mujoco.handles import SimView
from sims.mujoco.scene import (
    COLOR_NAMES,
    CUBE_HALF,
    TABLE_HALF,
    SceneOptions,
)

# Named column ranges of the privileged observation.
STATE_LAYOUT: dict[str, slice] = {
    "tcp": slice(0, 3),
    "tcp_vel": slice(3, 6),
    "gap": slice(6, 7),
    "gap_vel": slice(7, 8),
    "grip_cmd": slice(8, 9),
}
STATE_DIM = 9
CUBE_LAYOUT: dict[str, slice] = {
    **STATE_LAYOUT,
    "cube": slice(9, 12),
    "cube_quat": slice(12, 16),
    "cube_vel": slice(16, 19),
    "cube_angvel": slice(19, 22),
    "goal": slice(22, 25),  # where the cube centre should go
    "cube_minus_tcp": slice(25, 28),
    "goal_minus_cube": slice(28, 31),
    "grasped": slice(31, 32),
}
CUBE_PRIV_DIM = 32
REACH_LAYOUT: dict[str, slice] = {
    **STATE_LAYOUT,
    "goal": slice(9, 12),
    "goal_minus_tcp": slice(12, 15),
}
REACH_PRIV_DIM = 15
# fields that are the difference of two others (name -> (a, b): a - b); a state-space world model
# recomputes them from a and b after each step (sims/world_model/model.py, WorldModelConfig.consistent)
CUBE_DIFFERENCES = {"cube_minus_tcp": ("cube", "tcp"), "goal_minus_cube": ("goal", "cube")}
REACH_DIFFERENCES = {"goal_minus_tcp": ("goal", "tcp")}

Episode = dict[str, np.ndarray]  # per-env episode variables, leading dim n


def empty_like_rows(x, cols: int, dtype: str = "float32"):
    """An uninitialised [n, cols] array of the namespace and device of x ([n, ...])."""
    xp = array_namespace(x)
    return xp.empty((x.shape[0], cols), dtype=getattr(xp, dtype), device=array_device(x))


def falses(x):
    """bool [n] all False, of the namespace and device of x ([n, ...])."""
    xp = array_namespace(x)
    return xp.zeros(x.shape[0], dtype=xp.bool, device=array_device(x))


def norm(x, axis: int = 1):
    """Euclidean norm along axis of a numpy array or a torch tensor."""
    return array_namespace(x).linalg.vector_norm(x, axis=axis)


def copy(x):
    """A copy of x in its own namespace and on its device."""
    return array_namespace(x).asarray(x, copy=True)


def state_obs(s: SimView) -> np.ndarray:
    """float32 [n, 9] proprioception."""
    out = empty_like_rows(s.tcp, STATE_DIM)
    out[:, 0:3] = s.tcp
    out[:, 3:6] = s.tcp_vel
    out[:, 6] = s.gap
    out[:, 7] = s.gap_vel
    out[:, 8] = s.grip_cmd
    return out


def off_table(p: np.ndarray) -> np.ndarray:
    """bool [n]: a point [n, 3] is beyond the table's edge (the cube would fall)."""
    xp = array_namespace(p)
    return (xp.abs(p[:, 0]) > TABLE_HALF[0]) | (xp.abs(p[:, 1]) > TABLE_HALF[1])


def shaped(d: np.ndarray, scale: float = 10.0) -> np.ndarray:
    """Distance [n] (m) -> closeness reward in (0, 1]: 1 - tanh(scale * d)."""
    return 1.0 - array_namespace(d).tanh(scale * d)


def yaw_quat(yaw: np.ndarray) -> np.ndarray:
    """Yaw angles [n] -> quaternions [n, 4] (w, x, y, z)."""
    q = np.zeros((len(yaw), 4))
    q[:, 0] = np.cos(yaw / 2)
    q[:, 3] = np.sin(yaw / 2)
    return q


def two_colors(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two different palette indices per env: int64 [n] each."""
    a = rng.integers(0, len(COLOR_NAMES), n)
    b = (a + rng.integers(1, len(COLOR_NAMES), n)) % len(COLOR_NAMES)
    return a, b


def cube_privileged(s: SimView, goal: np.ndarray, grasped: np.ndarray) -> np.ndarray:
    """float32 [n, 32] privileged observation of a cube task; goal [n, 3] is the cube's goal."""
    xp = array_namespace(s.tcp)
    out = empty_like_rows(s.tcp, CUBE_PRIV_DIM)
    out[:, :STATE_DIM] = state_obs(s)
    quat = s.cube_quat * xp.where(s.cube_quat[:, :1] < 0, -1.0, 1.0)  # w >= 0
    out[:, 9:12] = s.cube
    out[:, 12:16] = quat
    out[:, 16:19] = s.cube_vel
    out[:, 19:22] = s.cube_angvel
    out[:, 22:25] = goal
    out[:, 25:28] = s.cube - s.tcp
    out[:, 28:31] = goal - s.cube
    out[:, 31] = xp.astype(grasped, out.dtype)
    return out


class Task(abc.ABC):
    """One manipulation task: scene contents, randomisation, success, reward, instruction."""

    name: ClassVar[str]
    max_episode_steps: ClassVar[int]
    privileged_dim: ClassVar[int]
    layout: ClassVar[dict[str, slice]]
    differences: ClassVar[dict[str, tuple[str, str]]] = {}  # fields of the layout that are a - b
    unit_quaternions: ClassVar[tuple[str, ...]] = ()  # fields of the layout that are unit quaternions
    scene: ClassVar[SceneOptions]

    @abc.abstractmethod
    def sample_episode(self, rng: np.random.Generator, n: int) -> Episode:
        """Randomise n episodes. Keys the env applies: "tcp" [n, 3] and "gap" [n] (gripper
        start), "cube_pos" [n, 3], "cube_quat" [n, 4], "target" [n, 3], "goal" [n, 3]; any
        other key (colours, ...) is kept per env for the task's own hooks."""

    @abc.abstractmethod
    def instruction(self, ep: Episode, i: int) -> str:
        """The instruction of row i of the episode variables."""

    @abc.abstractmethod
    def evaluate(self, s: SimView, ep: Episode) -> dict[str, np.ndarray]:
        """"success" and "fail" bool [n], plus float metrics [n] (reported in info)."""

    @abc.abstractmethod
    def progress(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        """float [n] staged progress in [0, 1] (a function of the current state only)."""

    @abc.abstractmethod
    def privileged(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        """float32 [n, privileged_dim]."""

    def label(self, ep: Episode, i: int) -> str:
        """The task label of row i (VecEnv.task_labels): the task's name, or the variant a suite
        drew for the episode."""
        return self.name

    @staticmethod
    @abc.abstractmethod
    def expert(priv: np.ndarray) -> np.ndarray:
        """Scripted policy: privileged obs float [n, P] -> actions float32 [n, 4] in [-1, 1]."""

