"""Rollout over env-worker shards and a rollout (inference) role, synchronous or pipelined.

The env workers are split into S stages (consecutive shards). With S = 1 every step is:
inference on the whole batch, then all shards step (in parallel on Ray, one after the other in
`local`). With S >= 2 the stages take turns, so that while stage s's envs step, the policy
infers for stage s + 1 (RLinf's 2-stage pipeline):

    infer(0) step(0)...........  infer(0) step(0)...........
             infer(1) step(1)...........  infer(1) step(1)....

Fault tolerance (backend ray): an env worker whose process or host died (kill -9, a crash of
the simulator, a lost machine) is rebuilt by `make_worker` (on a node that is still up) and
reset with a new seed; its envs' episodes in progress are dropped and counted
(`dropped_episodes`), and its columns leave this iteration's trajectory (they would mix steps
of the lost episodes with the new ones). A rollout role that died is rebuilt by `make_rollout`
and given the last weights; the steps of the batch in progress are dropped (the env workers
keep their envs, so no episode is) and the batch is collected again. Training goes on.
embodied/distributed/hosts.py does the same between iterations and moves workers back to a
host that returned. A rebuilt role that dies before its first answer (Ray placed it on a host it
had not yet declared dead) is built again, REVIVAL_TRIES times in all; then RevivalError ends
the run (embodied/distributed/trainer.py says how to resume it).

Stages see different weights' draws than S = 1 (inference on smaller batches), so a pipelined
run is not bit-identical to a synchronous one, but each is deterministic for a fixed seed.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from embodied.rl.rollout import stack_steps, start_value, tensor_obs
from embodied.rl.trajectory import Trajectory
from sims.vecenv import ChunkStepResult, Obs


def cat_obs(parts: list[Obs]) -> Obs:
    """Shard observations [n_i, ...] -> one [sum n_i, ...]; instruction lists concatenated."""
    out: Obs = {k: torch.cat([p[k] for p in parts]) for k, v in parts[0].items() if torch.is_tensor(v)}
    if "instruction" in parts[0]:
        out["instruction"] = [s for p in parts for s in p["instruction"]]
    return out


def split_rows(x: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    return list(torch.split(x, sizes))


def merge_stages(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-stage step records -> one record over the whole batch (stages in order)."""
    out: dict[str, Any] = {}
    for k, v in parts[0].items():
        vals = [p[k] for p in parts]
        if k in ("obs", "replay"):
            out[k] = {key: torch.cat([x[key] for x in vals]) for key in v}
        elif k == "instructions":
            out[k] = [s for x in vals for s in x]
        elif v is None:
            out[k] = None
        else:
            out[k] = torch.cat(vals)
    return out


@dataclass
class RolloutBatch:
    """A trajectory with the weight version that produced it and where the time went."""

    traj: Trajectory
    weight_version: int
    env_steps: int
    # collect (wall), inference (waiting on the rollout role's act), env_wait (waiting on env
    # workers' results: env time that inference did not hide)
    seconds: dict[str, float] = field(default_factory=dict)


def episode_stats(finished: list[tuple[float, int, bool]]) -> dict[str, float]:
    """Mean return, length and success of finished (return, length, success) episodes; {} if none."""
    if not finished:
        return {}
    n = len(finished)
    return {"episode_return": sum(x[0] for x in finished) / n, "episode_length": sum(x[1] for x in finished) / n,
            "success_rate": sum(x[2] for x in finished) / n, "episodes": float(n)}


