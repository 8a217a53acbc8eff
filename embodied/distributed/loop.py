"""The synchronous training loop over roles: collect on the rollout role's weights, update on
the learner(s), push the new weights (with their version) to the rollout role. The same loop
runs with `backend: local` (one process) and `backend: ray` (actors); with a fixed seed both
give identical weights (tests/distributed/test_distributed_roles.py).

`train_roles` is the Python API (a fixed number of iterations, optionally up to k versions stale);
`embodied train` with train.backend / train.placement runs embodied/distributed/trainer.py,
train.py's loop with evaluation, checkpoints and exact resume over the same roles.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch

from embodied.config import ExperimentConfig, with_stale_defaults
from embodied.distributed.backend import make_backend
from embodied.distributed.placement import Placement, PlacementError
from embodied.distributed.roles import EnvWorker, LearnerWorker, RolloutWorker
from embodied.rl.registry import algorithm
from embodied.run.logger import Logger


def shard_sizes(num_envs: int, shards: int) -> list[int]:
    """num_envs split into `shards` nearly equal consecutive slices."""
    if shards > num_envs:
        raise PlacementError(f"placement.env.count: {shards} env workers for env.num_envs={num_envs}; "
                             f"allowed: at most env.num_envs")
    return [num_envs // shards + (i < num_envs % shards) for i in range(shards)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_learners(cfg: ExperimentConfig, placement: Placement, backend: Any, spec: Any,
                  learner_thread: bool = False) -> list[Any]:
    """placement.learner.count LearnerWorkers (ranks of one process group, rendezvous on a fresh
    port), freshly initialised from cfg.train.seed; also what rebuilds them after a learner died."""
    world, master = placement.learner.count, f"127.0.0.1:{free_port()}"
    return [backend.create(LearnerWorker, placement.learner, cfg, spec, cfg.train.seed, 1, rank, world, master,
                           threaded=learner_thread) for rank in range(world)]


def build_roles(cfg: ExperimentConfig, placement: Placement, backend: Any,
                learner_thread: bool = False) -> tuple[Any, list[Any]]:
    """Env workers, the rollout role and the learner(s) on `backend`; -> (collector, learners):
    the sharded collector of cfg.train.algorithm (embodied/rl/registry.py: PPO's ShardedCollector,
    GRPO's GroupedCollector of whole episodes in groups).
    learner_thread (backend local): the learner runs its calls on a thread of its own, so that
    an update overlaps the driver's next collection (k >= 1); Ray's actors ignore it."""
    sizes = shard_sizes(cfg.env.num_envs, placement.env.count)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    threaded = placement.stages > 1

    def make_worker(i: int) -> Any:
        return backend.create(EnvWorker, placement.env, cfg.env, starts[i], sizes[i], threaded=threaded)

    workers = [make_worker(i) for i in range(len(sizes))]
    spec = backend.get(backend.call(workers[0], "spec"))
    spec = dataclasses.replace(spec, num_envs=cfg.env.num_envs)
    rollout = backend.create(RolloutWorker, placement.rollout, cfg, spec, cfg.train.seed)
    learners = make_learners(cfg, placement, backend, spec, learner_thread)
    collector = algorithm(cfg.train.algorithm).sharded_collector(cfg, backend, workers, sizes, rollout, make_worker,
                                                                 placement.stages)
    return collector, learners


def role_times(backend: Any, collector: Any, learners: list[Any], wall: float,
               since: float | None = None) -> dict[str, float]:
    """`<role>_busy_seconds`, measured inside each role since the last call (the mean over a
    role's instances: env workers, learners), `<role>_idle_seconds` = wall - busy, where `wall`
    is the driver's seconds since the last call, and `<role>_cpu_seconds`, the CPU time of its
    busy calls (below busy when the role waited for a core). Call it when no role call is in
    flight, or give `since` (the perf_counter of the window's start): a role answers after the
    call it is running, whose time it then counts, so the window's wall is taken once every
    role has answered (max_staleness >= 2 leaves an update in flight here)."""
    b = backend
    asked = {"env": collector.workers, "rollout": [collector.rollout], "learner": learners}
    futures = {name: [b.call(h, "pop_busy_seconds") for h in hs] for name, hs in asked.items()}
    answers = {name: b.get(fs) for name, fs in futures.items()}  # (wall, cpu) per instance
    if since is not None:
        wall = time.perf_counter() - since
    out: dict[str, float] = {}
    for name, seconds in answers.items():
        busy_s, cpu_s = (sum(x[i] for x in seconds) / len(seconds) for i in (0, 1))
        out[f"{name}_busy_seconds"], out[f"{name}_idle_seconds"] = busy_s, wall - busy_s
        out[f"{name}_cpu_seconds"] = cpu_s
    return out


def train_roles(cfg: ExperimentConfig, placement: Placement, backend_name: str = "local",
                iterations: int = 1, log_dir: str | Path | None = None, max_staleness: int = 0,
                learner_thread: bool | None = None) -> dict[str, Any]:
    """Run `iterations` iterations; -> {"weights": the learner's final state_dict, "version": its
    version, "history": per-iteration stats, "where": pid and node of every role}. PPO, or GRPO
    (cfg.train.algorithm; one episode of every env per iteration, envs in groups).

    max_staleness k = 0: synchronous (collect on the newest weights, then update). k >= 1: batch
    i is collected on weights of version >= i - k while the updates of the batches before it
    run (1: batch i + 1 during the update on batch i; `staleness` and `weight_version` in the
    history); PPO's ratio is then taken against the learner's own recomputed log-probs
    (ppo.recompute_log_probs None or true), or against the stale behaviour policy's
    (ppo.recompute_log_probs=false: importance-corrected by the clip only). Each update's weights are asked for right after it (an actor runs
    its calls in order), so update j always pushes version j + 1. Collection and updates
    overlap: on Ray the learner is an actor; on `local` it runs its calls on a thread of its own
    (learner_thread None: when k >= 1; False: inline, the same schedule one call after the
    other). Both backends, threaded or inline, give the same weights.

    With log_dir, each iteration's stats go to TensorBoard there: train/, rollout/ and time/
    (collect, inference, env_wait and update seconds, weight version, staleness, each role's
    busy and idle seconds), at the env steps so far."""
    if isinstance(max_staleness, bool) or not isinstance(max_staleness, int) or max_staleness < 0:
        raise PlacementError(f"max_staleness: {max_staleness!r}; allowed: an integer >= 0 (0: synchronous)")
    cfg = with_stale_defaults(cfg, max_staleness)
    backend = make_backend(backend_name, placement)
    try:
        if cfg.train.torch_threads:
            torch.set_num_threads(cfg.train.torch_threads)
        threaded = max_staleness > 0 if learner_thread is None else learner_thread
        collector, learners = build_roles(cfg, placement, backend, threaded)
        first = collector.reset(seed=cfg.train.seed)
        if first is not None:  # GRPO keeps no observation between iterations (train.py does the same)
            backend.get([backend.call(lrn, "observe", first) for lrn in learners])
        state, version = backend.get(backend.call(learners[0], "weights"))
        collector.set_weights(state, version)
        ask = lambda hs: backend.get([backend.call(h, "where") for h in hs])  # noqa: E731
        placed = {"env": ask(collector.workers), "rollout": ask([collector.rollout]), "learner": ask(learners)}
        history: list[dict[str, Any]] = []
        logger = Logger(Path(log_dir), iterations, progress=False) if log_dir is not None else None
        steps = 0
        role_times(backend, collector, learners, 0.0)  # zero the roles' counters
        t_window = time.perf_counter()

        def finish(futures: list[Any], weights: Any, batch: Any, episodes: dict[str, float],
                   learner_version: int) -> None:
            """Wait for an update and its weights, push them to the rollout role, log the iteration."""
            nonlocal state, version, steps, t_window
            t0 = time.perf_counter()
            stats = backend.get(futures)[0]
            state, version = backend.get(weights)
            collector.set_weights(state, version)
            times = {f"{k}_seconds": v for k, v in batch.seconds.items()}
            times.update(update_seconds=time.perf_counter() - t0, weight_version=float(batch.weight_version),
                         staleness=float(learner_version - batch.weight_version),
                         **role_times(backend, collector, learners, 0.0, since=t_window))
            t_window = time.perf_counter()
            rollout = {**episodes, **collector.fault_stats()}
            steps += batch.env_steps
            if logger is not None:
                for section, scalars in (("train", stats), ("rollout", rollout), ("time", times)):
                    logger.log(section, scalars, steps)
            history.append({**stats, **rollout, **times, "env_steps": batch.env_steps})

        pending: deque[tuple[Any, ...]] = deque()  # updates in flight, oldest first; last field: batch index
        for it in range(iterations):
            batch = collector.collect()
            episodes = collector.pop_episode_stats()  # the episodes that ended during this collect
            # batch it + 1 must be collected on version >= it + 1 - k: finish the updates up to it - k
            # (they ran during this collect), before this one is asked for: with k = 1 role_times then
            # finds no learner call in flight (with k >= 2 it waits for the one still running)
            while pending and pending[0][-1] <= it - max_staleness:
                finish(*pending.popleft())
            futures = [backend.call(lrn, "update", batch.traj) for lrn in learners]
            pending.append((futures, backend.call(learners[0], "weights"), batch, episodes, it))
            while pending and pending[0][-1] <= it - max_staleness:  # k = 0: this update, now
                finish(*pending.popleft())
        while pending:
            finish(*pending.popleft())
        if logger is not None:
            logger.close()
        return {"weights": state, "version": version, "history": history, "where": placed}
    finally:
        backend.shutdown()
