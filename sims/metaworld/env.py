"""MetaWorldVecEnv: MetaWorld 3.1.1 behind our VecEnv contract (see sims/vecenv.py, docs/metaworld.md).

The B envs live in W worker processes (sims/metaworld/worker.py, run by .venv-metaworld's
interpreter; worker k holds a contiguous block of envs); observations travel in shared memory.
The workers, their start, stop and framing, resets, chunks and checkpoints are the side-venv
base's (sims/sidevenv/env.py); this file holds what is MetaWorld's.
Observations (B envs):
  "state":       float32 [B, 4]          hand xyz, gripper opening in [0, 1] (MetaWorld's obs[0:4]);
                 float32 [B, 7]          with a task name ending in "@goal": then the goal's xyz
                                         (obs[36:39]), which a 64 px frame shows as 2-3 pixels
  "privileged":  float32 [B, 39 + N]     MetaWorld's observation with the goal visible (hand,
                                         gripper, objects, the previous frame of them, goal),
                                         then a one-hot of the env's task among the N tasks of
                                         the benchmark (N = 10 for MT10 and MT10/<task>, 50 for
                                         MT50 and MT50/<task>, 0 for metaworld:<task>)
  "rgb_<cam>":   uint8 [B, H, W, 3]      with obs_mode="rgb": mujoco's own Renderer (one per
                                         task per worker), no multisampling, shadows or
                                         reflections; upright
  "instruction": list[str] (B)           the env's task phrase (sims/metaworld/tasks.py)
Actions: float32 [B, 4], the hand's xyz displacement (x 1 cm) and the gripper effort, clipped to
[-1, 1], at 80 Hz (5 physics steps of 2.5 ms). Success: MetaWorld's info["success"]; it
terminates the episode. `truncated` at max_episode_steps (default MetaWorld's max path length,
500). Reward (reward_mode), with S_t MetaWorld's own shaped reward (0-10) of step t over 10 and
S_0 that of the reset state (zero action):
  "sparse" (the default): 1[success]
  "dense":  S_t - S_t-1 + 1[success], potential-based shaping plus a success bonus, as the
            MuJoCo tasks' dense reward: an episode's return is S_T - S_0 + 1[success], so hovering
            short of success pays nothing (MetaWorld's own reward does not end episodes on success)
  "staged": S_t, MetaWorld's reward as it is; with episodes that end on success it pays to hover.
Resets: seed s seeds the env's generator, from which MetaWorld
draws the layout (object and goal positions): equal seeds give equal episodes, whatever the env
index or the worker. chunk_step runs the whole chunk inside the workers and renders once, at its end.
A worker that dies raises one line naming it and the last line of its stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from sims.metaworld.proc import OBS_DIM, SIDE
from sims.metaworld.tasks import CAMERAS, INSTRUCTIONS, MAX_PATH_LENGTH, parse_name, split_variant
from sims.sidevenv.env import SideVenvVecEnv
from sims.vecenv import EnvError, EnvSpec

STATE_DIM = 4  # hand xyz, gripper
GOAL_SLICE = slice(36, 39)  # the goal's xyz in MetaWorld's observation
ACTION_DIM = 4
REWARD_MODES = ("sparse", "dense", "staged")
DEFAULT_CAMERAS = CAMERAS[:1]  # corner2


class MetaWorldVecEnv(SideVenvVecEnv):
    """B MetaWorld envs. task: "metaworld:MT10", "metaworld:MT50" (env i runs task i mod N),
    "metaworld:MT10/<task>" (one task, the benchmark's one-hot) or "metaworld:<task>", each with an
    optional "@goal" (the goal's xyz in the state); obs_mode "state" | "rgb"; reward_mode "sparse" |
    "dense" | "staged" (module doc);
    cameras: MetaWorld's camera names (corner, corner2, corner3, corner4, topview, behindGripper,
    gripperPOV); image_size (H, W); seed: the stream of unseeded resets; num_workers: processes
    (default min(B, 2)); start_timeout: seconds for the workers to build their envs. num_threads
    (env.num_threads of a config) is accepted and has no effect."""

    side, script, label = SIDE, Path(__file__).with_name("worker.py"), "MetaWorld"
    camera_names = {c: c for c in CAMERAS}

    def __init__(self, task: str, num_envs: int, *, obs_mode: str = "state", reward_mode: str = "sparse",
                 image_size: Sequence[int] | int = (64, 64), cameras: Sequence[str] | None = DEFAULT_CAMERAS,
                 seed: int | None = None, max_episode_steps: int | None = None, num_workers: int | None = None,
                 start_timeout: float = 300.0, device: str | torch.device | None = None,
                 num_threads: int | None = None):
        suite, tasks = parse_name(task)
        self.goal_in_state = split_variant(task)[1]
        B, cams, (h, w) = self._check(num_envs, obs_mode, reward_mode, REWARD_MODES, cameras, image_size)
        steps = int(max_episode_steps or MAX_PATH_LENGTH)
        if not 1 <= steps <= MAX_PATH_LENGTH:
            raise EnvError(f"max_episode_steps: {max_episode_steps!r}; allowed: 1..{MAX_PATH_LENGTH} "
                           f"(MetaWorld's max path length)")
        W = int(num_workers or min(B, 2))
        if not 1 <= W <= B:
            raise EnvError(f"num_workers: {num_workers!r}; allowed: 1..{B} (the number of envs)")
        self.reward_mode = reward_mode
        self.device = torch.device(device) if device else torch.device("cpu")
        self.task_names = [tasks[i % len(tasks)] for i in range(B)]
        blocks = [b.tolist() for b in np.array_split(np.arange(B), W)]  # worker k -> its envs
        names = [[self.task_names[i] for i in blk] for blk in blocks]
        infos = self._start(blocks, [f"{k} ({', '.join(dict.fromkeys(n))})" for k, n in enumerate(names)],
                            [["--tasks", ",".join(n), "--height", h, "--width", w, "--cameras", ",".join(cams)]
                             for n in names], start_timeout)
        n_hot = len(suite)
        state_dim = STATE_DIM + (GOAL_SLICE.stop - GOAL_SLICE.start) * self.goal_in_state
        spec = EnvSpec(task=task, num_envs=B, action_dim=ACTION_DIM, state_dim=state_dim,
                       privileged_dim=OBS_DIM + n_hot, max_episode_steps=steps,
                       control_hz=float(infos[0]["control_hz"]), cameras=cams, image_size=(h, w))
        priv = torch.zeros(B, OBS_DIM + n_hot)  # the one-hot of each env's task after MetaWorld's 39
        for i, t in enumerate(self.task_names):
            if n_hot:
                priv[i, OBS_DIM + suite.index(t)] = 1.0
        self._finish(spec, [INSTRUCTIONS[t] for t in self.task_names], priv, seed)

    def _state(self, priv: torch.Tensor) -> torch.Tensor:
        state = priv[:, :STATE_DIM]
        return torch.cat([state, priv[:, GOAL_SLICE]], dim=1) if self.goal_in_state else state

    def _rewards(self, k: int, reply: dict, success: torch.Tensor) -> np.ndarray:
        """float [E, K]: one worker's rewards of its executed steps under self.reward_mode."""
        if self.reward_mode == "sparse":
            return success.numpy().astype(np.float32)
        staged = np.asarray(reply["reward"], np.float64)  # S_1..S_n (zeros past n)
        if self.reward_mode == "staged":
            return staged.astype(np.float32)
        before = np.concatenate([np.asarray(reply["start"], np.float64)[:, None], staged[:, :-1]], axis=1)  # S_0..
        return (staged - before + success.numpy()).astype(np.float32)

    def task_labels(self) -> list[str]:
        return list(self.task_names)

    @property
    def row_tasks(self) -> tuple[str, ...]:
        return tuple(self.task_names)
