"""`embodied train` through roles: embodied/rl/train.py's loop (collect, update, log, evaluate,
checkpoint, exact resume) with the collection and the update done by the env workers, the
rollout role and the learner(s) of embodied/distributed/, on `train.backend` (local or ray) and
`train.placement`. train.py calls `train_with_roles` when either is set; otherwise nothing here
is imported.

The driver keeps a copy of the policy, loaded with the learner's weights after every update:
it evaluates (on the driver's own eval env, as train.py does) and is what a checkpoint's
policy/ holds. A checkpoint also holds every role's state (each env worker's envs, the
collector's observations and episodes in progress, the rollout and learner RNG streams, the
learner's optimiser), so a killed run resumes exactly (`embodied train --resume RUN_DIR`).

train.max_staleness k = 0: each batch is collected on the newest weights, then the learner
updates. k >= 1: while the learner updates on batch i, the driver collects ahead on the weights
before that update until k batches wait (1: batch i + 1; they overlap: on Ray the learner is an
actor, on `local` it runs on a thread of its own, with the same result), so a batch is at most
k versions stale. No batch is collected ahead past an iteration that saves a checkpoint (nor
past the run's end): that iteration drains, a checkpoint never holds a batch in flight, and a
resumed run follows the uninterrupted run's schedule exactly; the batch after a drain is 0
versions stale. Every iteration logs its batch's weight version and staleness. With k >= 1 the
learner recomputes the old log-probs unless ppo.recompute_log_probs is set false
(config.with_stale_defaults).

A learner whose process died (backend ray: kill -9, OOM) is restarted inside the run, at most
train.learner_restarts times: every learner is rebuilt (a data-parallel group re-forms on a
fresh port), and the whole run rolls back to its last checkpoint in process, as --resume would
load it (every role's state, the driver's policy and RNG, iteration, env steps, summary); the
batches collected ahead are dropped, the env workers keep their processes. Without a checkpoint
or with the budget spent, the run ends with a one-line LearnerLostError.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

import torch

from embodied.run.checkpoint import CheckpointError, load_checkpoint
from embodied.config import ExperimentConfig, with_stale_defaults
from embodied.distributed.backend import make_backend
from embodied.distributed.hosts import heal, rebalance
from embodied.distributed.loop import build_roles, make_learners, role_times
from embodied.distributed.placement import Placement, placement_from_dict
from embodied.distributed.roles import build_role_policy
from embodied.distributed.sharded_episodes import GroupedCollector
from embodied.distributed.sharded_rollout import RevivalError, ShardedCollector
from embodied.eval.evaluate import EvalResult, evaluate
from embodied.run.logger import Logger
from embodied.run.stop import program
from sims.registry import batch_for


def placed(backend: Any, collector: Any, learners: list[Any]) -> str:
    """One line: the host address of every role ("env workers on 10.0.0.2 x2, 10.0.0.3; ...")."""
    b = backend

    def hosts(handles: list[Any]) -> str:
        ips = Counter(w["ip"] for w in b.get([b.call(h, "where") for h in handles]))
        return ", ".join(ip + (f" x{n}" if n > 1 else "") for ip, n in ips.items())

    return (f"roles: env workers on {hosts(collector.workers)}; rollout on {hosts([collector.rollout])}; "
            f"learner(s) on {hosts(learners)}")


def head_lost(address: str, ckpt: Path | None, run_dir: Path) -> str:
    """The one line a driver prints when the Ray head stopped answering."""
    if ckpt is None:
        return (f"the Ray head at {address} stopped answering before the run's first checkpoint; nothing to "
                f"resume from: start a head and the run again")
    return (f"the Ray head at {address} stopped answering; the run stopped (last checkpoint {ckpt.name}): start a "
            f"head and resume with: {program()} train --resume {run_dir} train.placement.address=HEAD_IP:PORT")


class LearnerLostError(CheckpointError):
    """A learner died and the run cannot go on in process (no checkpoint, or no restarts left),
    or a lost env worker or rollout role could not be rebuilt (RevivalError)."""


def roles_lost(error: RevivalError, ckpt: Path | None, run_dir: Path) -> LearnerLostError:
    """The one line a run ends with when a lost role could not be rebuilt."""
    if ckpt is None:
        return LearnerLostError(f"{error}, before the run's first checkpoint; nothing to resume from: start the run "
                                f"again once the hosts are up (train.save_every sets how often it saves)")
    return LearnerLostError(f"{error}; the run stopped (last checkpoint {ckpt.name}): once the hosts are up, resume "
                            f"with: {program()} train --resume {run_dir}")


def placement_of(cfg: ExperimentConfig) -> Placement:
    """train.placement (a preset name, a mapping, or null for `collocated`) -> Placement."""
    raw = cfg.train.placement
    return placement_from_dict({"preset": raw} if isinstance(raw, str) else raw)


def roles_state(backend: Any, collector: Any, learners: list[Any]) -> dict[str, Any]:
    """Every role's state, for a checkpoint (the weights are saved with the policy)."""
    b = backend
    return {"envs": b.get([b.call(w, "state_dict") for w in collector.workers]),
            "rollout": b.get(b.call(collector.rollout, "state_dict")),
            "learners": b.get([b.call(lrn, "state_dict") for lrn in learners]),
            "collector": collector.state_dict()}


