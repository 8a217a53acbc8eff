"""MujocoVecEnv: B tabletop envs on one `mujoco.batch.Batch`, stepped on a thread pool.

The step hot path is vectorised numpy over all envs: actions become actuator targets, the
batch runs `substeps` physics steps per control step, and observations, rewards and
success are computed from the state rows (qpos, qvel, ctrl, mocap_pos), which are current
after each call. Finished envs are reset inside `step` (ManiSkill-style auto-reset). What the
MuJoCo Warp backend (warp_env.py) shares with it: options.py (arguments), tabletop.py (resets,
the episode stream, checkpoint fields).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import mujoco
import numpy as np
import torch
from mujoco.batch import Batch

from sims.mujoco import handles as hd
from sims.mujoco.control import ACTION_DIM, apply_action
from sims.mujoco.options import CAMERAS, OBS_MODES, REWARD_MODES, SUCCESS_BONUS, check_choice, check_options, parse_size
from sims.mujoco.randomization import RandomizationError, resolve
from sims.mujoco.randomizer import Randomizer
from sims.mujoco.scene import COLOR_RGBA, build_model
from sims.mujoco.seeding import parse_env_ids
from sims.mujoco.tabletop import TabletopVecEnv
from sims.mujoco.tasks.base import STATE_DIM, Task, state_obs
from sims.vecenv import ChunkStepResult, EnvError, EnvSpec, Obs, StepResult, check_action

__all__ = ["CAMERAS", "OBS_MODES", "REWARD_MODES", "SUCCESS_BONUS", "MujocoVecEnv", "check_choice", "parse_size"]
_STAGE = mujoco.mjtStage


class MujocoVecEnv(TabletopVecEnv):
    """Batched tabletop manipulation env (see sims/mujoco/tasks for the tasks).

    task: a Task instance. num_envs: B. obs_mode: "state" (no rendering) or "rgb" (adds
    "rgb_<camera>" uint8 [B, H, W, 3] for each of `cameras`). reward_mode: "dense" (progress
    made this step plus 1 on success), "sparse" (1 on success) or "staged" (progress in [0, 1],
    1 on success); see tasks/base.py. image_size: (H, W) or an int, of rgb observations.
    render_size: (H, W) of `render()` frames. control_hz / timestep: control rate and physics
    step; their ratio is the number of substeps. num_threads: batch threads (0: all CPUs).
    seed: seeds the episode stream until the first seeded reset. max_episode_steps: override
    the task's time limit. randomization: a domain randomisation block {knob: [low, high]}
    (sims/mujoco/randomization.py, docs/sim2real.md) drawn per env at every reset; reality:
    a reality preset (name in configs/reality/ or a path) applied as fixed offsets.
    """

    def __init__(self, task: Task, num_envs: int, *, obs_mode: str = "state",
                 reward_mode: str = "dense", image_size: Sequence[int] = (64, 64),
                 cameras: Sequence[str] = ("front",), render_size: Sequence[int] = (128, 128),
                 control_hz: float = 20.0, timestep: float = 0.005, num_threads: int = 0,
                 seed: int | None = None, max_episode_steps: int | None = None,
                 device: str | torch.device = "cpu", randomization: Any = None,
                 reality: str | None = None):
        substeps = check_options(num_envs, obs_mode, reward_mode, cameras, control_hz, timestep)
        self.image_size = parse_size("image_size", image_size)
        self.render_size = parse_size("render_size", render_size)
        self.task = task
        self.obs_mode, self.reward_mode = obs_mode, reward_mode
        self.cameras = tuple(cameras) if obs_mode == "rgb" else ()
        self.substeps = int(substeps)
        self.device = torch.device(device)
        steps = int(max_episode_steps or task.max_episode_steps)
        self.spec = EnvSpec(task=task.name, num_envs=int(num_envs), action_dim=ACTION_DIM,
                            state_dim=STATE_DIM, privileged_dim=task.privileged_dim,
                            max_episode_steps=steps, control_hz=float(control_hz),
                            cameras=self.cameras, image_size=self.image_size)
        scene = dataclasses.replace(task.scene, timestep=timestep, image_size=self.image_size)
        self.model = build_model(scene)
        if not num_threads:
            num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
        self._batch = Batch(self.model, int(num_envs), int(num_threads))
        self._qpos, self._qvel = self._batch.bind("qpos"), self._batch.bind("qvel")
        self._ctrl, self._mocap = self._batch.bind("ctrl"), self._batch.bind("mocap_pos")
        self._h = hd.Handles.from_model(self.model)
        self._renderer = None
        self._elapsed = np.zeros(num_envs, np.int64)
        self._progress = np.zeros(num_envs)  # task progress at the current state
        self._instr: list[str] = [""] * int(num_envs)
        self._ep: dict[str, np.ndarray] = {}
        self._rng = np.random.default_rng(seed)
        self._seeded = False
        self.final_joint_state: tuple[np.ndarray, np.ndarray] | None = None  # set by auto-resets
        try:
            dr = resolve(randomization, reality)
        except RandomizationError as e:
            raise EnvError(str(e)) from None
        self._dr = None if dr is None else Randomizer(dr, self.model, self._batch, self._h,
                                                      int(num_envs), seed)
        self.reset()

    # ------------------------------------------------------------------ reading the sims
    def _read(self, rows: np.ndarray | None = None) -> hd.SimView:
        return hd.read(self._h, self._qpos, self._qvel, self._ctrl, self._mocap, rows)

    def _ep_rows(self, rows: np.ndarray | None) -> dict[str, np.ndarray]:
        return self._ep if rows is None else {k: v[rows] for k, v in self._ep.items()}

    def _obs_np(self, s: hd.SimView, ev: dict[str, np.ndarray],
                rows: np.ndarray | None) -> dict[str, np.ndarray]:
        """Numpy observations of rows (None: all): state, privileged, rgb_<cam>."""
        out = {"state": state_obs(s), "privileged": self.task.privileged(s, self._ep_rows(rows), ev)}
        if self.cameras:
            ids = np.arange(self.num_envs) if rows is None else rows
            for cam in self.cameras:
                out[f"rgb_{cam}"] = self._render_np(ids, cam, self.image_size)
        if self._dr is not None:
            self._dr.observe(out, rows, STATE_DIM)
        return out

    def _wrap(self, obs: dict[str, np.ndarray], instr: list[str]) -> Obs:
        out: Obs = {k: torch.from_numpy(v) for k, v in obs.items()}
        if self.device.type != "cpu":
            out = {k: v.to(self.device) for k, v in out.items()}
        out["instruction"] = instr
        return out

    def _update_progress(self, rows: np.ndarray | None) -> None:
        """Recompute the task progress of rows (None: all) from their current state."""
        s, ep = self._read(rows), self._ep_rows(rows)
        self._progress[slice(None) if rows is None else rows] = self.task.progress(
            s, ep, self.task.evaluate(s, ep))

    def _observe_rows(self, obs: dict[str, np.ndarray], rows: np.ndarray) -> None:
        """Overwrite rows of obs (numpy, all B) with those envs' current observations."""
        s = self._read(rows)
        ev = self.task.evaluate(s, self._ep_rows(rows))
        for k, v in self._obs_np(s, ev, rows).items():
            obs[k][rows] = v

    # ------------------------------------------------------------------ reset
    def _reset_rows(self, ids: np.ndarray, ep: dict[str, np.ndarray],
                    seeds: list[int] | None = None) -> None:
        """Start new episodes in envs ids (sorted int64 [n]) from episode variables [n, ...];
        seeds [n] (or None: the stream) draw their randomisation."""
        h, qpos, ctrl = self._h, self._qpos, self._ctrl
        ids32 = ids.astype(np.int32)
        if self._dr is not None:
            self._dr.draw(ids, seeds)
        self._batch.reset(ids32, stage=_STAGE.mjSTAGE_NONE)
        qpos[ids[:, None], h.tcp_qpos] = ep["tcp"]
        ctrl[ids, 0:3] = ep["tcp"]
        for f in h.finger_qpos:
            qpos[ids, f] = ep["gap"] / 2
        ctrl[ids, 3] = ep["gap"]
        if h.cube_qpos >= 0:
            qpos[ids, h.cube_qpos:h.cube_qpos + 3] = ep["cube_pos"]
            qpos[ids, h.cube_qpos + 3:h.cube_qpos + 7] = ep["cube_quat"]
        if h.cube_b_qpos >= 0:
            qpos[ids, h.cube_b_qpos:h.cube_b_qpos + 3] = ep["cube_b_pos"]
            qpos[ids, h.cube_b_qpos + 3:h.cube_b_qpos + 7] = ep["cube_b_quat"]
        if h.target_mocap >= 0:
            self._mocap[ids, h.target_mocap] = ep["target"]
        if h.goal_mocap >= 0:
            self._mocap[ids, h.goal_mocap] = ep["goal"]
        self._batch.forward(ids32, stage=_STAGE.mjSTAGE_VEL)
        if self._dr is not None:
            self._dr.reset_queue(ids, hd.gap_to_cmd(ep["gap"]))
        self._elapsed[ids] = 0
        for k, v in ep.items():
            if k not in self._ep:
                self._ep[k] = np.zeros((self.num_envs, *v.shape[1:]), v.dtype)
            self._ep[k][ids] = v
        self._update_progress(ids)
        for j, i in enumerate(ids):
            self._instr[i] = self.task.instruction(ep, j)

    def _observe_all(self) -> dict[str, np.ndarray]:
        s = self._read()
        return self._obs_np(s, self.task.evaluate(s, self._ep), None)

    # ------------------------------------------------------------------ stepping
    def _actions(self, action: torch.Tensor, chunk: bool = False) -> np.ndarray:
        """Checked actions as float64 numpy, clipped to [-1, 1]; EnvError on bad input."""
        ok = (isinstance(action, torch.Tensor) and action.is_floating_point()
              and action.dim() == (3 if chunk else 2) and action.shape[0] == self.num_envs
              and action.shape[-1] == ACTION_DIM)
        a = action.detach().to("cpu", torch.float64).numpy() if ok else None
        if a is None or not np.isfinite(a).all():
            check_action(action, self.spec, chunk=chunk)  # raises with the contract's message
        return np.clip(a, -1.0, 1.0)

    def _advance(self, a: np.ndarray, ids: np.ndarray | None):
        """One control step of envs ids (None: all) with actions a [n, 4].

        Returns (SimView, evaluation, reward f32 [n], terminated [n], truncated [n]).
        """
        h = self._h
        if self._dr is not None:
            a = self._dr.action(a, ids)
        if ids is None:
            apply_action(a, self._qpos[:, h.tcp_qpos], self._ctrl)
            self._batch.step(None, self.substeps)
            self._elapsed += 1
            elapsed = self._elapsed
        else:
            ctrl = self._ctrl[ids]
            apply_action(a, self._qpos[ids[:, None], h.tcp_qpos], ctrl)
            self._ctrl[ids] = ctrl
            self._batch.step(ids.astype(np.int32), self.substeps)
            self._elapsed[ids] += 1
            elapsed = self._elapsed[ids]
        s = self._read(ids)
        ep = self._ep_rows(ids)
        ev = self.task.evaluate(s, ep)
        progress = self.task.progress(s, ep, ev)
        rows = slice(None) if ids is None else ids
        if self.reward_mode == "dense":
            reward = progress - self._progress[rows] + SUCCESS_BONUS * ev["success"]
        elif self.reward_mode == "staged":
            reward = np.where(ev["success"], 1.0, progress)
        else:
            reward = ev["success"]
        self._progress[rows] = progress
        reward = reward.astype(np.float32)
        term = ev["success"] | ev["fail"]
        trunc = (elapsed >= self.spec.max_episode_steps) & ~term
        return s, ev, reward, term, trunc

    def _auto_reset(self, obs: dict[str, np.ndarray], done_ids: np.ndarray) -> None:
        """Reset envs done_ids from the batch stream and write their first obs into obs. The
        joint state every env was in just before is kept as `final_joint_state` ((pos, vel),
        float64 [B, 5] each; rows done_ids are the finished episodes' last state), so that a
        robot node can publish the final frame as one physics snapshot."""
        self.final_joint_state = self.joint_state()
        self._reset_rows(done_ids, self.task.sample_episode(self._rng, len(done_ids)))
        self._observe_rows(obs, done_ids)

    def step(self, action: torch.Tensor) -> StepResult:
        s, ev, reward, term, trunc = self._advance(self._actions(action), None)
        obs = self._obs_np(s, ev, None)
        instr = list(self._instr)
        info = {k: torch.from_numpy(np.asarray(v)) for k, v in ev.items()}
        done = term | trunc
        final = None
        if done.any():
            final = self._wrap(obs, instr)
            obs = {k: v.copy() for k, v in obs.items()}
            self._auto_reset(obs, np.flatnonzero(done))
            instr = list(self._instr)
        return StepResult(obs=self._wrap(obs, instr), reward=torch.from_numpy(reward),
                          terminated=torch.from_numpy(term), truncated=torch.from_numpy(trunc),
                          info=info, final_obs=final)

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        a = self._actions(actions, chunk=True)
        B, K = a.shape[:2]
        reward = np.zeros((B, K), np.float32)
        term, trunc, valid = (np.zeros((B, K), bool) for _ in range(3))
        info: dict[str, np.ndarray] = {}
        active = np.ones(B, bool)
        finished: list[tuple[np.ndarray, dict[str, np.ndarray], list[str]]] = []
        for k in range(K):
            ids = None if active.all() else np.flatnonzero(active)
            if ids is not None and len(ids) == 0:
                break
            s, ev, r, te, tr = self._advance(a[:, k] if ids is None else a[ids, k], ids)
            rows = slice(None) if ids is None else ids
            valid[rows, k], reward[rows, k], term[rows, k], trunc[rows, k] = True, r, te, tr
            for name, v in ev.items():
                info.setdefault(name, np.zeros((B, K), np.asarray(v).dtype))[rows, k] = v
            d = np.flatnonzero(te | tr)
            if len(d):
                fin = d if ids is None else ids[d]
                sub = self._read(fin)
                obs_fin = self._obs_np(sub, self.task.evaluate(sub, self._ep_rows(fin)), fin)
                finished.append((fin, obs_fin, [self._instr[i] for i in fin]))
                active[fin] = False
        s = self._read()
        obs = self._obs_np(s, self.task.evaluate(s, self._ep), None)
        instr = list(self._instr)
        final = None
        if finished:
            final_np = {k: v.copy() for k, v in obs.items()}
            final_instr = list(instr)
            for fin, rows_obs, rows_instr in finished:
                for key, v in rows_obs.items():
                    final_np[key][fin] = v
                for i, text in zip(fin, rows_instr):
                    final_instr[i] = text
            final = self._wrap(final_np, final_instr)
            self._auto_reset(obs, np.flatnonzero(~active))
            instr = list(self._instr)
        t = torch.from_numpy
        return ChunkStepResult(obs=self._wrap(obs, instr), reward=t(reward), terminated=t(term),
                               truncated=t(trunc), info={k: t(v) for k, v in info.items()},
                               valid=t(valid), final_obs=final)

    # ------------------------------------------------------------------ checkpoints
    def joint_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions and velocities float64 [B, 5] of the gripper's joints (JOINT_NAMES):
        the x, y, z slides (m) and the two finger slides (m), as a robot driver reports them."""
        h = self._h
        pos = np.concatenate([self._qpos[:, h.tcp_qpos], self._qpos[:, h.finger_qpos]], axis=1)
        vel = np.concatenate([self._qvel[:, h.tcp_qvel], self._qvel[:, h.finger_qvel]], axis=1)
        return pos, vel

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "task": self.spec.task,
            "num_envs": self.num_envs,
            "physics": self._batch.state.copy(),
            "elapsed_steps": self._elapsed.copy(),
            **self._stream_state(),
        }
        if self._dr is not None:
            state.update(self._dr.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_saved(state)
        physics = np.asarray(state["physics"], np.float64)
        if physics.shape != self._batch.state.shape:
            raise EnvError(f"state_dict: physics has shape {physics.shape}, "
                           f"expected {self._batch.state.shape}")
        self._batch.state[:] = physics
        self._batch.forward(None, stage=_STAGE.mjSTAGE_VEL)
        self._elapsed[:] = np.asarray(state["elapsed_steps"], np.int64)
        self._load_stream(state)
        self._update_progress(None)

    # ------------------------------------------------------------------ rendering
    def _colors(self, ids: np.ndarray) -> dict[int, np.ndarray]:
        h, out = self._h, {}
        if h.cube_geom >= 0 and "cube_color" in self._ep:
            out[h.cube_geom] = COLOR_RGBA[self._ep["cube_color"][ids]]
        if h.cube_b_geom >= 0 and "cube_b_color" in self._ep:
            out[h.cube_b_geom] = COLOR_RGBA[self._ep["cube_b_color"][ids]]
        if h.target_geom >= 0 and "target_color" in self._ep:
            out[h.target_geom] = COLOR_RGBA[self._ep["target_color"][ids]]
        return out

    def _render_np(self, ids: np.ndarray, camera: str, size: tuple[int, int]) -> np.ndarray:
        if self._renderer is None:
            from sims.mujoco.render import BatchRenderer

            self._renderer = BatchRenderer(self.model)
        cam = self._renderer.camera_id(camera)
        colors, fields = self._colors(ids), None
        if self._dr is not None:
            colors, fields = self._dr.colors(ids, colors), self._dr.render_fields(ids)
        return self._renderer.render(self._batch, ids, cam, size, colors, fields)

    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        """uint8 [n, H, W, 3] frames at render_size of envs env_ids (default all)."""
        camera = camera or (self.cameras[0] if self.cameras else "front")
        check_choice("camera", camera, CAMERAS)
        ids = parse_env_ids(env_ids, self.num_envs)
        return torch.from_numpy(self._render_np(ids, camera, self.render_size))

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
