"""The roles as plain classes: the same methods whether a backend keeps them in this process
or makes them Ray actors (embodied/distributed/backend.py). Arguments and results are
picklable: configs, tensors, small dataclasses.

Each role that draws random numbers owns its torch random stream: in one process the roles
would otherwise share torch's global generator, and the draws of one would shift the others',
so `local` and `ray` would differ. The rollout role swaps its stream in for each call (`OwnRng`:
the policy samples from the global generator); the learner's only draws, the minibatch
permutations, come from a torch.Generator of its own, so it never touches the global stream
and can update on a thread of its own while the rollout role infers (backend local, k >= 1).

Each role measures its own busy time: the methods marked `@busy` (env steps, inference, the
update, weight loads) add their wall seconds, and the CPU seconds of the thread that ran them,
to the role's counters, which `pop_busy_seconds()` returns and zeroes. The driver asks every
role once per iteration; the rest of the iteration's wall time the role was idle
(docs/distributed.md, "Per-role time").
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from embodied.config import EnvConfig, ExperimentConfig
from embodied.run.device import autocast, check_device, resolve_device, to_device, uses_bf16
from policies.base import ActOutput
from sims.vecenv import ChunkStepResult, EnvSpec, Obs

CPU = torch.device("cpu")


def where() -> dict[str, Any]:
    """{"pid": this process, "node": the Ray node id when run by Ray, else "local", "ip": the
    node's address (127.0.0.1 in one process), "thread": the name of the thread that runs the
    role's calls}."""
    node, ip = "local", "127.0.0.1"
    try:
        import ray

        if ray.is_initialized():
            node, ip = ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()
    except ImportError:
        pass
    return {"pid": os.getpid(), "node": node, "ip": ip, "thread": threading.current_thread().name}


def busy(method: Callable) -> Callable:
    """Count a role method's wall seconds as the role's busy time (and its thread's CPU seconds)."""

    @functools.wraps(method)
    def timed(self: "Role", *args: Any, **kwargs: Any) -> Any:
        t, c = time.perf_counter(), time.thread_time()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._busy_seconds += time.perf_counter() - t
            self._cpu_seconds += time.thread_time() - c

    return timed


class Role:
    """What every role answers: where it runs, and how long it was busy."""

    _busy_seconds = _cpu_seconds = 0.0

    def where(self) -> dict[str, Any]:
        return where()

    def pop_busy_seconds(self) -> tuple[float, float]:
        """(wall, CPU) seconds spent in @busy methods since the last call (or since the role was
        built). CPU is the calling thread's: all of a role's work when it computes on one thread
        (torch and the physics on 1 thread, as the roles are built)."""
        out = (self._busy_seconds, self._cpu_seconds)
        self._busy_seconds = self._cpu_seconds = 0.0
        return out


class OwnRng:
    """A role's own torch RNG stream: `with self.own_rng():` swaps it in for the call."""

    def init_rng(self, seed: int) -> None:
        state = torch.get_rng_state()
        torch.manual_seed(seed)
        self._rng = torch.get_rng_state()
        torch.set_rng_state(state)

    @contextmanager
    def own_rng(self) -> Iterator[None]:
        outer = torch.get_rng_state()
        torch.set_rng_state(self._rng)
        try:
            yield
        finally:
            self._rng = torch.get_rng_state()
            torch.set_rng_state(outer)


class EnvWorker(Role):
    """Envs [start, start + num_envs) of a batched env of env_cfg's task, in its own VecEnv.
    Resets are seeded per env as the full batch's would be (env i gets seed + i)."""

    def __init__(self, env_cfg: EnvConfig, start: int, num_envs: int, threads: int = 1):
        from embodied.run.env import build_env  # late: only env workers load the simulators

        self.start, self.num_envs = start, num_envs
        self.env = build_env(dataclasses.replace(env_cfg, num_threads=threads), num_envs)

    def spec(self) -> EnvSpec:
        return self.env.spec

    @busy
    def reset(self, seed: int) -> Obs:
        """-> the first observation, [n, ...] per key."""
        obs, _ = self.env.reset(seed=[seed + self.start + i for i in range(self.num_envs)])
        return obs

    @busy
    def reset_seeds(self, seeds: list[int]) -> Obs:
        """Reset env i from seeds[i] (GRPO: a group's envs share a seed) -> the first observation."""
        obs, _ = self.env.reset(seed=list(seeds))
        return obs

    @busy
    def step(self, actions: torch.Tensor) -> ChunkStepResult:
        """actions float32 [n, K, A] -> this shard's ChunkStepResult ([n, K] rewards / flags)."""
        from embodied.run.env import env_step

        return env_step(self.env, actions)

    def state_dict(self) -> dict[str, Any]:
        """The shard's env state (physics, counters, RNG) for an exact resume."""
        return self.env.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.load_state_dict(state)

    def close(self) -> None:
        self.env.close()


def role_device(cfg: ExperimentConfig) -> torch.device:
    """train.device inside a role: on Ray, `auto` is the GPU Ray gave this actor (Ray sets
    CUDA_VISIBLE_DEVICES, so it is cuda:0 here) and the CPU when it gave none; elsewhere (backend
    local) as in train.py."""
    try:
        import ray

        in_actor = ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except ImportError:
        in_actor = False
    if in_actor and check_device(cfg.train.device) == "auto" and not ray.get_gpu_ids():
        return torch.device("cpu")
    return resolve_device(cfg.train.device)


def build_role_policy(cfg: ExperimentConfig, spec: EnvSpec, seed: int,
                      device: torch.device | None = None) -> Any:
    """The policy as train.py builds it, initialised from `seed`, on `device` (default the CPU)."""
    from policies.registry import build_policy

    torch.manual_seed(seed)
    policy = build_policy(cfg.policy, spec, per_action_value=cfg.ppo.reward_level == "action")
    return policy.to(device) if device is not None else policy


class RolloutWorker(Role, OwnRng):
    """Policy inference for the env workers, on weights pushed by the learner (with a version)."""

    def __init__(self, cfg: ExperimentConfig, spec: EnvSpec, seed: int, threads: int = 1):
        torch.set_num_threads(threads)
        self.device = role_device(cfg)
        self.policy = build_role_policy(cfg, spec, seed, self.device)
        self.bf16 = uses_bf16(self.policy, self.device)
        self.version = -1  # no weights pushed yet
        self.init_rng(seed + 1)

    @busy
    @torch.no_grad()
    def act(self, obs: Obs) -> ActOutput:
        """obs [b, ...] -> the policy's ActOutput (actions [b, K, A], log_prob [b], value, replay),
        computed on the role's device and returned on the CPU (it crosses processes)."""
        with self.own_rng(), autocast(self.device, self.bf16):
            out = self.policy.act(to_device(obs, self.device))
        return to_device(out, CPU)

    @busy
    @torch.no_grad()
    def value(self, obs: Obs) -> torch.Tensor:
        """obs [b, ...] -> V [b] (or [b, n]); zeros for a critic-free policy."""
        if not self.policy.has_critic:
            return torch.zeros(len(next(v for v in obs.values() if torch.is_tensor(v))))
        with autocast(self.device, self.bf16):
            return self.policy.get_value(to_device(obs, self.device)).float().cpu()

    def has_critic(self) -> bool:
        return bool(self.policy.has_critic)

    @busy
    def set_weights(self, state: dict[str, torch.Tensor], version: int) -> int:
        self.policy.load_state_dict(state)
        self.version = version
        return version

    def state_dict(self) -> dict[str, Any]:
        """Its RNG stream (the weights come from the learner)."""
        return {"rng": self._rng}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rng = state["rng"]


class LearnerWorker(Role):
    """The PPO / GRPO learner of train.py on its own copy of the policy. With world_size > 1 it
    is one rank of a data-parallel group (embodied/distributed/data_parallel.py): it updates on
    its slice of the env dimension (GRPO: of the kept groups) and gradients are averaged over
    ranks. Its random stream is a torch.Generator (the minibatch permutations; the policies'
    `evaluate` draws nothing), never torch's global one."""

    def __init__(self, cfg: ExperimentConfig, spec: EnvSpec, seed: int, threads: int = 1,
                 rank: int = 0, world_size: int = 1, master: str | None = "127.0.0.1:29500"):
        from embodied.rl.registry import algorithm

        torch.set_num_threads(threads)
        self.device = role_device(cfg)
        self.policy = build_role_policy(cfg, spec, seed, self.device)
        self.algorithm = algorithm(cfg.train.algorithm)
        self.learner = self.algorithm.learner(cfg, self.policy)
        self.rank, self.world_size, self.version = rank, world_size, 0
        self.generator = torch.Generator().manual_seed(seed + 2 + rank)
        self.learner.generator = self.generator
        if world_size > 1 and master is not None:
            self.join(master)

    def rendezvous(self) -> str:
        """(rank 0) "ip:port": this host's address and a port free on it, for the group to join."""
        ip = where()["ip"]
        with socket.socket() as s:
            s.bind((ip, 0))
            return f"{ip}:{s.getsockname()[1]}"

    def join(self, master: str) -> None:
        """Join the data-parallel group at `master` (every rank at once; rank 0's weights win)."""
        from embodied.distributed.data_parallel import DataParallel

        self.dp = DataParallel(self.policy, self.rank, self.world_size, master)
        self.dp.attach(self.learner)

    @busy
    def observe(self, obs: Obs) -> None:
        """Update the observation normaliser (train.py does so with the first observation)."""
        self.policy.update_normalizer(to_device(obs, self.device))

    @busy
    def update(self, traj: Any) -> dict[str, float]:
        """One update on a Trajectory [T, B] (a rank takes its slice of B); the normaliser then
        sees the whole batch, as in train.py. Bumps the weight version."""
        traj = to_device(traj, self.device)  # arrives on the CPU; the update runs on the role's device
        batch = traj
        if self.world_size > 1:  # the algorithm's slice (GRPO: whole groups, weighed by their episodes)
            batch, self.dp.share = self.algorithm.shard(traj, self.learner, self.rank, self.world_size)
        stats = self.learner.update(batch)
        self.policy.update_normalizer(traj.obs)
        self.version += 1
        return stats

    def state_dict(self) -> dict[str, Any]:
        """The learner's state (optimiser, iteration, reward scaler), its RNG stream and version;
        the weights are saved with the policy."""
        return {"learner": self.learner.state_dict(), "rng": self.generator.get_state(), "version": self.version}

    def load_state_dict(self, state: dict[str, Any], weights: dict[str, torch.Tensor]) -> None:
        self.policy.load_state_dict(weights)
        self.learner.load_state_dict(state["learner"])
        self.generator.set_state(state["rng"])
        self.version = int(state["version"])

    @busy
    def weights(self) -> tuple[dict[str, torch.Tensor], int]:
        """(the policy's state_dict, its version)."""
        return {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}, self.version