def load_roles_state(backend: Any, collector: Any, learners: list[Any], state: dict[str, Any],
                     weights: dict[str, torch.Tensor]) -> None:
    """Inverse of roles_state: the roles continue where the checkpoint's run stood."""
    if "envs" not in state:
        raise CheckpointError("--resume: this checkpoint was written by the single-process loop; resume it with "
                              "train.backend=null train.placement=null")
    for key, have in (("envs", collector.workers), ("learners", learners)):
        if len(state[key]) != len(have):
            field = "env" if key == "envs" else "learner"
            raise CheckpointError(f"train.placement.{field}.count: the checkpoint has {len(state[key])}, this "
                                  f"placement {len(have)}; resume with the checkpoint's placement")
    b = backend
    b.get([b.call(w, "load_state_dict", s) for w, s in zip(collector.workers, state["envs"])])
    b.get(b.call(collector.rollout, "load_state_dict", state["rollout"]))
    b.get([b.call(lrn, "load_state_dict", s, weights) for lrn, s in zip(learners, state["learners"])])
    collector.load_state_dict(state["collector"])


def restore(backend: Any, collector: Any, learners: list[Any], policy: Any,
            path: str | Path) -> tuple[Path, int, int, dict[str, Any]]:
    """Load the checkpoint at `path` into the roles, the driver's policy and torch's RNG; ->
    (its directory, iteration, env steps, summary)."""
    ckpt, meta, state = load_checkpoint(path)
    policy.load_saved_weights(ckpt / "policy")
    load_roles_state(backend, collector, learners, state, policy.state_dict())
    torch.set_rng_state(state["torch_rng"])
    summary = meta.get("summary", {})
    summary["checkpoint"] = str(ckpt)  # the recorded path may be of the run this one was copied from
    return ckpt, meta["iteration"], meta["env_steps"], summary


def lost_learner(error: BaseException, restarted: int, budget: int, ckpt: Path | None, run_dir: Path) -> None:
    """Raise LearnerLostError when a dead learner cannot be restarted in process (no checkpoint
    to roll back to, or train.learner_restarts spent)."""
    cause = f"a learner died ({type(error).__name__})"
    if ckpt is None:
        raise LearnerLostError(f"{cause} before the run's first checkpoint; nothing to resume from: start the run "
                               f"again (train.save_every sets how often it saves)") from error
    if restarted >= budget:
        spent = ("train.learner_restarts is 0" if budget == 0
                 else f"its {budget} restart(s) (train.learner_restarts) are spent")
        raise LearnerLostError(f"{cause} and {spent}; resume from the last checkpoint ({ckpt.name}) with: "
                               f"{program()} train --resume {run_dir}") from error


