"""GRPO's grouped episode collection over env-worker shards: embodied/rl/episodes.py's
GroupCollector with the envs split over env workers and the policy in the rollout role.

B = num_groups * G envs; group g's G envs are reset from one seed (drawn from the collector's
own generator, as GroupCollector draws them), wherever their shards are: a group may span two
env workers and still starts from one initial state. `collect` runs until every env has
finished one episode; steps after an env's episode ended are padding (episode_mask False).
Every shard steps every policy step (in parallel on Ray). With S stages (a pipelined
placement) the shards form S consecutive groups that take turns as in collect.py: while one
stage's envs step, the rollout role infers for the next. Every stage steps until no env of the
batch is active, so the batch has GroupCollector's length and every env's episode is the one
GroupCollector collects when its policy infers for the stages one after the other; the last
step of a stage that had to decide before the later stages' last results were in is discarded.

Fault tolerance (backend ray): an env worker whose process died is rebuilt and reset; its envs'
episodes cannot be finished, so every group with an env on it leaves this batch (a group's
advantage needs all its members), and the episodes of those groups are counted as dropped.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from embodied.distributed.sharded_rollout import (RolloutBatch, RolloutRestarts, cat_obs, episode_stats,
                                                  merge_stages, split_rows, take_envs)
from embodied.rl.rollout import stack_steps, tensor_obs
from sims.vecenv import ChunkStepResult, Obs


class GroupedCollector(RolloutRestarts):
    """The sharded GroupCollector; the same interface as collect.py's ShardedCollector for
    embodied/distributed/trainer.py and loop.py. make_worker(i) rebuilds shard i (None: no
    restarts). A dead rollout role is rebuilt (make_rollout, set by the builder) and the batch
    collected again: every collect starts its episodes afresh, so nothing is dropped."""

    def __init__(self, backend: Any, env_workers: list[Any], shard_sizes: list[int], rollout: Any,
                 group_size: int, make_worker: Callable[[int], Any] | None = None, stages: int = 1):
        B = sum(shard_sizes)
        if group_size < 2 or B % group_size:
            raise ValueError(f"grpo.group_size: env.num_envs={B} must be a multiple of group_size={group_size} (>= 2)")
        if len(env_workers) % stages:
            raise ValueError(f"stages: {stages} does not divide the {len(env_workers)} env workers")
        per = len(env_workers) // stages
        self.stages, self.stage_workers = stages, [list(range(s * per, (s + 1) * per)) for s in range(stages)]
        self.backend, self.workers, self.sizes, self.rollout = backend, env_workers, shard_sizes, rollout
        self.group_size, self.num_groups, self.make_worker = group_size, B // group_size, make_worker
        self.starts = [sum(shard_sizes[:i]) for i in range(len(shard_sizes))]
        self.rng = torch.Generator().manual_seed(0)
        self.finished: list[tuple[float, int, bool]] = []
        self.version, self.restarts, self.dropped_episodes = -1, 0, 0
        self.chunk = 1  # K of the last actions, for a stand-in step of a restarted shard
        self.on_step: Callable[[int], None] | None = None  # called before each policy step t (tests)
        self.make_rollout: Callable[[int], Any] | None = None
        self.rollout_restarts, self.weights, self.events = 0, None, []

    def revive(self, i: int) -> None:
        """Rebuild shard i between collects (its process or host is gone): nothing is in
        progress, so nothing is dropped; the next collect resets it with the others."""
        t = time.perf_counter()
        self.backend.kill(self.workers[i])
        self.restarts += 1
        self.workers[i], where = self.rebuilt(lambda: self.make_worker(i), lambda w: self.backend.call(w, "where"),
                                              f"env worker {i}")
        self.events.append(f"env worker {i} lost: rebuilt (on {where['ip']}, pid {where['pid']}) in "
                           f"{time.perf_counter() - t:.1f}s, no episode in progress")

    def reset(self, seed: int) -> None:
        """Seed the group-seed generator; no observation is kept between calls (-> None)."""
        self.rng.manual_seed(seed or 0)
        return None

    def _step(self, i: int, future: Any, seeds: list[int]) -> tuple[ChunkStepResult, bool]:
        """Shard i's step result and whether the shard was restarted (then a stand-in step: no
        valid substeps, every env done, the new worker's first observation)."""
        try:
            return self.backend.get(future), False
        except self.backend.dead_errors:
            if self.make_worker is None:
                raise
        self.restarts += 1
        self.workers[i], obs = self.rebuilt(lambda: self.make_worker(i),
                                            lambda w: self.backend.call(w, "reset_seeds", seeds), f"env worker {i}")
        n, K = self.sizes[i], self.chunk
        flags = torch.zeros(n, K, dtype=torch.bool)
        ended = flags.clone()
        ended[:, -1] = True
        return ChunkStepResult(obs=obs, reward=torch.zeros(n, K), terminated=ended, truncated=flags,
                               info={"success": flags}, valid=flags, final_obs=None), True

    def collect(self) -> RolloutBatch:
        """_collect(), again on a rebuilt rollout role if the one in use died meanwhile (its
        episodes restart from the next group seeds)."""
        while True:
            try:
                return self._collect()
            except self.backend.dead_errors:
                if self.make_rollout is None or not self.backend.dead([self.rollout]):
                    raise
                self.revive_rollout()

    @torch.no_grad()
    def _collect(self) -> RolloutBatch:
        """One episode of every env -> a RolloutBatch (Trajectory [T, B] with group_ids and
        episode_mask, as GroupCollector returns). With S stages, stage s's envs step while the
        policy infers for the next stage; every stage steps until no env of the batch is
        active, so T is GroupCollector's. A stage that has to decide before the later stages'
        last results are in steps on (it cannot know that they finished): that one step and its
        inference are discarded (at most one per stage but the last, per collect)."""
        b, B, G, t0 = self.backend, sum(self.sizes), self.group_size, time.perf_counter()
        group_ids = torch.arange(self.num_groups).repeat_interleave(G)  # [B]
        group_seeds = torch.randint(2**31 - 1, (self.num_groups,), generator=self.rng)
        seeds = group_seeds[group_ids].tolist()
        shard_seeds = [seeds[s:s + n] for s, n in zip(self.starts, self.sizes)]
        first = b.get([b.call(w, "reset_seeds", sd) for w, sd in zip(self.workers, shard_seeds)])
        obs = [cat_obs([first[i] for i in ids]) for ids in self.stage_workers]
        self.active, self.lost = torch.ones(B, dtype=torch.bool), torch.zeros(B, dtype=torch.bool)
        self.ret, self.length = torch.zeros(B), torch.zeros(B, dtype=torch.long)
        self.succ = torch.zeros(B, dtype=torch.bool)
        records: list[list[dict[str, Any]]] = [[] for _ in self.stage_workers]
        pending: list[tuple[Any, list[Any]] | None] = [None] * self.stages
        self.infer = self.env_wait = 0.0
        while True:
            if self.on_step is not None:
                self.on_step(len(records[0]))
            for s, ids in enumerate(self.stage_workers):
                if pending[s] is not None:  # stage s's last step: record it
                    records[s].append(self._finish(s, obs[s], *pending[s], shard_seeds))
                    obs[s] = records[s][-1].pop("next_obs")
                    pending[s] = None
                if self.active.any():  # as far as known: later stages' last results may be out
                    t = time.perf_counter()
                    out = b.get(b.call(self.rollout, "act", obs[s]))
                    self.infer += time.perf_counter() - t
                    self.chunk = out.actions.shape[1]
                    actions = split_rows(out.actions, [self.sizes[i] for i in ids])
                    pending[s] = (out, [b.call(self.workers[i], "step", a) for i, a in zip(ids, actions)])
            if not self.active.any():
                break
        for s, ids in enumerate(self.stage_workers):  # a step begun before its stage knew: discarded
            if pending[s] is not None:
                for i, f in zip(ids, pending[s][1]):
                    self._step(i, f, shard_seeds[i])
        T = len(records[0])
        steps = [merge_stages([records[s][t] for s in range(self.stages)]) for t in range(T)]
        mask = torch.stack([s.pop("mask") for s in steps])
        traj = stack_steps(steps, torch.zeros(B), group_ids=group_ids, episode_mask=mask)
        ret, length, succ, lost = self.ret, self.length, self.succ, self.lost
        keep = ~torch.isin(group_ids, group_ids[lost].unique())  # groups with no env on a restarted shard
        if not keep.all():
            self.dropped_episodes += int((~keep).sum())
            rows = keep.nonzero().flatten()
            traj = take_envs(traj, rows)
            ret, length, succ = ret[rows], length[rows], succ[rows]
        self.finished.extend(zip(ret.tolist(), length.tolist(), succ.tolist()))
        mask = traj.valid & traj.episode_mask[..., None]
        return RolloutBatch(traj, self.version, int(mask.sum()),
                            {"collect": time.perf_counter() - t0, "inference": self.infer, "env_wait": self.env_wait})

    def _finish(self, s: int, obs: Obs, out: Any, futures: list[Any], shard_seeds: list[list[int]]) -> dict[str, Any]:
        """Wait for stage s's shards; update its envs' episodes; -> the step's record (stage
        rows) with the stage's next observation under "next_obs"."""
        ids, B = self.stage_workers[s], self.ret.shape[0]
        rows = slice(self.starts[ids[0]], self.starts[ids[-1]] + self.sizes[ids[-1]])
        t, results = time.perf_counter(), []
        for i, f in zip(ids, futures):
            res, restarted = self._step(i, f, shard_seeds[i])
            results.append(res)
            if restarted:
                self.lost[self.starts[i]:self.starts[i] + self.sizes[i]] = True
        self.env_wait += time.perf_counter() - t
        reward, valid = torch.cat([r.reward for r in results]), torch.cat([r.valid for r in results])
        term, trunc = torch.cat([r.terminated for r in results]), torch.cat([r.truncated for r in results])
        success = torch.cat([r.info["success"] for r in results]).any(1)
        done, active, lost = (term | trunc).any(1), self.active[rows], self.lost[rows]
        n = len(done)
        record = dict(obs=tensor_obs(obs), instructions=list(obs.get("instruction", [])), actions=out.actions,
                      log_probs=out.log_prob, values=torch.zeros(n), rewards=reward * valid, valid=valid,
                      terminated=term.any(1), truncated=trunc.any(1) & ~term.any(1), success=success,
                      bootstrap=torch.zeros(n), replay=out.replay, parts=out.log_prob_parts, mask=active & ~lost,
                      next_obs=cat_obs([r.obs for r in results]))
        self.ret[rows] += torch.where(active, (reward * valid).sum(1), torch.zeros(n))
        self.length[rows] += torch.where(active, valid.sum(1), torch.zeros(n, dtype=torch.long))
        self.succ[rows] |= active & success
        self.active[rows] = active & ~done & ~lost
        return record

    def pop_episode_stats(self) -> dict[str, float]:
        """Mean return, length and success of the episodes collected since the last call."""
        stats, self.finished = episode_stats(self.finished), []
        return stats

    def fault_stats(self) -> dict[str, float]:
        """Env-worker and rollout-role restarts, and episodes dropped with their groups, since the start."""
        return {"env_worker_restarts": float(self.restarts), "dropped_episodes": float(self.dropped_episodes),
                "rollout_restarts": float(self.rollout_restarts)}

    def state_dict(self) -> dict[str, Any]:
        """The group-seed generator and the fault counters (no episode spans two calls)."""
        return {"rng": self.rng.get_state(), "restarts": self.restarts, "dropped_episodes": self.dropped_episodes,
                "rollout_restarts": self.rollout_restarts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.set_state(state["rng"])
        self.restarts, self.dropped_episodes = int(state["restarts"]), int(state["dropped_episodes"])
        self.rollout_restarts = int(state.get("rollout_restarts", 0))
