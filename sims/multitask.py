"""MultiTaskVecEnv: several tasks' envs in one batch, each row with its task's instruction.

make_env("multi:Reach+PushCube+Compose", 12) builds one env of 4 rows per task (rows 0-3 Reach,
4-7 PushCube, 8-11 Compose): B must be a multiple of the number of tasks. The tasks must agree on
the action width, the state width, the cameras and the image size; the privileged observation is
each task's own, zero-padded to the widest (P = max over tasks), so a critic sees every task's
state in one tensor. Seeds, resets, chunks, checkpoints and renders go to the sub-env of each row;
`task_labels` is each sub-env's own (Compose's rows give their variant), `row_tasks` each row's
task name (GRPO groups rows of one task). max_episode_steps is the longest task's.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from sims.mujoco.seeding import parse_env_ids, parse_seeds
from sims.vecenv import ChunkStepResult, EnvError, EnvSpec, Obs, Seed, StepResult, VecEnv, check_action, step_as_chunk


def parse_multi(task: str) -> list[str]:
    """"multi:A+B" -> ["A", "B"]; one-line EnvError when fewer than two tasks or a repeat."""
    names = [t for t in task.removeprefix("multi:").split("+")]
    if len(names) < 2 or any(not t for t in names) or len(set(names)) != len(names):
        raise EnvError(f"task: {task!r}: a multi-task env names two or more distinct tasks, e.g. multi:Reach+PushCube")
    return names


class MultiTaskVecEnv(VecEnv):
    """Rows [offsets[k], offsets[k + 1]) are envs[k]'s (module doc)."""

    def __init__(self, task: str, envs: Sequence[VecEnv]):
        self.envs = list(envs)
        first = self.envs[0].spec
        for e in self.envs[1:]:
            for field in ("action_dim", "state_dim", "cameras", "image_size"):
                if getattr(e.spec, field) != getattr(first, field):
                    raise EnvError(f"task: {task!r}: {e.spec.task} has {field} {getattr(e.spec, field)}, "
                                   f"{first.task} {getattr(first, field)}; a multi-task env's tasks must agree on it")
        self.offsets = np.cumsum([0] + [e.num_envs for e in self.envs])
        self.names = [e.spec.task for e in self.envs]
        self.device = self.envs[0].device
        self.spec = EnvSpec(task=task, num_envs=int(self.offsets[-1]), action_dim=first.action_dim,
                            state_dim=first.state_dim, privileged_dim=max(e.spec.privileged_dim for e in self.envs),
                            max_episode_steps=max(e.spec.max_episode_steps for e in self.envs),
                            control_hz=first.control_hz, cameras=first.cameras, image_size=first.image_size,
                            action_low=first.action_low, action_high=first.action_high)

    def _cat(self, parts: list[Obs]) -> Obs:
        """Sub-envs' observations -> one batch; privileged zero-padded to spec.privileged_dim."""
        out: Obs = {}
        for key in parts[0]:
            if key == "instruction":
                out[key] = [s for p in parts for s in p[key]]
            elif key == "privileged":
                P = self.spec.privileged_dim
                out[key] = torch.cat([torch.nn.functional.pad(p[key], (0, P - p[key].shape[1])) for p in parts])
            else:
                out[key] = torch.cat([p[key] for p in parts])
        return out

    def _split(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x[self.offsets[k]:self.offsets[k + 1]] for k in range(len(self.envs))]

    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        ids = parse_env_ids(env_ids, self.num_envs)
        seeds = None if seed is None else parse_seeds(seed, len(ids))
        parts = []
        for k, e in enumerate(self.envs):
            lo, hi = self.offsets[k], self.offsets[k + 1]
            mine = np.flatnonzero((ids >= lo) & (ids < hi))
            if len(mine) or env_ids is None:
                sub_seed = None if seeds is None else [seeds[j] for j in mine]
                obs, _ = e.reset(seed=sub_seed, env_ids=torch.as_tensor(ids[mine] - lo))
            else:
                obs, _ = e.reset(seed=None, env_ids=torch.zeros(0, dtype=torch.long))
            parts.append(obs)
        return self._cat(parts), {}

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        check_action(actions, self.spec, chunk=True)
        res = [e.chunk_step(a) for e, a in zip(self.envs, self._split(actions))]
        final = None
        if any(r.final_obs is not None for r in res):
            final = self._cat([r.final_obs if r.final_obs is not None else r.obs for r in res])
        keys = set.intersection(*(set(r.info) for r in res))
        return ChunkStepResult(obs=self._cat([r.obs for r in res]), reward=torch.cat([r.reward for r in res]),
                               terminated=torch.cat([r.terminated for r in res]),
                               truncated=torch.cat([r.truncated for r in res]),
                               info={k: torch.cat([r.info[k] for r in res]) for k in sorted(keys)},
                               valid=torch.cat([r.valid for r in res]), final_obs=final)

    def step(self, action: torch.Tensor) -> StepResult:
        return step_as_chunk(self, action)

    def task_labels(self) -> list[str]:
        return [s for e in self.envs for s in e.task_labels()]

    @property
    def row_tasks(self) -> tuple[str, ...]:
        return tuple(name for e, name in zip(self.envs, self.names) for _ in range(e.num_envs))

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"task": self.spec.task, "num_envs": self.num_envs}
        for k, e in enumerate(self.envs):
            out.update({f"{k}.{key}": v for key, v in e.state_dict().items()})
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("task") != self.spec.task or int(state.get("num_envs", -1)) != self.num_envs:
            raise EnvError(f"state_dict: saved for {state.get('task')} x {state.get('num_envs')}, "
                           f"this env is {self.spec.task} x {self.num_envs}")
        for k, e in enumerate(self.envs):
            e.load_state_dict({key[len(f"{k}."):]: v for key, v in state.items() if key.startswith(f"{k}.")})

    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        ids = parse_env_ids(env_ids, self.num_envs)
        k = np.searchsorted(self.offsets, ids, side="right") - 1
        frames = [self.envs[kk].render([int(i - self.offsets[kk])], camera=camera) for kk, i in zip(k, ids)]
        return torch.cat(frames) if frames else torch.zeros(0, *self.spec.image_size, 3, dtype=torch.uint8)

    def close(self) -> None:
        for e in self.envs:
            e.close()


class MultiExpert:
    """The expert of a multi-task env: rows split evenly over the tasks in order, each block
    given to its task's expert (its privileged columns first; the zero padding after them is
    ignored by the MuJoCo tasks' experts, which read their own layout's columns)."""

    def __init__(self, experts: list[Any]):
        self.experts = experts  # one per task, in the env's order (sims.registry.expert_for builds them)

    def __call__(self, privileged: np.ndarray) -> np.ndarray:
        blocks = np.array_split(np.asarray(privileged), len(self.experts))
        return np.concatenate([ex(b) for ex, b in zip(self.experts, blocks)]).astype(np.float32)

    def reset(self, env_ids: np.ndarray, privileged: np.ndarray) -> None:
        pass

    def close(self) -> None:
        for ex in self.experts:
            if hasattr(ex, "close"):
                ex.close()
