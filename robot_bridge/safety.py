"""The safety layer: every command passes `SafetyFilter.filter` before it can be sent.

Independent of transport and simulator. Per command, in this order:
  e-stop latched           -> refuse (nothing is sent, ever again, until `clear_estop`)
  observation too old      -> refuse (watchdog: stop commanding, the robot holds)
  faster than max_rate_hz  -> refuse
  wrong shape / NaN / inf  -> hold command (zero EE displacement, last gripper; or the
                              current joint positions)
  out of [action_low, action_high]                -> clamp
  ee_delta mode: |EE step| > max_delta            -> clamp
                 TCP target outside the workspace -> clamp onto the box (an axis already
                 outside may only move back towards it)
  joint mode:    target outside joint limits      -> clamp
                 |target - position| > min(max_delta, joint_vel_max / control_hz) -> clamp
Every intervention is counted (`counts`) and logged. A final check refuses any command that
still breaks a limit, so a command outside the limits is never returned.

`SafeVecEnv` applies the filter to any VecEnv (the MuJoCo suite, or RobotEnv).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from sims.vecenv import ChunkStepResult, EnvError, Obs, Seed, StepResult, VecEnv

log = logging.getLogger("robot_bridge.safety")
MODES = ("ee_delta", "joint")


@dataclass
class SafetyConfig:
    """Limits. ee_delta actions: [dx, dy, dz, gripper, ...] in action units, the TCP moving
    action * ee_step metres per step. joint actions: absolute joint targets (rad or m)."""

    action_dim: int = 4
    mode: str = "ee_delta"
    action_low: float = -1.0
    action_high: float = 1.0
    max_delta: float = 1.0  # per-step clamp: |EE action| (units) or |joint target - position|
    ee_step: float = 0.02  # metres of TCP motion per unit of EE action
    workspace_low: tuple[float, float, float] = (-0.25, -0.20, 0.015)
    workspace_high: tuple[float, float, float] = (0.25, 0.20, 0.30)
    joint_low: tuple[float, ...] | None = None
    joint_high: tuple[float, ...] | None = None
    joint_vel_max: float | None = None  # rad/s (or m/s), with control_hz
    control_hz: float = 20.0
    watchdog_s: float = 0.25  # observations older than this: stop commanding
    max_rate_hz: float = 0.0  # 0: no rate limit
    tol: float = 1e-9

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise EnvError(f"safety.mode: unknown {self.mode!r}; allowed: {', '.join(MODES)}")
        if not self.action_low < self.action_high:
            raise EnvError(f"safety.action_low/high: need low < high, got {self.action_low}, {self.action_high}")
        if self.max_delta <= 0 or self.watchdog_s <= 0 or self.control_hz <= 0:
            raise EnvError("safety.max_delta, watchdog_s, control_hz: must be > 0")
        if self.mode == "ee_delta" and not np.all(np.less(self.workspace_low, self.workspace_high)):
            raise EnvError(f"safety.workspace_low/high: need low < high per axis, got {self.workspace_low}, "
                           f"{self.workspace_high}")
        if self.mode == "joint" and (self.joint_low is None or self.joint_high is None
                                     or len(self.joint_low) != self.action_dim or len(self.joint_high) != self.action_dim):
            raise EnvError(f"safety.joint_low/high: joint mode needs {self.action_dim} lower and upper limits")


class SafetyFilter:
    """Turns a proposed action into a safe command, or None (send nothing)."""

    def __init__(self, config: SafetyConfig):
        self.cfg = config
        self.counts: Counter[str] = Counter()
        self.episode_counts: Counter[str] = Counter()  # since the last end_episode()
        self._estop = threading.Event()
        self._last_sent = -math.inf
        self.hold_gripper = 0.0  # gripper value of the hold command (ee_delta mode)
        self._lo = np.asarray(config.workspace_low, np.float64)
        self._hi = np.asarray(config.workspace_high, np.float64)

    # ------------------------------------------------------------------ e-stop
    def estop(self, reason: str = "e-stop") -> None:
        """Latch the e-stop: every later command is refused. Thread safe."""
        if not self._estop.is_set():
            log.warning("safety: e-stop engaged (%s); commanding stopped", reason)
        self._estop.set()

    def clear_estop(self) -> None:
        self._estop.clear()

    @property
    def estopped(self) -> bool:
        return self._estop.is_set()

    def _count(self, what: str, detail: str = "") -> None:
        self.counts[what] += 1
        self.episode_counts[what] += 1
        log.debug("safety: %s intervention #%d %s", what, self.counts[what], detail)

    def limit(self, what: str) -> str:
        """What an intervention of kind `what` means, with the configured limit it enforced."""
        c = self.cfg
        return {"range": f"actions clipped to [{c.action_low:g}, {c.action_high:g}]",
                "delta": f"translation clipped to +-{c.max_delta:g} per step",
                "workspace": f"target held inside the workspace {list(c.workspace_low)}..{list(c.workspace_high)}",
                "joint_limit": "joint targets clipped to the joint limits",
                "velocity": "joint step clipped to the velocity limit",
                "watchdog": f"no command: the observation was older than {c.watchdog_s:g} s",
                "rate": f"no command: faster than {c.max_rate_hz:g} Hz",
                "shape": f"held: the action was not [{c.action_dim}]",
                "nonfinite": "held: the action was not finite",
                "refused": "no command: it would break a limit",
                "estop": "no command: e-stop engaged",
                "no_position": "no motion: no robot position to check against"}.get(what, what)

    def end_episode(self, label: str = "episode") -> str | None:
        """One line summarising this episode's interventions (kind, count, the limit hit),
        logged once; None (and nothing logged) if there were none. Starts the next episode's count."""
        if not self.episode_counts:
            return None
        parts = [f"{what} x{n} ({self.limit(what)})" for what, n in self.episode_counts.most_common()]
        self.episode_counts = Counter()
        line = f"safety: {label}: " + "; ".join(parts)
        log.warning("%s", line)
        return line

    # ------------------------------------------------------------------ the filter
    def hold(self, position: np.ndarray) -> np.ndarray:
        """The command that keeps the robot where it is."""
        if self.cfg.mode == "ee_delta":
            out = np.zeros(self.cfg.action_dim)
            if self.cfg.action_dim > 3:
                out[3] = np.clip(self.hold_gripper, self.cfg.action_low, self.cfg.action_high)
            return out
        return np.clip(np.asarray(position, np.float64), self.cfg.joint_low, self.cfg.joint_high)

    def filter(self, action: Any, position: Sequence[float], obs_age: float = 0.0,
               now: float | None = None) -> np.ndarray | None:
        """action: float [A] (or [1, A]); position: TCP xyz [3] (ee_delta) or joint positions [A]
        (joint); obs_age: seconds since the newest observation. Returns float64 [A] or None."""
        cfg = self.cfg
        now = time.monotonic() if now is None else now
        if self._estop.is_set():
            self._count("estop")
            return None
        if not obs_age <= cfg.watchdog_s:  # also catches NaN ages
            self._count("watchdog", f"(observation {obs_age:.3f} s old)")
            return None
        if cfg.max_rate_hz > 0 and now - self._last_sent < 1.0 / cfg.max_rate_hz - 1e-6:
            self._count("rate")
            return None
        pos = np.asarray(position, np.float64).reshape(-1)
        a = self._as_array(action)
        if a is None:
            self._count("shape", f"(expected [{cfg.action_dim}])")
            a = self.hold(pos)
        elif not np.isfinite(a).all():
            self._count("nonfinite")
            a = self.hold(pos)
        clipped = np.clip(a, cfg.action_low, cfg.action_high) if cfg.mode == "ee_delta" else a
        if not np.array_equal(clipped, a):
            self._count("range")
        a = self._ee(clipped, pos) if cfg.mode == "ee_delta" else self._joint(clipped, pos)
        if not self.within_limits(a, pos):  # defence in depth: never return a bad command
            self._count("refused")
            return None
        self._last_sent = now
        if cfg.mode == "ee_delta" and cfg.action_dim > 3:
            self.hold_gripper = float(a[3])
        return a

    def _as_array(self, action: Any) -> np.ndarray | None:
        try:
            if isinstance(action, torch.Tensor):
                action = action.detach().cpu().to(torch.float64).numpy()
            a = np.asarray(action, dtype=np.float64)
        except (TypeError, ValueError, RuntimeError):
            return None
        if a.ndim == 2 and a.shape[0] == 1:
            a = a[0]
        return a.copy() if a.shape == (self.cfg.action_dim,) else None

    def _ee(self, a: np.ndarray, tcp: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        d = np.clip(a[:3], -cfg.max_delta, cfg.max_delta)
        if not np.array_equal(d, a[:3]):
            self._count("delta")
        if tcp.shape == (3,) and np.isfinite(tcp).all():
            lo, hi = np.minimum(self._lo, tcp), np.maximum(self._hi, tcp)
            target = tcp + d * cfg.ee_step
            inside = np.clip(target, lo, hi)
            if not np.array_equal(inside, target):
                self._count("workspace")
                d = np.clip((inside - tcp) / cfg.ee_step, -cfg.max_delta, cfg.max_delta)
        else:
            self._count("no_position")
            d = np.zeros(3)
        out = a.copy()
        out[:3] = d
        return out

    def _joint(self, a: np.ndarray, pos: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        t = np.clip(a, cfg.joint_low, cfg.joint_high)
        if not np.array_equal(t, a):
            self._count("joint_limit")
        step = cfg.max_delta if cfg.joint_vel_max is None else min(cfg.max_delta, cfg.joint_vel_max / cfg.control_hz)
        if pos.shape == t.shape and np.isfinite(pos).all():
            lim = np.clip(t, pos - step, pos + step)
            if not np.array_equal(lim, t):
                self._count("velocity")
            return np.clip(lim, cfg.joint_low, cfg.joint_high)
        self._count("no_position")
        return t

    def within_limits(self, cmd: Any, position: Sequence[float]) -> bool:
        """Whether a command respects every limit given the robot's position (what a receiver
        can check on its side)."""
        cfg, tol = self.cfg, self.cfg.tol
        c = np.asarray(cmd, np.float64)
        pos = np.asarray(position, np.float64).reshape(-1)
        if c.shape != (cfg.action_dim,) or not np.isfinite(c).all():
            return False
        if cfg.mode == "ee_delta":
            if (c < cfg.action_low - tol).any() or (c > cfg.action_high + tol).any():
                return False
            if (np.abs(c[:3]) > cfg.max_delta + tol).any():
                return False
            if pos.shape == (3,) and np.isfinite(pos).all():
                target = pos + c[:3] * cfg.ee_step
                return bool(((target >= np.minimum(self._lo, pos) - tol) & (target <= np.maximum(self._hi, pos) + tol)).all())
            return bool((c[:3] == 0).all())
        if (c < np.asarray(cfg.joint_low) - tol).any() or (c > np.asarray(cfg.joint_high) + tol).any():
            return False
        if pos.shape == c.shape:
            step = cfg.max_delta if cfg.joint_vel_max is None else min(cfg.max_delta, cfg.joint_vel_max / cfg.control_hz)
            return bool((np.abs(c - pos) <= step + tol).all())
        return True


class SafeVecEnv(VecEnv):
    """A VecEnv whose actions pass one SafetyFilter per env (positions from obs["state"][:, 0:3]
    in ee_delta mode, obs["state"][:, 0:A] in joint mode). Refused commands become holds in
    simulation (a simulator must step); after `estop()` every step raises EnvError."""

    def __init__(self, env: VecEnv, config: SafetyConfig):
        self.env, self.spec, self.device = env, env.spec, env.device
        self.filters = [SafetyFilter(config) for _ in range(env.num_envs)]
        self._obs: Obs | None = None

    @property
    def counts(self) -> Counter[str]:
        return sum((f.counts for f in self.filters), Counter())

    def estop(self) -> None:
        for f in self.filters:
            f.estop()

    def _positions(self) -> np.ndarray:
        state = self._obs["state"].detach().cpu().double().numpy() if self._obs is not None else None
        n = 3 if self.filters[0].cfg.mode == "ee_delta" else self.filters[0].cfg.action_dim
        return state[:, :n] if state is not None else np.full((self.num_envs, n), np.nan)

    def safe_actions(self, action: Any) -> torch.Tensor:
        """float32 [B, A] commands that passed the filters; EnvError after an e-stop."""
        if self.filters[0].estopped:
            raise EnvError("safety: e-stop engaged; no further commands")
        pos = self._positions()
        rows = []
        for i, f in enumerate(self.filters):
            try:
                a_i = action[i] if (hasattr(action, "__len__") and len(action) == self.num_envs) else action
            except (TypeError, IndexError, KeyError):
                a_i = None
            cmd = f.filter(a_i, pos[i])
            rows.append(f.hold(pos[i]) if cmd is None else cmd)
        return torch.as_tensor(np.stack(rows), dtype=torch.float32, device=self.device)

    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        obs, info = self.env.reset(seed=seed, env_ids=env_ids)
        self._obs = obs
        self._set_hold_gripper(obs)
        return obs, info

    def _set_hold_gripper(self, obs: Obs) -> None:
        if self.filters[0].cfg.mode == "ee_delta" and obs["state"].shape[1] >= 9:
            for f, g in zip(self.filters, obs["state"][:, 8].tolist()):  # the gripper command now
                f.hold_gripper = g

    def step(self, action: Any) -> StepResult:
        res = self.env.step(self.safe_actions(action))
        self._obs = res.obs
        if res.done.any():
            self._set_hold_gripper(res.obs)
        return res

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        """Substep by substep through `step`, so each command is filtered against the state it
        acts on. An env that finishes holds for the rest of the chunk (exact for B = 1)."""
        B, K = actions.shape[0], actions.shape[1]
        reward = torch.zeros(B, K)
        term, trunc, valid = (torch.zeros(B, K, dtype=torch.bool) for _ in range(3))
        success = torch.zeros(B, K, dtype=torch.bool)
        active = torch.ones(B, dtype=torch.bool)
        final, res = None, None
        for k in range(K):
            res = self.step(actions[:, k])
            valid[:, k] = active
            reward[:, k] = torch.where(active, res.reward, torch.zeros(B))
            term[:, k], trunc[:, k] = res.terminated & active, res.truncated & active
            success[:, k] = res.info["success"] & active
            if res.final_obs is not None and final is None:
                final = res.final_obs
            active &= ~res.done
            if not active.any():
                break
        return ChunkStepResult(obs=res.obs, reward=reward, terminated=term, truncated=trunc,
                               info={"success": success}, valid=valid, final_obs=final)

    def close(self) -> None:
        self.env.close()
