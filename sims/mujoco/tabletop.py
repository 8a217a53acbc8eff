"""TabletopVecEnv: what the two MuJoCo backends share (MujocoVecEnv in env.py, WarpVecEnv in
warp_env.py): seeded resets from the task's episode sampler, the episode stream and its
checkpoint fields, and the task labels. A backend sets task, _rng, _seeded, _instr, _ep and _dr
and implements _reset_rows, _observe_all and _wrap."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from sims.mujoco.seeding import parse_env_ids, parse_seeds, sample_seeded, stream_from
from sims.mujoco.tasks.base import Task
from sims.vecenv import EnvError, Obs, Seed, VecEnv


class TabletopVecEnv(VecEnv):
    """The backends' common part (module doc)."""

    JOINT_NAMES = ("x", "y", "z", "finger_left", "finger_right")
    task: Task
    _rng: np.random.Generator
    _seeded: bool
    _instr: list[str]
    _ep: dict[str, np.ndarray]  # episode variables [B, ...] on the host
    _dr: Any  # the domain randomiser, or None

    def _reset_rows(self, ids: np.ndarray, ep: dict[str, np.ndarray], seeds: list[int] | None = None) -> None:
        """Start new episodes in envs ids (sorted int64 [n]) from episode variables [n, ...];
        seeds [n] (or None: the stream) draw their randomisation."""
        raise NotImplementedError

    def _observe_all(self) -> dict[str, Any]:
        """Every env's observations (the backend's arrays, before _wrap)."""
        raise NotImplementedError

    def _wrap(self, obs: dict[str, Any], instr: list[str]) -> Obs:
        raise NotImplementedError

    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        ids = parse_env_ids(env_ids, self.num_envs)
        seeds = None
        if seed is None:
            ep = self.task.sample_episode(self._rng, len(ids))
        else:
            seeds = parse_seeds(seed, len(ids))
            ep = sample_seeded(self.task.sample_episode, seeds)
            if not self._seeded:
                self._rng, self._seeded = stream_from(seeds), True
                if self._dr is not None:
                    self._dr.reseed(seeds)
        if len(ids):
            order = np.argsort(ids, kind="stable")
            self._reset_rows(ids[order], {k: v[order] for k, v in ep.items()},
                             None if seeds is None else [seeds[i] for i in order])
        return self._wrap(self._observe_all(), list(self._instr)), {}

    # ------------------------------------------------------------------ checkpoints
    def _stream_state(self) -> dict[str, Any]:
        """The checkpoint's instructions, episode stream and episode variables."""
        state: dict[str, Any] = {"instructions": list(self._instr),
                                 "rng_state": json.dumps(self._rng.bit_generator.state),
                                 "rng_seeded": int(self._seeded)}
        for k, v in self._ep.items():
            state[f"episode.{k}"] = v.copy()
        return state

    def _check_saved(self, state: dict[str, Any]) -> None:
        if state.get("task") != self.spec.task or int(state.get("num_envs", -1)) != self.num_envs:
            raise EnvError(f"state_dict: saved for {state.get('task')} x {state.get('num_envs')}, "
                           f"this env is {self.spec.task} x {self.num_envs}")

    def _load_stream(self, state: dict[str, Any]) -> None:
        """Instructions, episode stream, episode variables (into _ep) and the randomiser's state."""
        self._instr = [str(x) for x in state["instructions"]]
        for key, v in state.items():
            if key.startswith("episode."):
                self._ep[key[len("episode."):]] = np.array(v)
        rng = np.random.default_rng()
        rng.bit_generator.state = json.loads(state["rng_state"])
        self._rng, self._seeded = rng, bool(int(state["rng_seeded"]))
        if (self._dr is None) != ("randomization.queue" not in state):
            raise EnvError("state_dict: saved with" + ("" if self._dr is None else "out")
                           + " domain randomisation; build the env with the same randomization/reality")
        if self._dr is not None:
            self._dr.load_state_dict(state)

    def task_labels(self) -> list[str]:
        return [self.task.label(self._ep, i) for i in range(self.num_envs)]
