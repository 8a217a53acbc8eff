"""Rollout over env-worker shards and a rollout (inference) role, synchronous or pipelined.

The env workers are split into S stages (consecutive shards). With S = 1 every step is:
inference on the whole batch, then all shards step (in parallel on Ray, one after the other in
`local`). With S >= 2 the stages take turns, so that while stage s's envs step, the policy
infers for stage s + 1 (RLinf's 2-stage pipeline):

    infer(0) step(0)...........  infer(0) step(0)...........
             infer(1) step(1)...........  infer(1) step(1)....

Stages see different weights' draws than S = 1 (inference on smaller batches), so a pipelined
run is not bit-identical to a synchronous one, but each is deterministic for a fixed seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from embodied.rollout import stack_steps, start_value, tensor_obs
from embodied.trajectory import Trajectory
from sims.vecenv import ChunkStepResult, Obs


def cat_obs(parts: list[Obs]) -> Obs:
    """Shard observations [n_i, ...] -> one [sum n_i, ...]; instruction lists concatenated."""
    out: Obs = {k: torch.cat([p[k] for p in parts]) for k, v in parts[0].items() if torch.is_tensor(v)}
    if "instruction" in parts[0]:
        out["instruction"] = [s for p in parts for s in p["instruction"]]
    return out


def split_rows(x: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    return list(torch.split(x, sizes))


@dataclass
class RolloutBatch:
    """A trajectory with the weight version that produced it and where the time went."""

    traj: Trajectory
    weight_version: int
    env_steps: int
    seconds: dict[str, float] = field(default_factory=dict)  # collect, inference (driver-side wait)


class ShardedCollector:
    """Keeps each shard's current observation between calls and tracks finished episodes."""

    def __init__(self, backend: Any, env_workers: list[Any], shard_sizes: list[int], rollout: Any,
                 num_steps: int, stages: int = 1):
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

    def reset(self, seed: int) -> Obs:
        """Seeded reset of every shard; -> the whole batch's first observation."""
        shards = self.backend.get([self.backend.call(w, "reset", seed) for w in self.workers])
        self.obs = [cat_obs([shards[i] for i in ids]) for ids in self.stage_workers]
        return cat_obs(self.obs)

    def set_weights(self, state: dict[str, torch.Tensor], version: int) -> None:
        self.version = self.backend.get(self.backend.call(self.rollout, "set_weights", state, version))

    def _finish(self, s: int, out: Any, futures: list[Any]) -> dict[str, Any]:
        """Wait for stage s's shards; -> the step's record (stage rows), advancing self.obs[s]."""
        results: list[ChunkStepResult] = self.backend.get(futures)
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
        return dict(obs=tensor_obs(obs), instructions=list(obs.get("instruction", [])), actions=out.actions,
                    log_probs=out.log_prob, values=out.value if out.value is not None else torch.zeros(len(term)),
                    rewards=reward * valid, valid=valid, terminated=term, truncated=trunc, success=success,
                    bootstrap=bootstrap, replay=out.replay, parts=out.log_prob_parts,
                    track=(reward.sum(1), valid.sum(1), success, term | trunc))

    @torch.no_grad()
    def collect(self) -> RolloutBatch:
        """num_steps policy steps of every env -> a RolloutBatch (Trajectory [T, B])."""
        assert self.obs, "call reset() first"
        b, t0 = self.backend, time.perf_counter()
        records: list[list[dict[str, Any]]] = [[] for _ in range(self.stages)]
        pending: list[tuple[Any, list[Any]] | None] = [None] * self.stages
        for _ in range(self.num_steps):
            for s, ids in enumerate(self.stage_workers):
                if pending[s] is not None:
                    records[s].append(self._finish(s, *pending[s]))
                out = b.get(b.call(self.rollout, "act", self.obs[s]))
                actions = split_rows(out.actions, [self.sizes[i] for i in ids])
                pending[s] = (out, [b.call(self.workers[i], "step", a) for i, a in zip(ids, actions)])
        for s in range(self.stages):
            records[s].append(self._finish(s, *pending[s]))
        steps = [self._merge([records[s][t] for s in range(self.stages)]) for t in range(self.num_steps)]
        for st in steps:
            self._track(*st.pop("track"))
        last = torch.cat([start_value(b.get(b.call(self.rollout, "value", o))) for o in self.obs])
        traj = stack_steps(steps, last)
        return RolloutBatch(traj, self.version, int(traj.valid.sum()),
                            {"collect": time.perf_counter() - t0})

    @staticmethod
    def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
        """Per-stage step records -> one record over the whole batch (stages in order)."""
        out: dict[str, Any] = {}
        for k, v in parts[0].items():
            vals = [p[k] for p in parts]
            if k in ("obs", "replay"):
                out[k] = {key: torch.cat([x[key] for x in vals]) for key in v}
            elif k == "instructions":
                out[k] = [s for x in vals for s in x]
            elif k == "track":
                out[k] = tuple(torch.cat([x[i] for x in vals]) for i in range(len(v)))
            elif v is None:
                out[k] = None
            else:
                out[k] = torch.cat(vals)
        return out

    def _track(self, reward: torch.Tensor, length: torch.Tensor, success: torch.Tensor, done: torch.Tensor) -> None:
        self.ep_return += reward
        self.ep_length += length
        self.ep_success |= success
        for i in done.nonzero().flatten().tolist():
            self.finished.append((self.ep_return[i].item(), int(self.ep_length[i]), bool(self.ep_success[i])))
        self.ep_return[done], self.ep_length[done], self.ep_success[done] = 0.0, 0, False

    def pop_episode_stats(self) -> dict[str, float]:
        """Mean return, length and success of episodes finished since the last call."""
        if not self.finished:
            return {}
        n, f = len(self.finished), self.finished
        stats = {"episode_return": sum(x[0] for x in f) / n, "episode_length": sum(x[1] for x in f) / n,
                 "success_rate": sum(x[2] for x in f) / n, "episodes": float(n)}
        self.finished = []
        return stats
