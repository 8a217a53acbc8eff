"""Safety layer in simulation: fuzzed actions never reach the env outside the limits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_bridge.safety import SafeVecEnv, SafetyConfig, SafetyFilter
from sims.registry import make_env
from sims.vecenv import EnvError, StepResult, VecEnv

TIGHT = SafetyConfig(max_delta=0.5, workspace_low=(-0.15, -0.12, 0.05), workspace_high=(0.15, 0.12, 0.20))


class CheckingEnv(VecEnv):
    """The receiving side: checks every action it is given against the limits and the TCP
    it is at, before stepping the simulator."""

    def __init__(self, env: VecEnv, config: SafetyConfig):
        self.env, self.spec, self.device = env, env.spec, env.device
        self.checker = SafetyFilter(config)
        self.received = 0
        self.violations: list[tuple[list[float], list[float]]] = []
        self._tcp = None

    def reset(self, seed=None, env_ids=None):
        obs, info = self.env.reset(seed=seed, env_ids=env_ids)
        self._tcp = obs["state"][:, :3].double().numpy()
        return obs, info

    def step(self, action: torch.Tensor) -> StepResult:
        assert isinstance(action, torch.Tensor) and action.shape == (self.num_envs, 4)
        for a, tcp in zip(action.double().numpy(), self._tcp):
            self.received += 1
            if not self.checker.within_limits(a, tcp):
                self.violations.append((a.tolist(), tcp.tolist()))
        res = self.env.step(action)
        self._tcp = res.obs["state"][:, :3].double().numpy()
        return res


def fuzz_actions(n: int, seed: int = 0):
    """n adversarial actions: random, huge, NaN, inf, wrong shapes and types, and runs that
    push out of the workspace."""
    rng = np.random.default_rng(seed)
    push = rng.choice([-1.0, 1.0], 3)
    for i in range(n):
        kind = rng.integers(0, 9)
        if kind == 0:
            yield torch.as_tensor(rng.uniform(-1, 1, (1, 4)), dtype=torch.float32)
        elif kind == 1:
            yield torch.as_tensor(rng.normal(0, 1e6, (1, 4)), dtype=torch.float32)
        elif kind == 2:
            a = rng.uniform(-1, 1, (1, 4))
            a[0, rng.integers(0, 4)] = rng.choice([np.nan, np.inf, -np.inf])
            yield torch.as_tensor(a, dtype=torch.float32)
        elif kind == 3:
            shape = [(3,), (5,), (1, 5), (2, 4), (1, 1, 4), (), (0,)][rng.integers(0, 7)]
            yield torch.as_tensor(rng.uniform(-5, 5, shape), dtype=torch.float32)
        elif kind == 4:
            yield [None, "left", {"x": 1}, object(), [[1, 2, 3, 4, 5]]][rng.integers(0, 5)]
        elif kind == 5:
            yield torch.full((1, 4), float(rng.choice([1e30, -1e30, 3.0])))
        else:  # long pushes towards a corner of (and beyond) the workspace
            if i % 200 == 0:
                push = rng.choice([-1.0, 1.0], 3)
            yield torch.as_tensor([[*push * rng.uniform(0.5, 50), rng.uniform(-1, 1)]], dtype=torch.float32)


def test_fuzzed_actions_never_leave_limits_in_sim():
    inner = CheckingEnv(make_env("Reach", 1, num_threads=1, seed=0), TIGHT)
    env = SafeVecEnv(inner, TIGHT)
    env.reset(seed=0)
    n = 10_000
    for action in fuzz_actions(n):
        env.step(action)
    assert inner.received == n  # every step reached the env, as a safe command
    assert inner.violations == []
    counts = env.counts
    for what in ("shape", "nonfinite", "range", "delta", "workspace"):
        assert counts[what] > 0, what
    env.close()


def test_safe_env_keeps_policy_actions_inside_unchanged():
    env = SafeVecEnv(make_env("Reach", 2, num_threads=1, seed=0), SafetyConfig())
    env.reset(seed=[1, 2])
    a = torch.tensor([[0.1, -0.2, 0.05, 0.3], [0.0, 0.0, -0.1, -1.0]])
    assert torch.allclose(env.safe_actions(a), a)
    assert sum(env.counts.values()) == 0


def test_estop_stops_the_sim_env():
    env = SafeVecEnv(make_env("Reach", 1, num_threads=1, seed=0), SafetyConfig())
    env.reset(seed=0)
    env.step(torch.zeros(1, 4))
    env.estop()
    with pytest.raises(EnvError, match="e-stop"):
        env.step(torch.zeros(1, 4))


def test_filter_watchdog_rate_and_estop():
    f = SafetyFilter(SafetyConfig(max_rate_hz=10.0, watchdog_s=0.1))
    tcp = np.zeros(3)
    assert f.filter([0.1, 0, 0, 0], tcp, obs_age=0.01, now=0.0) is not None
    assert f.filter([0.1, 0, 0, 0], tcp, obs_age=0.01, now=0.05) is None  # 20 Hz > 10 Hz
    assert f.filter([0.1, 0, 0, 0], tcp, obs_age=0.2, now=0.2) is None  # stale observation
    assert f.filter([0.1, 0, 0, 0], tcp, obs_age=float("nan"), now=0.3) is None
    assert f.filter([0.1, 0, 0, 0], tcp, obs_age=0.01, now=0.4) is not None
    f.estop()
    assert f.filter([0.1, 0, 0, 0], tcp, obs_age=0.0, now=1.0) is None
    assert (f.counts["rate"], f.counts["watchdog"], f.counts["estop"]) == (1, 2, 1)


def test_filter_joint_mode_limits():
    cfg = SafetyConfig(action_dim=2, mode="joint", joint_low=(-1.0, 0.0), joint_high=(1.0, 2.0),
                       joint_vel_max=2.0, control_hz=20.0, max_delta=1.0)
    f = SafetyFilter(cfg)
    pos = np.array([0.95, 1.0])
    cmd = f.filter([5.0, 0.5], pos)
    assert np.allclose(cmd, [1.0, 0.9])  # joint limit, then 2 rad/s * 0.05 s = 0.1 per step
    assert f.within_limits(cmd, pos) and not f.within_limits([1.0, 0.5], pos)
    assert np.allclose(f.filter([np.nan, 0.0], pos), [0.95, 1.0])  # hold where it is
    with pytest.raises(EnvError, match="safety.mode"):
        SafetyConfig(mode="torque")
    with pytest.raises(EnvError, match="joint_low/high"):
        SafetyConfig(mode="joint", action_dim=2)


def test_interventions_summarised_once_per_episode_with_the_limit(caplog):
    """Issue 37: no line per intervention; one line per episode naming each kind, its count and
    the limit it enforced."""
    import logging

    f = SafetyFilter(SafetyConfig())
    with caplog.at_level(logging.WARNING, logger="robot_bridge.safety"):
        for _ in range(7):
            f.filter(np.array([3.0, 0.0, 0.0, 0.0]), np.zeros(3), now=None)
        assert not caplog.records  # nothing while the episode runs
        line = f.end_episode()
        assert f.end_episode() is None  # counted afresh for the next episode
    assert [r.getMessage() for r in caplog.records] == [line]
    assert line == "safety: episode: range x7 (actions clipped to [-1, 1])"
    assert f.counts["range"] == 7
