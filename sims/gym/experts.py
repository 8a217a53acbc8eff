"""Scripted experts for gym presets, on the privileged observation of the env's mapping.

Reacher-v5: a joint-space PD controller through the arm's Jacobian (two links, 0.1 and 0.11 m):
torque = KP J(q)^T (target - fingertip) - KD qdot, clipped to the actions' [-1, 1]. It reads the
raw observation's columns (cos q [0:2], sin q [2:4], qdot [6:8], fingertip - target [8:10])
wherever the mapping put them in "privileged".
"""

from __future__ import annotations

import numpy as np

from sims.gym.mapping import GymMapping

L1, L2 = 0.1, 0.11  # m: Reacher's links
KP, KD = 8.0, 0.02  # action per m of error through J^T; per rad/s (gear 200: small gains, 50 Hz)


class ReacherExpert:
    """privileged obs float [B, P] -> actions float32 [B, 2] (torques in [-1, 1])."""

    def __init__(self, priv_cols: list[int]):
        where = {raw: k for k, raw in enumerate(priv_cols)}
        self.cols = [where[i] for i in (0, 1, 2, 3, 6, 7, 8, 9)]  # every column it reads must be there

    def __call__(self, privileged: np.ndarray) -> np.ndarray:
        p = np.asarray(privileged, np.float64)[:, self.cols]
        c1, c2, s1, s2, qd, d = p[:, 0], p[:, 1], p[:, 2], p[:, 3], p[:, 4:6], p[:, 6:8]
        q1, q2 = np.arctan2(s1, c1), np.arctan2(s2, c2)
        s12, c12 = np.sin(q1 + q2), np.cos(q1 + q2)
        J = np.stack([np.stack([-L1 * s1 - L2 * s12, -L2 * s12], -1),
                      np.stack([L1 * c1 + L2 * c12, L2 * c12], -1)], 1)  # [B, 2 (xy), 2 (joints)]
        torque = KP * np.einsum("bij,bi->bj", J, -d) - KD * qd
        return np.clip(torque, -1.0, 1.0).astype(np.float32)

    def reset(self, env_ids: np.ndarray, privileged: np.ndarray) -> None:
        pass


EXPERTS = {"Reacher-v5": ReacherExpert}


def expert_for(m: GymMapping, priv_cols: list[int]) -> ReacherExpert:
    from sims.vecenv import EnvError

    if m.env_id not in EXPERTS:
        raise EnvError(f"expert: gym:{m.env_id} has no scripted expert; allowed: "
                       + ", ".join(f"gym:{k}" for k in EXPERTS))
    try:
        return EXPERTS[m.env_id](priv_cols)
    except KeyError as e:
        raise EnvError(f"expert: gym:{m.env_id}'s expert reads observation column {e}, which the mapping's "
                       f"privileged leaves out; allowed: a mapping whose privileged holds every column") from None
