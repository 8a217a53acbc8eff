"""Per-env domain randomisation of a MujocoVecEnv: draws at reset, applies where each knob lives.

  physics    friction, mass, actuator_gain: the batch's per-simulation model fields
             (`Batch.expand`), written for the envs being reset; no model is rebuilt.
  control    latency_steps, action_noise: the action each env applies (a queue of its last
             actions), in the env's step.
  sensing    obs_noise: Gaussian noise on the `state` and `privileged` observations.
  rendering  lights, colours, camera pose and fovy: per-env values the renderer writes into
             its own copy of the model before drawing that env.

All draws come from this object's generator (or, for seeded resets, from each env's seed), never
from the episode stream, so a randomised env starts the same episodes as a nominal one.
"""

from __future__ import annotations

import json
from typing import Any

import mujoco
import numpy as np
from mujoco.batch import Batch

from sims.mujoco.handles import Handles
from sims.mujoco.randomization import Randomization

SEED_TAG = 0xD0  # separates the randomisation's generators from the episode sampler's
OBJECT_GEOMS = ("cube", "target", "goal", "target_pole", "goal_pole")


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of quaternions (w, x, y, z), broadcast over leading dims."""
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], -1)


def _quat_from_rotvec(v: np.ndarray) -> np.ndarray:
    """Rotation vectors [n, 3] (radians) -> unit quaternions [n, 4] (w, x, y, z)."""
    angle = np.linalg.norm(v, axis=-1, keepdims=True)
    axis = np.divide(v, angle, out=np.zeros_like(v), where=angle > 0)
    return np.concatenate([np.cos(angle / 2), axis * np.sin(angle / 2)], -1)


class Randomizer:
    """The current knob values of B envs (`params`: name -> float64 [B, *shape]) and their effects."""

    def __init__(self, r: Randomization, model: mujoco.MjModel, batch: Batch, h: Handles,
                 num_envs: int, seed: int | None):
        self.r, self.model, self.batch, self.h = r, model, batch, h
        self.params = r.nominal(num_envs)
        self.rng = np.random.default_rng(None if seed is None else np.random.SeedSequence([seed, SEED_TAG]))
        if r.has("friction"):
            self._friction = batch.expand("geom_friction")  # [B, ngeom, 3]
        if r.has("mass"):
            self._cube_body = int(model.geom_bodyid[h.cube_geom]) if h.cube_geom >= 0 else -1
            self._mass, self._inertia = batch.expand("body_mass"), batch.expand("body_inertia")
        if r.has("actuator_gain"):
            self._gain, self._bias = batch.expand("actuator_gainprm"), batch.expand("actuator_biasprm")
        lag = int(r.high["latency_steps"]) if r.has("latency_steps") else 0
        self.queue = np.zeros((num_envs, lag + 1, 4))  # [B, L, 4], newest action first

    # ------------------------------------------------------------------ draws
    def draw(self, ids: np.ndarray, seeds: list[int] | None = None) -> None:
        """New values for envs ids [n] (from each seed, or from the stream), applied to physics."""
        if seeds is None:
            values = self.r.sample(self.rng, len(ids))
        else:
            per = [self.r.sample(np.random.default_rng(np.random.SeedSequence([s, SEED_TAG])), 1)
                   for s in seeds]
            values = {k: np.concatenate([p[k] for p in per]) for k in per[0]} if per else {}
        for k, v in values.items():
            self.params[k][ids] = v
        self.apply_physics(ids)

    def reseed(self, seeds: list[int]) -> None:
        """Restart the stream from a seeded reset's seeds (as the env's episode stream does)."""
        self.rng = np.random.default_rng(np.random.SeedSequence([*seeds, 0x5EED, SEED_TAG]))

    def apply_physics(self, ids: np.ndarray) -> None:
        """Write the physics knobs of envs ids into the batch's per-simulation model fields."""
        m, p = self.model, self.params
        if self.r.has("friction"):
            self._friction[ids, :, 0] = m.geom_friction[None, :, 0] * p["friction"][ids, None]
        if self.r.has("mass") and self._cube_body >= 0:
            s = p["mass"][ids]
            self._mass[ids, self._cube_body] = m.body_mass[self._cube_body] * s
            self._inertia[ids, self._cube_body] = m.body_inertia[self._cube_body] * s[:, None]
            self.batch.set_const(ids.astype(np.int32))  # derived constants follow the new mass
        if self.r.has("actuator_gain"):
            s = p["actuator_gain"][ids, None]
            # position servo: force = kp (ctrl - q) - kv qdot; kv ~ sqrt(kp) keeps the damping ratio
            self._gain[ids, :, 0] = m.actuator_gainprm[None, :, 0] * s
            self._bias[ids, :, 1] = m.actuator_biasprm[None, :, 1] * s
            self._bias[ids, :, 2] = m.actuator_biasprm[None, :, 2] * np.sqrt(s)

    # ------------------------------------------------------------------ control and sensing
    def reset_queue(self, ids: np.ndarray, grip_cmd: np.ndarray) -> None:
        """Fill envs ids' action queues with "hold": no TCP motion, gripper command grip_cmd [n]."""
        self.queue[ids] = 0.0
        self.queue[ids, :, 3] = grip_cmd[:, None]

    def action(self, a: np.ndarray, ids: np.ndarray | None) -> np.ndarray:
        """The actions [n, 4] envs ids (None: all) apply this step for commanded actions a [n, 4]:
        clip(a + N(0, action_noise^2)), then delayed by latency_steps control steps."""
        rows = slice(None) if ids is None else ids
        if self.r.has("action_noise"):
            std = self.params["action_noise"][rows, None]
            a = np.clip(a + std * self.rng.standard_normal(a.shape), -1.0, 1.0)
        if not self.r.has("latency_steps"):
            return a
        q = self.queue[rows]
        q = np.concatenate([a[:, None], q[:, :-1]], axis=1)
        self.queue[rows] = q
        k = self.params["latency_steps"][rows].astype(np.int64)
        return q[np.arange(len(q)), k]

    def observe(self, obs: dict[str, np.ndarray], rows: np.ndarray | None, state_dim: int) -> None:
        """Add obs_noise to obs["state"] [n, S] and obs["privileged"] [n, P] in place; the
        privileged obs's first state_dim columns get the same noise as the state."""
        if not self.r.has("obs_noise"):
            return
        std = self.params["obs_noise"][slice(None) if rows is None else rows, None]
        priv = obs["privileged"]
        noise = std * self.rng.standard_normal(priv.shape)
        obs["privileged"] = (priv + noise).astype(priv.dtype)
        obs["state"] = (obs["state"] + noise[:, :state_dim]).astype(obs["state"].dtype)

    # ------------------------------------------------------------------ rendering
    def render_fields(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Per-env model fields for the renderer: name -> [n, ...] (empty when nothing visual)."""
        m, p, r, out = self.model, self.params, self.r, {}
        if r.has("camera_pos"):
            out["cam_pos"] = m.cam_pos[None] + p["camera_pos"][ids, None]
        if r.has("camera_rot"):
            q = _quat_from_rotvec(np.deg2rad(p["camera_rot"][ids]))  # in the camera's frame
            out["cam_quat"] = _quat_mul(m.cam_quat[None], q[:, None])
        if r.has("camera_fovy"):
            out["cam_fovy"] = m.cam_fovy[None] + p["camera_fovy"][ids, None]
        if r.has("light_tilt", "light_azimuth"):
            t = np.deg2rad(p["light_tilt"][ids]) if r.has("light_tilt") else np.zeros(len(ids))
            az = np.deg2rad(p["light_azimuth"][ids]) if r.has("light_azimuth") else np.zeros(len(ids))
            d = np.stack([np.sin(t) * np.cos(az), np.sin(t) * np.sin(az), -np.cos(t)], -1)
            out["light_dir"] = np.broadcast_to(d[:, None], (len(ids), m.nlight, 3))
        if r.has("light_intensity", "light_warmth"):
            scale = np.ones((len(ids), 3))
            if r.has("light_intensity"):
                scale *= p["light_intensity"][ids, None]
            if r.has("light_warmth"):
                w = p["light_warmth"][ids]
                scale *= np.stack([1 + w, np.ones_like(w), 1 - w], -1)
            out["light_diffuse"] = m.light_diffuse[None] * scale[:, None]
            out["light_ambient"] = m.light_ambient[None] * scale[:, None]
            out["vis.headlight.diffuse"] = m.vis.headlight.diffuse[None] * scale
            out["vis.headlight.ambient"] = m.vis.headlight.ambient[None] * scale
        return out

    def colors(self, ids: np.ndarray, colors: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Add the colour offsets of envs ids to colors (geom id -> rgba [n, 4], the episode's)."""
        if not self.r.has("table_color", "object_color"):
            return colors
        out = dict(colors)
        groups = [("table_color", ("table_top",)), ("object_color", OBJECT_GEOMS)]
        for knob, names in groups:
            if not self.r.has(knob):
                continue
            for name in names:
                gid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, name)
                if gid < 0:
                    continue
                base = out.get(gid, np.broadcast_to(self.model.geom_rgba[gid], (len(ids), 4)))
                rgba = np.array(base, np.float32)
                rgba[:, :3] = np.clip(rgba[:, :3] + self.params[knob][ids], 0.0, 1.0)
                out[gid] = rgba
        return out

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"randomization.{k}": v.copy() for k, v in self.params.items()}
        out["randomization.queue"] = self.queue.copy()
        out["randomization.rng_state"] = json.dumps(self.rng.bit_generator.state)
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in self.params:
            self.params[k][:] = np.asarray(state[f"randomization.{k}"])
        self.queue[:] = np.asarray(state["randomization.queue"])
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = json.loads(state["randomization.rng_state"])
        self.apply_physics(np.arange(len(self.queue)))

