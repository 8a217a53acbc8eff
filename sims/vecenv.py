"""The VecEnv contract: batched environments with torch tensors.

Every simulator (MuJoCo, ManiSkill, a world model) and the ROS 2 robot bridge
sit behind this interface. Shapes use B for the number of envs, K for the chunk
length, A for the action width.

Observations are a dict:
  "state":       float32 [B, S]        proprioception (what a real robot knows)
  "privileged":  float32 [B, P]        full simulator state, for critics and
                                       state-based baselines (optional)
  "rgb_<cam>":   uint8   [B, H, W, 3]  one key per camera (optional)
  "instruction": list[str] of length B the language instruction of each env's
                                       current episode

Auto-reset, ManiSkill style: an env whose episode ends in `step` is reset inside
that call. `StepResult.obs` then already starts the new episode, while
`StepResult.final_obs` holds the last observation of the finished one, so that a
truncated episode can be bootstrapped with V(final observation). `info` always
describes the transition just taken (for a finished env: the last step of the
finished episode), and always holds `info["success"]`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import torch

Obs = dict[str, Any]  # tensors with leading dim B, plus "instruction": list[str]
Seed = Union[int, Sequence[int], None]


class EnvError(ValueError):
    """Bad input to an environment (wrong action shape, NaN action, unknown task)."""


@dataclass(frozen=True)
class EnvSpec:
    """Static description of a batched env: what a policy needs to be built."""

    task: str
    num_envs: int
    action_dim: int
    state_dim: int
    privileged_dim: int
    max_episode_steps: int
    control_hz: float
    cameras: tuple[str, ...] = ()
    image_size: tuple[int, int] = (64, 64)  # (H, W)
    action_low: float = -1.0
    action_high: float = 1.0
    # the simulator task behind `task` when the env stands in for one (a world model: the task it
    # learned); None: `task` itself. policies.base.check_fits compares tasks by it.
    sim_task: str | None = None


@dataclass
class StepResult:
    """Outcome of one batched step. All tensors have leading dim B."""

    obs: Obs  # next observation; a finished env's row starts its new episode
    reward: torch.Tensor  # float32 [B]
    terminated: torch.Tensor  # bool [B]: the task ended (success or failure)
    truncated: torch.Tensor  # bool [B]: the time limit ended the episode
    info: dict[str, torch.Tensor]  # "success": bool [B], plus task metrics
    # Observation of every row, where finished rows hold the last observation of
    # the finished episode; None when no env finished in this step.
    final_obs: Obs | None = None

    @property
    def done(self) -> torch.Tensor:
        return self.terminated | self.truncated


@dataclass
class ChunkStepResult:
    """Outcome of executing an action chunk [B, K, A].

    An env whose episode ends at substep k skips substeps k+1..K-1 of the chunk
    (`valid` is False there, rewards 0, flags False) and is reset; `obs` holds
    its new episode's first observation and `final_obs` the finished one's last.
    """

    obs: Obs
    reward: torch.Tensor  # float32 [B, K]
    terminated: torch.Tensor  # bool [B, K]
    truncated: torch.Tensor  # bool [B, K]
    info: dict[str, torch.Tensor]  # "success": bool [B, K]
    valid: torch.Tensor  # bool [B, K]: substep executed
    final_obs: Obs | None = None

    @property
    def done(self) -> torch.Tensor:
        """bool [B]: the env finished an episode somewhere inside the chunk."""
        return (self.terminated | self.truncated).any(dim=1)


class VecEnv(abc.ABC):
    """B environments stepped together; tensors on `self.device`."""

    spec: EnvSpec
    device: torch.device = torch.device("cpu")

    @property
    def num_envs(self) -> int:
        return self.spec.num_envs

    @abc.abstractmethod
    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        """Reset envs and return (obs of all B envs, info).

        seed: an int seeds the k-th reset env with seed + k; a sequence gives
          each reset env its own seed (equal seeds give equal initial states,
          whatever the env index: GRPO groups and evaluation rely on it); None
          draws from the env's own seeded stream.
        env_ids: int64 [n] envs to reset, or None for all.
        """

    @abc.abstractmethod
    def step(self, action: torch.Tensor) -> StepResult:
        """Apply float32 [B, A] actions in [action_low, action_high] (clipped)."""

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        """Execute a chunk float32 [B, K, A]; see ChunkStepResult."""
        raise NotImplementedError(f"{type(self).__name__} does not implement chunk_step")

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically (physics, counters, RNG)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be checkpointed")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot be checkpointed")

    def task_labels(self) -> list[str]:
        """The task of each env's current episode (B strings): per-task success in logs and
        evaluations. One task: its name; a multi-task env: each row's task (MetaWorld's MT10,
        sims/multitask.py); a suite whose episodes draw a variant (Compose): the variant."""
        return [self.spec.task] * self.num_envs

    @property
    def row_tasks(self) -> tuple[str, ...] | None:
        """The fixed task of each env row when rows hold different tasks for good (MT10's env i
        runs task i), so that GRPO groups only rows of one task; None when every row can run
        every task (a seed then decides the task, as in Compose)."""
        return None

    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        """uint8 [n, H, W, 3] frames of the given envs (for videos)."""
        raise NotImplementedError(f"{type(self).__name__} cannot render")

    def close(self) -> None:
        pass

    def __enter__(self) -> "VecEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_action(action: torch.Tensor, spec: EnvSpec, chunk: bool = False) -> None:
    """Raise EnvError (one line) for a wrong shape, dtype or a non-finite action."""
    want = (spec.num_envs, "K", spec.action_dim) if chunk else (spec.num_envs, spec.action_dim)
    if not isinstance(action, torch.Tensor):
        raise EnvError(f"action: expected a torch.Tensor of shape {want}, got {type(action).__name__}")
    ok = action.dim() == len(want) and action.shape[0] == spec.num_envs and action.shape[-1] == spec.action_dim
    if not ok:
        raise EnvError(f"action: expected shape {tuple(want)}, got {tuple(action.shape)}")
    if not action.is_floating_point():
        raise EnvError(f"action: expected a floating-point tensor, got {action.dtype}")
    if not torch.isfinite(action).all():
        bad = (~torch.isfinite(action)).reshape(spec.num_envs, -1).any(dim=1).nonzero().flatten().tolist()
        raise EnvError(f"action: NaN or inf in envs {bad[:8]}; actions must be finite")


def step_as_chunk(env: VecEnv, action: torch.Tensor) -> StepResult:
    """env.step(action) of an env that runs every step through chunk_step: a chunk of K = 1."""
    check_action(action, env.spec)
    r = env.chunk_step(action[:, None])
    return StepResult(obs=r.obs, reward=r.reward[:, 0], terminated=r.terminated[:, 0],
                      truncated=r.truncated[:, 0], info={k: v[:, 0] for k, v in r.info.items()},
                      final_obs=r.final_obs)


def check_saved_for(state: dict[str, Any], spec: EnvSpec) -> None:
    """One-line EnvError when a state_dict was saved for another task or batch size."""
    if state.get("task") != spec.task or int(state.get("num_envs", -1)) != spec.num_envs:
        raise EnvError(f"state_dict: saved for {state.get('task')} x {state.get('num_envs')}, "
                       f"this env is {spec.task} x {spec.num_envs}")