def train_with_roles(cfg: ExperimentConfig, resume: str | Path | None = None) -> dict[str, Any]:
    """embodied/rl/train.py's train() for a config with train.backend / train.placement set: the
    same summary, checkpoints, TensorBoard sections and evaluation."""
    from embodied.rl.loop_parts import end_iteration, save_iteration  # at call time: tests patch end_iteration
    from embodied.run.env import build_env, eval_seeds
    from embodied.run.stop import stoppable

    tc = cfg.train
    cfg = with_stale_defaults(cfg, tc.max_staleness)
    run_dir = Path(tc.run_dir)
    placement = placement_of(cfg)
    backend_name = tc.backend or "local"
    if tc.torch_threads:
        torch.set_num_threads(tc.torch_threads)
    torch.manual_seed(tc.seed)
    backend = make_backend(backend_name, placement)  # resources and the address, before anything starts
    eval_env = None
    stopping = stoppable("this iteration")
    stop = stopping.__enter__()
    try:
        learner_thread = tc.max_staleness > 0
        collector, learners = build_roles(cfg, placement, backend, learner_thread=learner_thread)
        b = backend
        spec = b.get(b.call(collector.workers[0], "spec"))
        spec = dataclasses.replace(spec, num_envs=cfg.env.num_envs)
        policy = build_role_policy(cfg, spec, tc.seed)  # the driver's copy: evaluation and checkpoints
        eval_env = build_env(cfg.env, batch_for(cfg.env.task, tc.eval_episodes, 64))
        seeds = eval_seeds(tc.eval_episodes)

        it, env_steps, summary = 0, 0, {}
        last_ckpt: Path | None = None  # the checkpoint a dead learner rolls the run back to
        if resume is not None:
            last_ckpt, it, env_steps, summary = restore(b, collector, learners, policy, resume)
        else:
            first = collector.reset(seed=tc.seed)
            if first is not None:  # GRPO keeps no observation between iterations (train.py does the same)
                b.get([b.call(lrn, "observe", first) for lrn in learners])
        weights, version = b.get(b.call(learners[0], "weights"))
        collector.set_weights(weights, version)
        policy.load_state_dict(weights)
        if resume is None:
            summary["success_before"] = evaluate(policy, eval_env, seeds, tc.eval_deterministic).success_rate
            summary["eval_curve"] = [(0, summary["success_before"])]

        logger = Logger(run_dir / "tb", tc.total_steps, env_steps, tc.progress)
        logger.print(f"run {run_dir}: {tc.algorithm} on {cfg.env.task}, {cfg.env.num_envs} envs in "
                     f"{placement.env.count} env workers, {placement.stages} stage(s), {placement.learner.count} "
                     f"learner(s), backend {backend_name}; {tc.total_steps} env steps; " + (
                         f"resumed at {env_steps} env steps (success before training {summary['success_before']:.2f})"
                         if resume is not None else f"success before training {summary['success_before']:.2f}"))
        if backend_name == "ray":
            logger.print(placed(b, collector, learners))
            b.watch_head(lambda address: head_lost(address, last_ckpt, run_dir))
        def roles() -> dict[str, Any]:
            """Every role's state for iteration it's checkpoint (end_iteration names it iter_<it>)."""
            nonlocal last_ckpt
            if backend_name == "ray" and isinstance(collector, (ShardedCollector, GroupedCollector)):
                heal(collector)  # a role lost since the batch has no state to save: rebuilt first
            state = {**roles_state(b, collector, learners), "torch_rng": torch.get_rng_state()}
            last_ckpt = run_dir / "checkpoints" / f"iter_{it:06d}"
            return state

        result: EvalResult | None = None
        t_start = time.time()
        def collect() -> tuple[Any, dict[str, float]]:
            """A batch and the episodes that ended while collecting it."""
            got = collector.collect()
            return got, collector.pop_episode_stats()

        def saves(i: int) -> bool:
            """Iteration i saves a checkpoint."""
            return bool(tc.save_every) and i % tc.save_every == 0

        # learner restarts: in this process (bounded by train.learner_restarts), and in the run's earlier processes
        restarted, restarts_before = 0, summary.get("learner_restarts", 0)
        role_times(b, collector, learners, 0.0)  # zero the roles' busy counters
        t_window = time.perf_counter()
        ahead: deque[tuple[Any, dict[str, float]]] = deque()  # batches collected ahead, oldest first
        while env_steps < tc.total_steps and not stop:
            try:
                if backend_name == "ray" and not ahead and isinstance(collector, (ShardedCollector, GroupedCollector)):
                    heal(collector)  # roles lost since the last batch, rebuilt where hosts remain
                    rebalance(collector, placement.env.labels)  # and moved to hosts that came back
                # the first batch, or the first after a drained iteration, is collected on the newest weights
                batch, episodes = ahead.popleft() if ahead else collect()
                for line in getattr(collector, "pop_events", list)():
                    logger.print(f"iteration {it + 1}: {line}")
                staleness = version - batch.weight_version
                futures = [b.call(lrn, "update", batch.traj) for lrn in learners]
                env_steps, it = env_steps + batch.env_steps, it + 1
                # max_staleness k: collect ahead on the current weights while the update runs, up to k batches,
                # each only if the run needs it and no iteration before it saves a checkpoint (that one drains)
                while (len(ahead) < tc.max_staleness and not saves(it + len(ahead))
                       and env_steps + sum(x.env_steps for x, _ in ahead) < tc.total_steps):
                    ahead.append(collect())
                t1 = time.perf_counter()
                stats = b.get(futures)[0]
                weights, version = b.get(b.call(learners[0], "weights"))
                collector.set_weights(weights, version)
                policy.load_state_dict(weights)
                t2 = time.perf_counter()

                rollout = {**episodes, **collector.fault_stats(),
                           "learner_restarts": float(restarts_before + restarted)}
                rollout["reward_per_step"] = float(batch.traj.rewards.sum() / max(batch.env_steps, 1))
                times = {f"{k}_seconds": v for k, v in batch.seconds.items()}
                times.update(steps_per_second=batch.env_steps / (t2 - t_window), update_seconds=t2 - t1,
                             wall_seconds=time.time() - t_start, weight_version=float(batch.weight_version),
                             staleness=float(staleness), **role_times(b, collector, learners, t2 - t_window))
                logger.log("train", stats, env_steps)
                logger.log("rollout", rollout, env_steps)
                logger.log("time", times, env_steps)
                logger.progress(batch.env_steps, rollout_success=rollout.get("success_rate", float("nan")),
                                kl=stats.get("approx_kl", 0.0))

                result = end_iteration(cfg, it, env_steps, policy, eval_env, seeds, logger, summary, roles, result)
                t_window = time.perf_counter()  # evaluation and checkpoints are no role's time
            except RevivalError as e:  # a lost host's roles found no live host to go to
                raise roles_lost(e, last_ckpt, run_dir) from None
            except b.role_errors as e:  # backend ray: a learner's process may be gone
                if not b.dead(learners):
                    raise
                lost_learner(e, restarted, tc.learner_restarts, last_ckpt, run_dir)
                restarted, died_at = restarted + 1, it
                for lrn in learners:  # a data-parallel group re-forms whole
                    b.kill(lrn)
                learners = make_learners(cfg, placement, b, spec, learner_thread)
                ahead.clear()  # collected ahead on weights the rollback discards
                last_ckpt, it, env_steps, summary = restore(b, collector, learners, policy, last_ckpt)
                collector.pop_episode_stats()  # episodes of the discarded iterations
                summary["learner_restarts"] = restarts_before + restarted
                weights, version = b.get(b.call(learners[0], "weights"))
                collector.set_weights(weights, version)
                policy.load_state_dict(weights)
                result = None
                logger.close()  # reopened at the checkpoint's step: TensorBoard drops the later events
                logger = Logger(run_dir / "tb", tc.total_steps, env_steps, tc.progress)
                logger.print(f"learner died at iteration {died_at} ({type(e).__name__}); restart {restarted} of "
                             f"{tc.learner_restarts}: rolled back to {last_ckpt.name} (step {env_steps})")
                role_times(b, collector, learners, 0.0)
                t_window = time.perf_counter()
        if stop and summary.get("checkpoint") != str(run_dir / "checkpoints" / f"iter_{it:06d}"):
            save_iteration(cfg, it, env_steps, policy, summary, roles, result)
        logger.close()
    finally:
        stopping.__exit__(None, None, None)
        if eval_env is not None:
            eval_env.close()
        backend.shutdown()
    stop.check(f"checkpoint {summary.get('checkpoint')} (iteration {it}, {env_steps} of {tc.total_steps} env steps)",
               f"{program()} train --resume {run_dir}")
    summary.update(run_dir=str(run_dir), tensorboard=str(run_dir / "tb"), wall_seconds=time.time() - t_start,
                   env_steps=env_steps, iterations=it, backend=backend_name,
                   learner_restarts=restarts_before + restarted)
    return summary