def take_envs(traj: Trajectory, rows: slice | torch.Tensor) -> Trajectory:
    """Trajectory [T, B, ...] -> the envs `rows` (a slice or int64 indices) of every field."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(traj):
        v = getattr(traj, f.name)
        if v is None:
            out[f.name] = None
        elif f.name in ("last_value", "group_ids"):  # [B]
            out[f.name] = v[rows]
        elif f.name == "instructions":  # T lists of B strings
            idx = range(len(v[0]))[rows] if isinstance(rows, slice) else rows.tolist()
            out[f.name] = [[step[i] for i in idx] for step in v] if v and v[0] else v
        elif f.name == "tasks":  # B labels
            out[f.name] = [v[i] for i in (range(len(v))[rows] if isinstance(rows, slice) else rows.tolist())]
        elif isinstance(v, dict):  # obs, replay: [T, B, ...]
            out[f.name] = {k: x[:, rows] for k, x in v.items()}
        else:  # [T, B, ...]
            out[f.name] = v[:, rows]
    return Trajectory(**out)


REVIVAL_TRIES = 3  # builds of a lost role, in all, before the run ends


class RevivalError(RuntimeError):
    """A lost role could not be rebuilt: each of REVIVAL_TRIES new ones died before answering."""


class RolloutRestarts:
    """A collector's rollout role, rebuilt by make_rollout(k) with the last weights when it
    died (backend ray); the collector keeps `backend`, `rollout`, `version`, `make_rollout`,
    `rollout_restarts`, `weights` and `events`."""

    def rebuilt(self, make: Callable[[], Any], first: Callable[[Any], Any], what: str) -> tuple[Any, Any]:
        """make() a role and get its first call's result, first(role) (a future) -> (role,
        result). A new role that dies before answering is killed and built again (Ray places
        it on a node that is up), REVIVAL_TRIES times in all; then RevivalError."""
        for k in range(1, REVIVAL_TRIES + 1):
            role = make()
            try:
                return role, self.backend.get(first(role))
            except self.backend.dead_errors as e:
                self.backend.kill(role)
                cause = type(e).__name__
                if k < REVIVAL_TRIES:
                    self.events.append(f"{what}: the rebuilt one died too ({cause}); building it again, try "
                                       f"{k + 1} of {REVIVAL_TRIES}")
        raise RevivalError(f"{what} could not be rebuilt: each of {REVIVAL_TRIES} new ones died before answering "
                           f"(the last: {cause})")

    def set_weights(self, state: dict[str, torch.Tensor], version: int) -> None:
        self.weights = (state, version)
        try:
            self.version = self.backend.get(self.backend.call(self.rollout, "set_weights", state, version))
        except self.backend.dead_errors:
            if self.make_rollout is None:
                raise
            self.revive_rollout()

    def revive_rollout(self) -> None:
        """Build a new rollout role (its own random stream: seed + 7919 k) and give it the last weights."""
        t = time.perf_counter()
        self.backend.kill(self.rollout)
        self.rollout_restarts += 1
        first = ((lambda r: self.backend.call(r, "set_weights", *self.weights)) if self.weights is not None
                 else (lambda r: self.backend.call(r, "where")))
        self.rollout, answer = self.rebuilt(lambda: self.make_rollout(self.rollout_restarts), first, "the rollout role")
        if self.weights is not None:
            self.version = answer
        self.events.append(f"rollout role lost: rebuilt ({self.where(self.rollout)}) in {time.perf_counter() - t:.1f}s")

    def where(self, handle: Any) -> str:
        """A role's host address and pid, for the event lines."""
        w = self.backend.get(self.backend.call(handle, "where"))
        return f"on {w['ip']}, pid {w['pid']}"

    def pop_events(self) -> list[str]:
        events, self.events = self.events, []
        return events


