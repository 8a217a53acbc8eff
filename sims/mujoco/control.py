"""Action semantics: float [B, 4] in [-1, 1] -> actuator targets.

  action[:, 0:3]  end-effector displacement: the TCP position target becomes the current TCP
                  plus action * EE_STEP (m), clipped to the workspace (the slide ranges), so the
                  gripper can never be driven through the table.
  action[:, 3]    gripper: -1 fully open (9 cm gap), +1 closed, continuous in between (the gap
                  target is (1 - a) * 4.5 cm; > ~0.1 squeezes a 4 cm cube).
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

from sims.mujoco.handles import cmd_to_gap
from sims.mujoco.scene import WORKSPACE_HIGH, WORKSPACE_LOW

EE_STEP = 0.02  # max TCP displacement per control step (m)
ACTION_DIM = 4
_LOW = np.array(WORKSPACE_LOW)
_HIGH = np.array(WORKSPACE_HIGH)


def apply_action(action: np.ndarray, tcp: np.ndarray, ctrl: np.ndarray) -> None:
    """Write controls in place: action float [n, 4] (already in [-1, 1]), tcp [n, 3] -> ctrl [n, 4]
    (numpy arrays, or torch tensors on one device)."""
    xp = array_namespace(action)
    for k in range(3):
        ctrl[:, k] = xp.clip(tcp[:, k] + action[:, k] * EE_STEP, min=float(_LOW[k]), max=float(_HIGH[k]))
    ctrl[:, 3] = cmd_to_gap(action[:, 3])


def expert_action(delta: np.ndarray, grip: np.ndarray | float) -> np.ndarray:
    """Scripted-policy helper: desired TCP displacement [n, 3] (m) and gripper command ([n] or
    scalar) -> float32 [n, 4] actions in [-1, 1]."""
    out = np.empty((len(delta), ACTION_DIM), np.float32)
    out[:, 0:3] = np.clip(delta / EE_STEP, -1.0, 1.0)
    out[:, 3] = grip
    return out
