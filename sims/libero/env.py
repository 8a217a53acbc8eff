"""LiberoVecEnv: LIBERO tasks behind our VecEnv contract (see sims/vecenv.py, docs/libero.md).

One worker process per env (sims/libero/worker.py, run by .venv-libero's interpreter), with
observations in shared memory; the workers, their start, stop and framing, resets, chunks and
checkpoints are the side-venv base's (sims/sidevenv/env.py), this file holds what is LIBERO's. Observations (B envs):
  "state":       float32 [B, 8]         eef pos (3), eef axis-angle (3), gripper qpos (2)
  "privileged":  float32 [B, 14 + D]    the state, the positions of the two objects of the task's
                                        first goal predicate (pick, then place target: 6; zeros
                                        where the goal names none), then the flat MuJoCo state
                                        (time, qpos, qvel), zero-padded to the largest D of the batch
  "rgb_agentview", "rgb_wrist": uint8 [B, H, W, 3]  upright, with obs_mode="rgb"
  "instruction": list[str] (B)          the task's language (the one LIBERO checkpoints saw)
Actions: float32 [B, 7], OSC delta pose (6) and gripper (-1 open, +1 close), clipped to [-1, 1],
at 20 Hz. Reward (reward_mode): "sparse" (the default), 1 on success (LIBERO's check_success,
the BDDL goal), which terminates the episode; "dense", that plus the change of a staged potential
(reach, grasp, lift, carry over the target; sims/libero/worker.py) computed in the worker from the
sim state, for the pick-and-place goals ("on OBJECT TARGET"); success is the same in both.
`truncated` comes at the suite's max steps (counted after 10 settle steps). Resets: seed s starts from the task's official init state s mod 50 (layouts="official")
or from a layout drawn by LIBERO's placement samplers seeded with s (layouts="sampled").
chunk_step runs the whole chunk inside each worker and renders once, at its end.
A worker that dies is started again once per env (a RuntimeWarning names it); its episode ends
truncated, with the last observation before the death as the final one. A second death of the
same env's worker raises one line naming the task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from sims.libero.proc import SIDE
from sims.libero.tasks import SETTLE_STEPS, SIM_START, STATE_DIM, SUITES, parse_name, split_layouts
from sims.sidevenv.env import SideVenvVecEnv
from sims.vecenv import EnvError, EnvSpec

ACTION_DIM = 7
CAMERAS = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}  # our name -> LIBERO's
LAYOUTS = ("official", "sampled")
REWARD_MODES = ("sparse", "dense")


class LiberoVecEnv(SideVenvVecEnv):
    """B LIBERO envs. task: "libero:SUITE/TASK" (TASK: index or name) or "libero:SUITE" (env i
    runs task i mod n_tasks); a name ending in "@sampled" or "@official" sets `layouts`. obs_mode
    "state" | "rgb"; reward_mode "sparse" | "dense" (module doc); cameras: subset of ("agentview",
    "wrist"); image_size (H, W); layouts "official" | "sampled"; seed: the stream of unseeded
    resets; max_episode_steps: default the suite's; settle_steps: no-op steps after each reset;
    start_timeout: seconds for the workers to build their envs. num_threads (env.num_threads of a
    config) is accepted and has no effect: each env is its own single-threaded process."""

    side, script, label = SIDE, Path(__file__).with_name("worker.py"), "LIBERO"
    camera_names = CAMERAS
    max_restarts = 1

    def __init__(self, task: str, num_envs: int, *, obs_mode: str = "state", reward_mode: str = "sparse",
                 image_size: Sequence[int] | int = (128, 128), cameras: Sequence[str] | None = ("agentview", "wrist"),
                 layouts: str = "official", seed: int | None = None, max_episode_steps: int | None = None,
                 settle_steps: int = SETTLE_STEPS, start_timeout: float = 600.0,
                 device: str | torch.device | None = None, num_threads: int | None = None):
        suite, sub = parse_name(task)
        layouts = split_layouts(task)[1] or layouts
        if layouts not in LAYOUTS:
            raise EnvError(f"layouts: unknown value {layouts!r}; allowed: {', '.join(LAYOUTS)}")
        B, cams, (h, w) = self._check(num_envs, obs_mode, reward_mode, REWARD_MODES, cameras, image_size)
        steps = int(max_episode_steps or SUITES[suite][1])
        if steps < 1:
            raise EnvError(f"max_episode_steps: expected a positive int, got {max_episode_steps!r}")
        self.layouts, self.reward_mode = layouts, reward_mode
        self.device = torch.device(device) if device else torch.device("cpu")
        n_tasks = SUITES[suite][0]
        subs = [sub if sub is not None else str(i % n_tasks) for i in range(B)]
        infos = self._start([[i] for i in range(B)], [f"{suite}/{t} (env {i})" for i, t in enumerate(subs)],
                            [["--suite", suite, "--task", t, "--height", h, "--width", w, "--cameras",
                              ",".join(CAMERAS[c] for c in cams), "--settle", settle_steps] for t in subs],
                            start_timeout)
        self.task_names = [inf["task_name"] for inf in infos]
        width = max(inf["arrays"]["obs"][1][1] for inf in infos)
        spec = EnvSpec(task=task, num_envs=B, action_dim=ACTION_DIM, state_dim=STATE_DIM, privileged_dim=width,
                       max_episode_steps=steps, control_hz=infos[0]["control_hz"], cameras=cams, image_size=(h, w))
        self._finish(spec, [inf["instruction"] for inf in infos], torch.zeros(B, width), seed)

    def _state(self, priv: torch.Tensor) -> torch.Tensor:
        return priv[:, :STATE_DIM]

    def _request(self, op: str) -> dict:
        if op == "reset":
            return {"layouts": self.layouts}
        return {"dense": self.reward_mode == "dense"} if op == "step" else {}

    def _rewards(self, k: int, reply: dict, success: torch.Tensor) -> np.ndarray:
        """dense: the worker's shaped reward; sparse: 1 on success."""
        return reply["reward"] if self.reward_mode == "dense" else success.numpy().astype(np.float32)


__all__ = ["LiberoVecEnv", "SIM_START"]
