"""Domain randomisation on the MuJoCo Warp backend: the C backend's draws, applied on the device.

The knob values are drawn exactly as on the C backend (`Randomizer.draw`: host numpy, from each
env's seed on a seeded reset, else from the randomisation's own stream), so equal seeds give equal
knob values on both backends. Where each knob acts on warp:

  physics    friction, mass, actuator_gain: per-world model fields of the device model (batched
             `geom_friction`, `body_mass` / `body_inertia`, `actuator_gainprm` / `biasprm`),
             written for the envs being reset; after a mass change `set_const` recomputes the
             derived constants of every world.
  control    latency_steps, action_noise: a device queue of each env's last actions and device
             noise (a torch generator seeded from the randomisation's stream).
  sensing    obs_noise: device noise on `state` and `privileged`.
  colours    table_color, object_color: offsets on the batched `geom_rgba`.

Not on warp yet: the camera and light knobs (MuJoCo Warp's ray tracer shares its precomputed rays
and its headlight across worlds); asking for one is a one-line error.
"""

from __future__ import annotations

import json
from typing import Any

import mujoco
import numpy as np
import torch

from sims.mujoco.handles import Handles
from sims.mujoco.randomization import KNOBS, Randomization
from sims.mujoco.randomizer import SEED_TAG, OBJECT_GEOMS, Randomizer

WARP_KNOBS = ("friction", "mass", "actuator_gain", "latency_steps", "action_noise", "obs_noise", "table_color",
              "object_color")
# the device model's fields each physics knob writes, batched per world (put_model's batch_sizes)
BATCHED = {"friction": ("geom_friction",), "actuator_gain": ("actuator_gainprm", "actuator_biasprm"),
           "mass": ("body_mass", "body_inertia", "body_subtreemass", "body_invweight0", "dof_invweight0",
                    "tendon_invweight0", "actuator_acc0")}


def unsupported(r: Randomization) -> list[str]:
    """The knobs of r that the warp backend does not apply (a knob pinned at its nominal value
    changes nothing, so it is accepted)."""
    return [k for k in r.knobs if k not in WARP_KNOBS
            and not (np.all(r.low[k] == KNOBS[k].nominal) and np.all(r.high[k] == KNOBS[k].nominal))]


