"""WarpVecEnv: the MuJoCo tasks on MuJoCo Warp, B worlds batched on one warp device.

The same task files as the C backend (sims/mujoco/tasks): their step hooks (`evaluate`,
`progress`, `privileged`) run on torch tensors that are views, without a copy, of MuJoCo Warp's
arrays (`wp.to_torch`), on `device` (CUDA, or warp's CPU device for development and tests).

Per control step on the device: the action becomes actuator targets, `substeps` physics steps
run (captured once as a graph), the task's success, failure, progress and reward,
the observations, and RGB frames of the task's cameras from MuJoCo Warp's batched ray tracer
(the worlds, their graphs and frames: sims/mujoco/warp_worlds.py).

Read back to the host each step (the only device-to-host copies): the done flags, bool [B] (one
per chunk substep in `chunk_step`), and whether the action was finite. Envs that finished draw
their next episodes on the host from the task's seeded numpy sampler, the same draws as the C
backend, so equal seeds give equal initial states; their rows are then written on the device.
Instructions are host strings. Per-env colours are a batched `geom_rgba`.

Domain randomisation: the C backend's draws applied on the device (sims/mujoco/warp_randomizer.py);
the camera and light knobs are not on this backend yet and are refused in one line.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import torch

from sims.mujoco import handles as hd
from sims.mujoco.control import ACTION_DIM, apply_action
from sims.mujoco.options import CAMERAS, SUCCESS_BONUS, check_choice, check_options, parse_size
from sims.mujoco.randomization import RandomizationError, resolve
from sims.mujoco.scene import COLOR_RGBA, build_model
from sims.mujoco.seeding import parse_env_ids
from sims.mujoco.tabletop import TabletopVecEnv
from sims.mujoco.tasks.base import STATE_DIM, Task, state_obs
from sims.mujoco.warp_randomizer import BATCHED, WARP_KNOBS, WarpRandomizer, unsupported
from sims.mujoco.warp_worlds import WarpWorlds
from sims.vecenv import ChunkStepResult, EnvError, EnvSpec, Obs, StepResult, check_action


class WarpVecEnv(TabletopVecEnv):
    """Batched tabletop manipulation on MuJoCo Warp; the arguments are MujocoVecEnv's.

    device: where the worlds live ("cuda", "cuda:1" or "cpu": warp's CPU device). num_threads is
    accepted and ignored (warp's CPU device runs its kernels on one thread).
    """

    def __init__(self, task: Task, num_envs: int, *, obs_mode: str = "state",
                 reward_mode: str = "dense", image_size: Sequence[int] = (64, 64),
                 cameras: Sequence[str] = ("front",), render_size: Sequence[int] = (128, 128),
                 control_hz: float = 20.0, timestep: float = 0.005, num_threads: int = 0,
                 seed: int | None = None, max_episode_steps: int | None = None,
                 device: str | torch.device = "cpu", randomization: Any = None,
                 reality: str | None = None):
        substeps = check_options(num_envs, obs_mode, reward_mode, cameras, control_hz, timestep)
        try:
            dr = resolve(randomization, reality)
        except RandomizationError as e:
            raise EnvError(str(e)) from None
        if dr is not None and unsupported(dr):
            raise EnvError(f"env.randomization: {', '.join(unsupported(dr))} not yet on the warp backend; allowed "
                           f"with env.backend=warp: {', '.join(WARP_KNOBS)} (or env.backend=cpu)")
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type not in ("cpu", "cuda"):
            raise EnvError(f"device: the warp backend runs on cpu or cuda, got {device!r}")
        self.image_size, self.render_size = parse_size("image_size", image_size), parse_size("render_size", render_size)
        self.task, self.obs_mode, self.reward_mode = task, obs_mode, reward_mode
        self.cameras = tuple(cameras) if obs_mode == "rgb" else ()
        self.substeps = int(substeps)
        B = int(num_envs)
        self.spec = EnvSpec(task=task.name, num_envs=B, action_dim=ACTION_DIM, state_dim=STATE_DIM,
                            privileged_dim=task.privileged_dim,
                            max_episode_steps=int(max_episode_steps or task.max_episode_steps),
                            control_hz=float(control_hz), cameras=self.cameras, image_size=self.image_size)
        self.model = build_model(dataclasses.replace(task.scene, timestep=timestep, image_size=self.image_size))
        self._h = hd.Handles.from_model(self.model)
        batched = {"geom_rgba": B}
        for knob, names in BATCHED.items():
            if dr is not None and dr.has(knob):
                batched.update({name: B for name in names})
        self.worlds = w = WarpWorlds(self.model, B, self.device, batched)
        self.wp, self._m, self._d = w.wp, w.m, w.d
        t = w.view
        self._qpos, self._qvel = t(self._d.qpos), t(self._d.qvel)  # float32 [B, nq], [B, nv]
        self._ctrl, self._mocap = t(self._d.ctrl), t(self._d.mocap_pos)  # [B, nu], [B, nmocap, 3]
        self._rgba = t(self._m.geom_rgba)  # float32 [B, ngeom, 4]
        self._rgba_nominal = torch.as_tensor(self.model.geom_rgba, dtype=torch.float32, device=self.device)
        self._palette = torch.as_tensor(COLOR_RGBA, device=self.device)  # [C, 4] episode colours
        h = self._h  # the gripper's joint columns (joint_state), as device index tensors
        self._joint_cols = tuple(torch.from_numpy(np.concatenate(c)).to(self.device)
                                 for c in ((h.tcp_qpos, h.finger_qpos), (h.tcp_qvel, h.finger_qvel)))
        self._elapsed = torch.zeros(B, dtype=torch.int64, device=self.device)
        self._progress = torch.zeros(B, dtype=torch.float32, device=self.device)
        self._instr: list[str] = [""] * B
        self._ep: dict[str, np.ndarray] = {}  # episode variables on the host (instructions, labels, checkpoints)
        self._ep_dev: dict[str, torch.Tensor] = {}  # the same on the device (the task's step hooks)
        self._rng = np.random.default_rng(seed)
        self._seeded = False
        self._final_joint: tuple[torch.Tensor, torch.Tensor] | None = None  # on the device, set by auto-resets
        self._dr = None
        if dr is not None:
            fields = {name: t(getattr(self._m, name)) for name in batched if name != "geom_rgba"}
            self._dr = WarpRandomizer(dr, self.model, self._h, B, seed, fields, w.set_const, self.device)
        self.reset()

    # ------------------------------------------------------------------ reading the worlds
    def _read(self, rows: torch.Tensor | None = None) -> hd.SimView:
        return hd.read(self._h, self._qpos, self._qvel, self._ctrl, self._mocap, rows)

    def _ep_rows(self, rows: torch.Tensor | None) -> dict[str, torch.Tensor]:
        return self._ep_dev if rows is None else {k: v[rows] for k, v in self._ep_dev.items()}

    def _obs(self, s: hd.SimView, ev: dict[str, torch.Tensor], rows: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Observations of rows (None: all): state [n, 9], privileged [n, P], rgb_<cam> [n, H, W, 3]."""
        out = {"state": state_obs(s), "privileged": self.task.privileged(s, self._ep_rows(rows), ev)}
        if self.cameras:
            for cam, img in self.worlds.frames(self.image_size, self.cameras).items():
                out[f"rgb_{cam}"] = img if rows is None else img[rows]
        if self._dr is not None:
            self._dr.observe(out, rows, STATE_DIM)
        return out

    def _wrap(self, obs: dict[str, torch.Tensor], instr: list[str]) -> Obs:
        return {**obs, "instruction": instr}

    # ------------------------------------------------------------------ reset
    def _reset_rows(self, ids: np.ndarray, ep: dict[str, np.ndarray], seeds: list[int] | None = None) -> None:
        """Start new episodes in envs ids (sorted int64 [n]) from host episode variables [n, ...];
        seeds [n] (or None: the stream) draw their randomisation."""
        h, dev = self._h, self.device
        if self._dr is not None:
            self._dr.draw(ids, seeds)
        rows = torch.from_numpy(ids).to(dev)
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=dev)
        mask[rows] = True
        self.worlds.reset(mask)
        e = {k: torch.as_tensor(v, device=dev, dtype=torch.float32 if v.dtype.kind == "f" else torch.int64)
             for k, v in ep.items()}
        tcp = hd.cols(h.tcp_qpos)
        self._qpos[rows, tcp] = e["tcp"]
        self._ctrl[rows, 0:3] = e["tcp"]
        for f in h.finger_qpos:
            self._qpos[rows, int(f)] = e["gap"] / 2
        self._ctrl[rows, 3] = e["gap"]
        for adr, pos, quat in ((h.cube_qpos, "cube_pos", "cube_quat"), (h.cube_b_qpos, "cube_b_pos", "cube_b_quat")):
            if adr >= 0:
                self._qpos[rows, adr:adr + 3] = e[pos]
                self._qpos[rows, adr + 3:adr + 7] = e[quat]
        for mocap, key in ((h.target_mocap, "target"), (h.goal_mocap, "goal")):
            if mocap >= 0:
                self._mocap[rows, mocap] = e[key]
        palette = self._palette
        self._rgba[rows] = self._rgba_nominal  # the model's colours, then the episode's, then DR's offsets
        for geom, key in ((h.cube_geom, "cube_color"), (h.cube_b_geom, "cube_b_color"), (h.target_geom, "target_color")):
            if geom >= 0 and key in e:
                self._rgba[rows, geom] = palette[e[key]]
        if self._dr is not None:
            self._dr.recolor(ids, self._rgba)
            self._dr.reset_queue(ids, hd.gap_to_cmd(ep["gap"]))
        self._elapsed[rows] = 0
        for k, v in ep.items():
            if k not in self._ep:
                self._ep[k] = np.zeros((self.num_envs, *v.shape[1:]), v.dtype)
                self._ep_dev[k] = torch.zeros((self.num_envs, *v.shape[1:]), dtype=e[k].dtype, device=dev)
            self._ep[k][ids] = v
            self._ep_dev[k][rows] = e[k]
        s, ep_rows = self._read(rows), self._ep_rows(rows)
        self._progress[rows] = self.task.progress(s, ep_rows, self.task.evaluate(s, ep_rows)).float()
        for j, i in enumerate(ids):
            self._instr[i] = self.task.instruction(ep, j)

    def _observe_all(self) -> dict[str, torch.Tensor]:
        s = self._read()
        return self._obs(s, self.task.evaluate(s, self._ep_dev), None)

    # ------------------------------------------------------------------ stepping
    def _actions(self, action: torch.Tensor, chunk: bool = False) -> torch.Tensor:
        """Checked actions, float32 on the device, clipped to [-1, 1]; EnvError on bad input."""
        ok = (isinstance(action, torch.Tensor) and action.is_floating_point()
              and action.dim() == (3 if chunk else 2) and action.shape[0] == self.num_envs
              and action.shape[-1] == ACTION_DIM)
        a = action.detach().to(self.device, torch.float32) if ok else None
        if a is None or not bool(torch.isfinite(a).all()):
            check_action(action, self.spec, chunk=chunk)  # raises with the contract's message
        return a.clamp(-1.0, 1.0)

    def _advance(self, a: torch.Tensor):
        """One control step of every world with actions a [B, 4]: (SimView, evaluation, reward f32
        [B], terminated [B], truncated [B]), all on the device."""
        if self._dr is not None:
            a = self._dr.action(a)
        apply_action(a, self._qpos[:, hd.cols(self._h.tcp_qpos)], self._ctrl)
        self.worlds.physics(self.substeps)
        self._elapsed += 1
        s = self._read()
        ev = self.task.evaluate(s, self._ep_dev)
        progress = self.task.progress(s, self._ep_dev, ev).float()
        success = ev["success"].float()
        if self.reward_mode == "dense":
            reward = progress - self._progress + SUCCESS_BONUS * success
        elif self.reward_mode == "staged":
            reward = torch.where(ev["success"], 1.0, progress)
        else:
            reward = success
        self._progress.copy_(progress)
        term = ev["success"] | ev["fail"]
        trunc = (self._elapsed >= self.spec.max_episode_steps) & ~term
        return s, ev, reward, term, trunc

    def _auto_reset(self, obs: dict[str, torch.Tensor], done_ids: np.ndarray) -> None:
        """Reset envs done_ids from the episode stream and write their first obs into obs (rows)."""
        self._final_joint = self._joints()
        self._reset_rows(done_ids, self.task.sample_episode(self._rng, len(done_ids)))
        rows = torch.from_numpy(done_ids).to(self.device)
        s = self._read(rows)
        for k, v in self._obs(s, self.task.evaluate(s, self._ep_rows(rows)), rows).items():
            obs[k][rows] = v

    def step(self, action: torch.Tensor) -> StepResult:
        s, ev, reward, term, trunc = self._advance(self._actions(action))
        obs = self._obs(s, ev, None)
        instr = list(self._instr)
        done = (term | trunc).cpu().numpy()  # the step's one read-back
        final = None
        if done.any():
            final = self._wrap(obs, instr)
            obs = {k: v.clone() for k, v in obs.items()}
            self._auto_reset(obs, np.flatnonzero(done))
            instr = list(self._instr)
        return StepResult(obs=self._wrap(obs, instr), reward=reward, terminated=term, truncated=trunc,
                          info=dict(ev), final_obs=final)

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        """K substeps; every world steps each substep (a finished world's later substeps are
        discarded and it is reset after the chunk, as on the C backend, where it stops)."""
        a = self._actions(actions, chunk=True)
        B, K = a.shape[:2]
        dev = self.device
        reward = torch.zeros((B, K), dtype=torch.float32, device=dev)
        term, trunc, valid = (torch.zeros((B, K), dtype=torch.bool, device=dev) for _ in range(3))
        info: dict[str, torch.Tensor] = {}
        active = np.ones(B, bool)
        final_obs: dict[str, torch.Tensor] | None = None
        final_instr = list(self._instr)
        for k in range(K):
            act = torch.from_numpy(active).to(dev)
            s, ev, r, te, tr = self._advance(a[:, k])
            valid[:, k] = act
            reward[:, k] = torch.where(act, r, 0.0)
            term[:, k], trunc[:, k] = te & act, tr & act
            for name, v in ev.items():
                info.setdefault(name, torch.zeros((B, K), dtype=v.dtype, device=dev))[:, k] = torch.where(act, v, 0)
            fin = np.flatnonzero(((te | tr) & act).cpu().numpy())  # the substep's one read-back
            if len(fin):
                rows = torch.from_numpy(fin).to(dev)
                obs_k = self._obs(s, ev, None)
                if final_obs is None:
                    final_obs = {key: torch.zeros_like(v) for key, v in obs_k.items()}
                for key, v in obs_k.items():
                    final_obs[key][rows] = v[rows]
                active[fin] = False
                if not active.any():
                    break
        s = self._read()
        obs = self._obs(s, self.task.evaluate(s, self._ep_dev), None)
        instr = list(self._instr)
        final = None
        if final_obs is not None:
            done_rows = torch.from_numpy(np.flatnonzero(~active)).to(dev)
            merged = {k: v.clone() for k, v in obs.items()}
            for key, v in final_obs.items():
                merged[key][done_rows] = v[done_rows]
            final = self._wrap(merged, final_instr)
            obs = {k: v.clone() for k, v in obs.items()}
            self._auto_reset(obs, np.flatnonzero(~active))
            instr = list(self._instr)
        return ChunkStepResult(obs=self._wrap(obs, instr), reward=reward, terminated=term, truncated=trunc,
                               info=info, valid=valid, final_obs=final)

    # ------------------------------------------------------------------ checkpoints
    _STATE = ("qpos", "qvel", "ctrl", "mocap_pos", "mocap_quat", "qacc_warmstart", "act")

    def _joints(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions and velocities float32 [B, 5] of the gripper's joints (JOINT_NAMES), on the device."""
        cols_q, cols_v = self._joint_cols
        return self._qpos[:, cols_q], self._qvel[:, cols_v]

    def joint_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions and velocities float64 [B, 5] of the gripper's joints (JOINT_NAMES), on the host."""
        return tuple(x.double().cpu().numpy() for x in self._joints())

    @property
    def final_joint_state(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The joint state (as joint_state()) every env was in just before the last auto-reset; rows
        of the envs that reset are their finished episodes' last state. Read back only when asked."""
        return None if self._final_joint is None else tuple(x.double().cpu().numpy() for x in self._final_joint)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"task": self.spec.task, "num_envs": self.num_envs, "backend": "warp",
                                 "elapsed_steps": self._elapsed.cpu().numpy(), **self._stream_state()}
        for name in self._STATE:
            state[f"physics.{name}"] = self.wp.to_torch(getattr(self._d, name)).cpu().numpy().copy()
        state["geom_rgba"] = self._rgba.cpu().numpy().copy()
        if self._dr is not None:
            state.update(self._dr.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_saved(state)
        if state.get("backend") != "warp":
            raise EnvError("state_dict: saved by the C MuJoCo backend; resume with env.backend=cpu")
        for name in self._STATE:
            view = self.wp.to_torch(getattr(self._d, name))
            view.copy_(torch.as_tensor(np.asarray(state[f"physics.{name}"])).to(view))
        self._rgba.copy_(torch.as_tensor(np.asarray(state["geom_rgba"])).to(self._rgba))
        self._elapsed.copy_(torch.as_tensor(np.asarray(state["elapsed_steps"], np.int64)))
        self._load_stream(state)
        for k in (key[len("episode."):] for key in state if key.startswith("episode.")):
            arr = self._ep[k]  # the episode variables on the device too
            self._ep_dev[k] = torch.as_tensor(arr, dtype=torch.float32 if arr.dtype.kind == "f" else torch.int64,
                                              device=self.device)
        s = self._read()
        self._progress.copy_(self.task.progress(s, self._ep_dev, self.task.evaluate(s, self._ep_dev)).float())

    # ------------------------------------------------------------------ rendering
    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        """uint8 [n, H, W, 3] frames at render_size of envs env_ids (default all), on the host."""
        camera = camera or (self.cameras[0] if self.cameras else "front")
        check_choice("camera", camera, CAMERAS)
        ids = torch.from_numpy(parse_env_ids(env_ids, self.num_envs)).to(self.device)
        return self.worlds.frames(self.render_size, (camera,))[camera][ids].cpu()

    def close(self) -> None:
        self.worlds.close()