class ShardedCollector(RolloutRestarts):
    """Keeps each shard's current observation between calls and tracks finished episodes.
    make_worker(i) rebuilds shard i after its process died (None: no restarts); make_rollout(k)
    builds the k-th rollout role after the one before it died (None: no restarts)."""

    def __init__(self, backend: Any, env_workers: list[Any], shard_sizes: list[int], rollout: Any,
                 num_steps: int, stages: int = 1, make_worker: Callable[..., Any] | None = None,
                 make_rollout: Callable[[int], Any] | None = None):
        if len(env_workers) % stages:
            raise ValueError(f"stages: {stages} does not divide the {len(env_workers)} env workers")
        self.backend, self.workers, self.sizes, self.rollout = backend, env_workers, shard_sizes, rollout
        self.num_steps, self.stages = num_steps, stages
        per = len(env_workers) // stages
        self.stage_workers = [list(range(s * per, (s + 1) * per)) for s in range(stages)]
        self.obs: list[Obs] = []  # per stage
        self.has_critic = backend.get(backend.call(rollout, "has_critic"))
        B = sum(shard_sizes)
        self.ep_return, self.ep_length = torch.zeros(B), torch.zeros(B, dtype=torch.long)
        self.ep_success = torch.zeros(B, dtype=torch.bool)
        self.finished: list[tuple[float, int, bool]] = []
        self.version = -1
        self.make_worker, self.seed = make_worker, 0
        self.starts = [sum(shard_sizes[:i]) for i in range(len(shard_sizes))]
        self.restarts, self.dropped_episodes = 0, 0
        self.lost: set[int] = set()  # shards restarted during this collect()
        self.on_step: Callable[[int], None] | None = None  # called before each policy step t (progress, tests)
        self.chunk = 1  # K of the last actions, for a stand-in step of a restarted shard
        self.env_wait = 0.0
        self.make_rollout, self.rollout_restarts = make_rollout, 0
        self.weights: tuple[dict[str, torch.Tensor], int] | None = None  # the last pushed, for a new rollout role
        self.pending: list[tuple[Any, list[Any]] | None] = []  # env steps in flight, per stage
        self.events: list[str] = []  # what was restarted or moved, one line each (the trainer prints them)

    def reset(self, seed: int) -> Obs:
        """Seeded reset of every shard; -> the whole batch's first observation."""
        self.seed = seed
        shards = self.backend.get([self.backend.call(w, "reset", seed) for w in self.workers])
        self.obs = [cat_obs([shards[i] for i in ids]) for ids in self.stage_workers]
        return cat_obs(self.obs)

    def revive(self, i: int) -> Obs:
        """Rebuild shard i (its process or host is gone) and reset it with a new seed; its envs'
        episodes in progress are dropped and counted -> the new worker's first observation."""
        t = time.perf_counter()
        self.backend.kill(self.workers[i])
        self.restarts += 1
        seed = self.seed + 7919 * self.restarts
        self.workers[i], obs = self.rebuilt(lambda: self.make_worker(i), lambda w: self.backend.call(w, "reset", seed),
                                            f"env worker {i}")
        n, rows = self.sizes[i], slice(self.starts[i], self.starts[i] + self.sizes[i])
        self.dropped_episodes += n  # every env of the shard had an episode in progress
        self.ep_return[rows], self.ep_length[rows], self.ep_success[rows] = 0.0, 0, False
        self.events.append(f"env worker {i} lost: rebuilt ({self.where(self.workers[i])}) in "
                           f"{time.perf_counter() - t:.1f}s, {n} episode(s) dropped")
        return obs

    def _finish(self, s: int, out: Any, futures: list[Any]) -> dict[str, Any]:
        """Wait for stage s's shards; -> the step's record (stage rows), advancing self.obs[s]."""
        t = time.perf_counter()
        results = [self._result(i, f) for i, f in zip(self.stage_workers[s], futures)]
        self.env_wait += time.perf_counter() - t
        obs = self.obs[s]
        res_obs = cat_obs([r.obs for r in results])
        term = torch.cat([r.terminated for r in results]).any(1)  # [b]
        trunc = torch.cat([r.truncated for r in results]).any(1) & ~term
        success = torch.cat([r.info["success"] for r in results]).any(1)
        reward, valid = torch.cat([r.reward for r in results]), torch.cat([r.valid for r in results])
        bootstrap = torch.zeros(len(term))
        if self.has_critic and trunc.any():
            final = cat_obs([r.final_obs if r.final_obs is not None else r.obs for r in results])
            v = self.backend.get(self.backend.call(self.rollout, "value", final))
            bootstrap = torch.where(trunc, start_value(v), bootstrap)
        self.obs[s] = res_obs
        ids = self.stage_workers[s]
        rows = slice(self.starts[ids[0]], self.starts[ids[-1]] + self.sizes[ids[-1]])
        self._track(rows, reward.sum(1), valid.sum(1), success, term | trunc)
        return dict(obs=tensor_obs(obs), instructions=list(obs.get("instruction", [])), actions=out.actions,
                    log_probs=out.log_prob, values=out.value if out.value is not None else torch.zeros(len(term)),
                    rewards=reward * valid, valid=valid, terminated=term, truncated=trunc, success=success,
                    bootstrap=bootstrap, replay=out.replay, parts=out.log_prob_parts)

    def _result(self, i: int, future: Any) -> ChunkStepResult:
        """Shard i's step result; if its process died: restart it (see the module doc) and stand
        in a step with no valid substeps from the new worker's first observation."""
        try:
            return self.backend.get(future)
        except self.backend.dead_errors:
            if self.make_worker is None:
                raise
        self.lost.add(i)
        obs = self.revive(i)
        n, K = self.sizes[i], self.chunk
        flags = torch.zeros(n, K, dtype=torch.bool)
        return ChunkStepResult(obs=obs, reward=torch.zeros(n, K), terminated=flags, truncated=flags,
                               info={"success": flags}, valid=flags, final_obs=None)

    def collect(self) -> RolloutBatch:
        """num_steps policy steps of every env -> a RolloutBatch (Trajectory [T, B]). If the
        rollout role dies meanwhile: it is rebuilt, the env steps in flight are finished (their
        envs moved on), and the batch is collected again from where the envs stand."""
        while True:
            try:
                return self._collect()
            except self.backend.dead_errors:
                if self.make_rollout is None or not self.backend.dead([self.rollout]):
                    raise
                self.revive_rollout()
                for s, p in enumerate(self.pending):
                    if p is not None:
                        self._finish(s, *p)
                self.lost = set()  # the batch restarts from the current observations

    @torch.no_grad()
    def _collect(self) -> RolloutBatch:
        assert self.obs, "call reset() first"
        self.env_wait = 0.0  # seconds the driver waited for env results (not hidden by inference)
        b, t0, infer = self.backend, time.perf_counter(), 0.0
        records: list[list[dict[str, Any]]] = [[] for _ in range(self.stages)]
        self.pending = pending = [None] * self.stages
        for t in range(self.num_steps):
            if self.on_step is not None:
                self.on_step(t)
            for s, ids in enumerate(self.stage_workers):
                if pending[s] is not None:
                    records[s].append(self._finish(s, *pending[s]))
                    pending[s] = None
                t_inf = time.perf_counter()
                out = b.get(b.call(self.rollout, "act", self.obs[s]))
                infer += time.perf_counter() - t_inf
                self.chunk = out.actions.shape[1]
                actions = split_rows(out.actions, [self.sizes[i] for i in ids])
                pending[s] = (out, [b.call(self.workers[i], "step", a) for i, a in zip(ids, actions)])
        for s in range(self.stages):
            records[s].append(self._finish(s, *pending[s]))
            pending[s] = None
        steps = [merge_stages([records[s][t] for s in range(self.stages)]) for t in range(self.num_steps)]
        last = torch.cat([start_value(b.get(b.call(self.rollout, "value", o))) for o in self.obs])
        traj = stack_steps(steps, last)
        if self.lost:  # drop the restarted shards' columns from this iteration
            keep = torch.ones(traj.num_envs, dtype=torch.bool)
            for i in self.lost:
                keep[self.starts[i]:self.starts[i] + self.sizes[i]] = False
            traj, self.lost = take_envs(traj, keep.nonzero().flatten()), set()
        wall = time.perf_counter() - t0
        return RolloutBatch(traj, self.version, int(traj.valid.sum()),
                            {"collect": wall, "inference": infer, "env_wait": self.env_wait})

    def _track(self, rows: slice, reward: torch.Tensor, length: torch.Tensor, success: torch.Tensor,
               done: torch.Tensor) -> None:
        """Accumulate one step of envs `rows` ([b] each); record the episodes that ended."""
        ret, n, succ = self.ep_return[rows], self.ep_length[rows], self.ep_success[rows]  # views
        ret += reward
        n += length
        succ |= success
        for i in done.nonzero().flatten().tolist():
            self.finished.append((ret[i].item(), int(n[i]), bool(succ[i])))
        ret[done], n[done], succ[done] = 0.0, 0, False

    def pop_episode_stats(self) -> dict[str, float]:
        """Mean return, length and success of episodes finished since the last call."""
        stats, self.finished = episode_stats(self.finished), []
        return stats

    def state_dict(self) -> dict[str, Any]:
        """What collect() carries between calls (each stage's observation, the episodes in
        progress, restarts), for an exact resume; the env workers save their own envs."""
        return {"obs": [tensor_obs(o) for o in self.obs],
                "instructions": [list(o.get("instruction", [])) for o in self.obs],
                "ep_return": self.ep_return, "ep_length": self.ep_length, "ep_success": self.ep_success,
                "seed": self.seed, "restarts": self.restarts, "dropped_episodes": self.dropped_episodes,
                "rollout_restarts": self.rollout_restarts,
                "chunk": self.chunk}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.obs = []
        for obs, instr in zip(state["obs"], state["instructions"]):
            self.obs.append({**obs, "instruction": list(instr)} if instr else dict(obs))
        self.ep_return, self.ep_length, self.ep_success = state["ep_return"], state["ep_length"], state["ep_success"]
        self.seed, self.restarts, self.chunk = int(state["seed"]), int(state["restarts"]), int(state["chunk"])
        self.dropped_episodes = int(state["dropped_episodes"])
        self.rollout_restarts = int(state.get("rollout_restarts", 0))

    def fault_stats(self) -> dict[str, float]:
        """Env-worker and rollout-role restarts, and episodes dropped with them, since the start."""
        return {"env_worker_restarts": float(self.restarts), "dropped_episodes": float(self.dropped_episodes),
                "rollout_restarts": float(self.rollout_restarts)}
