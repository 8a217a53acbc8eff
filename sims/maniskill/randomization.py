"""Domain randomisation of ManiSkillVecEnv: the knobs ManiSkill 3's API allows without a rebuild.

The knobs, their allowed values, parsing and draws are those of sims/mujoco/randomization.py
and sims/mujoco/randomizer.py (one spec, one validation); this module says which of them a
ManiSkill task supports and where each one lives:

  physics   friction, mass, actuator_gain: written into each env's own PhysX scene at its
            reset (`LocalEnvs.set_physics`: collision-shape materials, the loose objects'
            mass and inertia, the robot's joint drives). physx_cpu only: there every env is its
            own ManiSkill instance; ManiSkill sets these on physx_cuda only before the GPU
            simulation starts, for all envs at once.
  control   latency_steps, action_noise: the action each env applies, in the wrapper's step.
  sensing   obs_noise: Gaussian noise on the wrapper's `state` and `privileged` observations.

Lighting, colours and the camera are set while ManiSkill builds its scene (`_load_lighting`,
render materials, `sensor_configs`): redrawing them per reset means a reconfigure, so they
are refused with a one-line error naming the knob.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from sims.mujoco.randomization import Randomization, RandomizationError, resolve as resolve_block
from sims.mujoco.randomizer import SEED_TAG, Randomizer
from sims.vecenv import EnvError

PHYSICS_KNOBS = ("friction", "mass", "actuator_gain")
WRAPPER_KNOBS = ("latency_steps", "action_noise", "obs_noise")
SUPPORTED = PHYSICS_KNOBS + WRAPPER_KNOBS


def resolve(randomization: Any, reality: Any, sim_backend: str) -> Randomization | None:
    """The env's randomisation (None: nominal); EnvError (one line) for a knob ManiSkill lacks."""
    try:
        r = resolve_block(randomization, reality)
    except RandomizationError as e:
        raise EnvError(str(e)) from None
    if r is None:
        return None
    field = f"env.reality.{r.name}" if reality is not None else "env.randomization"
    for knob in r.knobs:
        if knob not in SUPPORTED:
            raise EnvError(f"{field}.{knob}: not supported for ManiSkill tasks (lighting, colours and "
                           f"cameras are fixed when ManiSkill builds the scene); supported: "
                           f"{', '.join(SUPPORTED)}")
        if knob in PHYSICS_KNOBS and sim_backend == "physx_cuda":
            raise EnvError(f"{field}.{knob}: ManiSkill changes physics per env only on physx_cpu (on "
                           f"physx_cuda only before the simulation starts); supported on physx_cuda: "
                           f"{', '.join(WRAPPER_KNOBS)}")
    return r


class MsRandomizer(Randomizer):
    """The MuJoCo Randomizer's draws, action queue, noise and checkpoints over ManiSkill envs:
    physics values go to `set_physics(ids, {knob: float64 [n]})` (the backend's) instead of a
    MuJoCo batch; the action queue holds the task's action_dim."""

    def __init__(self, r: Randomization, num_envs: int, action_dim: int, seed: int | None,
                 set_physics: Callable[[np.ndarray, dict[str, np.ndarray]], Any]):
        self.r, self.set_physics = r, set_physics
        self.params = r.nominal(num_envs)
        self.rng = np.random.default_rng(None if seed is None else np.random.SeedSequence([seed, SEED_TAG]))
        lag = int(r.high["latency_steps"]) if r.has("latency_steps") else 0
        self.queue = np.zeros((num_envs, lag + 1, action_dim))  # [B, L, A], newest action first

    def apply_physics(self, ids: np.ndarray) -> None:
        """Write the physics knobs of envs ids into their PhysX scenes (a no-op without any)."""
        knobs = [k for k in PHYSICS_KNOBS if self.r.has(k)]
        if knobs and len(ids):
            self.set_physics(np.asarray(ids), {k: self.params[k][ids].copy() for k in knobs})

    def reset_queue(self, ids: np.ndarray, hold: np.ndarray) -> None:
        """Fill envs ids' action queues with hold [n, A]: no arm motion, the reset's gripper command."""
        self.queue[ids] = np.asarray(hold, np.float64)[:, None]

    def render_fields(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {}

    def colors(self, ids: np.ndarray, colors: dict) -> dict:
        return colors