class WarpRandomizer(Randomizer):
    """`params` (host, float64 [B, *shape] per knob) and their effects on a WarpVecEnv's device.

    fields: the device model's arrays as torch views (name -> tensor [B, ...]) for the batched
    fields of the knobs in use; set_const: recomputes the derived constants (after mass changes).
    """

    def __init__(self, r: Randomization, model: mujoco.MjModel, h: Handles, num_envs: int, seed: int | None,
                 fields: dict[str, torch.Tensor], set_const, device: torch.device):
        self.r, self.model, self.batch, self.h = r, model, None, h
        self.params = r.nominal(num_envs)
        self.rng = np.random.default_rng(None if seed is None else np.random.SeedSequence([seed, SEED_TAG]))
        self.fields, self._set_const, self.device = fields, set_const, device
        self._cube_body = int(model.geom_bodyid[h.cube_geom]) if h.cube_geom >= 0 else -1
        self._const_changed = False  # set_const has run: the derived constants are the device's own
        lag = int(r.high["latency_steps"]) if r.has("latency_steps") else 0
        self.queue = torch.zeros((num_envs, lag + 1, 4), device=device)  # [B, L, 4], newest action first
        self._refresh_step_knobs()
        self._gen = torch.Generator(device=device)
        self._reseed_noise()
        self._nominal = {k: torch.as_tensor(np.array(getattr(model, k)), dtype=torch.float32, device=device)
                         for k in ("geom_friction", "body_mass", "body_inertia", "actuator_gainprm",
                                   "actuator_biasprm", "geom_rgba")}

    def _refresh_step_knobs(self) -> None:
        """Device copies float64 [B] of the knobs applied at every step (read there without a copy)."""
        self.step_knobs = {k: torch.as_tensor(self.params[k], device=self.device)
                           for k in ("action_noise", "latency_steps", "obs_noise") if self.r.has(k)}

    def _reseed_noise(self) -> None:
        self._gen.manual_seed(int(self.rng.integers(2 ** 62)))

    def reseed(self, seeds: list[int]) -> None:
        super().reseed(seeds)
        self._reseed_noise()

    # ------------------------------------------------------------------ physics
    def apply_physics(self, ids: np.ndarray) -> None:
        """Write the physics knobs of envs ids into the device model's per-world fields (and refresh
        the device copies of the per-step knobs, which `draw` and `load_state_dict` changed)."""
        self._refresh_step_knobs()
        rows = torch.from_numpy(np.asarray(ids, np.int64)).to(self.device)

        def knob(name: str) -> torch.Tensor:
            return torch.as_tensor(self.params[name][ids], dtype=torch.float32, device=self.device)

        f, nom = self.fields, self._nominal
        if self.r.has("friction"):
            f["geom_friction"][rows, :, 0] = nom["geom_friction"][None, :, 0] * knob("friction")[:, None]
        if self.r.has("actuator_gain"):
            s = knob("actuator_gain")[:, None]
            f["actuator_gainprm"][rows, :, 0] = nom["actuator_gainprm"][None, :, 0] * s
            f["actuator_biasprm"][rows, :, 1] = nom["actuator_biasprm"][None, :, 1] * s
            f["actuator_biasprm"][rows, :, 2] = nom["actuator_biasprm"][None, :, 2] * s.sqrt()
        if self.r.has("mass") and self._cube_body >= 0:
            s, b = knob("mass"), self._cube_body
            f["body_mass"][rows, b] = nom["body_mass"][b] * s
            f["body_inertia"][rows, b] = nom["body_inertia"][b] * s[:, None]
            if self._const_changed or np.any(self.params["mass"] != 1.0):  # nominal masses: put_model's constants
                self._set_const()
                self._const_changed = True

    # ------------------------------------------------------------------ control and sensing
    def reset_queue(self, ids: np.ndarray, grip_cmd: np.ndarray) -> None:
        rows = torch.from_numpy(np.asarray(ids, np.int64)).to(self.device)
        self.queue[rows] = 0.0
        self.queue[rows, :, 3] = torch.as_tensor(grip_cmd, dtype=torch.float32, device=self.device)[:, None]

    def action(self, a: torch.Tensor, ids: Any = None) -> torch.Tensor:
        """The actions [B, 4] every env applies for commanded actions a [B, 4] (see Randomizer.action)."""
        if self.r.has("action_noise"):
            std = self.step_knobs["action_noise"].to(a.dtype)[:, None]
            a = (a + std * torch.randn(a.shape, generator=self._gen, device=a.device, dtype=a.dtype)).clamp(-1, 1)
        if not self.r.has("latency_steps"):
            return a
        self.queue = torch.cat([a[:, None], self.queue[:, :-1]], dim=1)
        k = self.step_knobs["latency_steps"].long()
        return self.queue[torch.arange(len(a), device=a.device), k]

    def observe(self, obs: dict[str, torch.Tensor], rows: torch.Tensor | None, state_dim: int) -> None:
        """Add obs_noise to obs["state"] and obs["privileged"] (the same noise on the state columns)."""
        if not self.r.has("obs_noise"):
            return
        std = self.step_knobs["obs_noise"].float()
        std = (std if rows is None else std[rows])[:, None]
        priv = obs["privileged"]
        noise = std * torch.randn(priv.shape, generator=self._gen, device=priv.device)
        obs["privileged"] = priv + noise
        obs["state"] = obs["state"] + noise[:, :state_dim]

    # ------------------------------------------------------------------ colours
    def recolor(self, ids: np.ndarray, rgba: torch.Tensor) -> None:
        """Add the colour offsets of envs ids to their rows of rgba (the batched geom_rgba [B, ngeom,
        4], already holding the episode's colours)."""
        rows = torch.from_numpy(np.asarray(ids, np.int64)).to(self.device)
        for knob, names in (("table_color", ("table_top",)), ("object_color", OBJECT_GEOMS)):
            if not self.r.has(knob):
                continue
            off = torch.as_tensor(self.params[knob][ids], dtype=torch.float32, device=self.device)
            for name in names:
                gid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, name)
                if gid >= 0:
                    rgba[rows, gid, :3] = (rgba[rows, gid, :3] + off).clamp(0.0, 1.0)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"randomization.{k}": v.copy() for k, v in self.params.items()}
        out["randomization.queue"] = self.queue.cpu().numpy().copy()
        out["randomization.rng_state"] = json.dumps(self.rng.bit_generator.state)
        out["randomization.noise_state"] = self._gen.get_state().cpu().numpy().copy()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in self.params:
            self.params[k][:] = np.asarray(state[f"randomization.{k}"])
        self.queue = torch.as_tensor(np.asarray(state["randomization.queue"]), dtype=torch.float32,
                                     device=self.device)
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = json.loads(state["randomization.rng_state"])
        self._gen.set_state(torch.as_tensor(np.asarray(state["randomization.noise_state"]), dtype=torch.uint8).cpu())
        self.apply_physics(np.arange(len(self.queue)))
