"""Roles and backends: placement checks before anything starts; the same seeded training over
roles gives identical weights in one process (backend local) and as Ray actors (backend ray)."""

import functools
import threading

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from embodied.config import load_config
from embodied.distributed.backend import LocalBackend, make_backend
from embodied.distributed.loop import build_roles, free_port, train_roles
from embodied.distributed.placement import (PlacementError, check_address, check_fits, placement_from_dict,
                                            preset)
from embodied.distributed.roles import build_role_policy
from embodied.rl.episodes import GroupCollector
from embodied.rl.rollout import RolloutCollector
from embodied.run.env import build_env
from policies.base import ActOutput

TINY = ["env.task=PushCube", "env.num_envs=8", "ppo.rollout_steps=8", "ppo.minibatches=2", "ppo.epochs=1",
        "policy.hidden_sizes=[32,32]", "train.torch_threads=1"]


def test_presets_and_overrides():
    p = placement_from_dict({"preset": "pipelined", "env": {"count": 4, "labels": {"role": "env"}}})
    assert (p.stages, p.env.count, p.env.labels, p.rollout.num_gpus) == (2, 4, {"role": "env"}, 0.0)
    g = preset("collocated", gpus=1)
    assert g.rollout.num_gpus == g.learner.num_gpus == 0.5 and g.stages == 1
    assert preset("disaggregated", gpus=2).learner.num_gpus == 1.0


@pytest.mark.parametrize("raw, field", [
    ({"preset": "hybrid"}, "placement.preset"),
    ({"envs": {}}, "placement.envs"),
    ({"env": {"count": 0}}, "placement.env.count"),
    ({"rollout": {"num_gpus": -1}}, "placement.rollout.num_gpus"),
    ({"learner": {"gpu": 1}}, "placement.learner.gpu"),
    ({"env": {"count": 3}, "stages": 2}, "placement.stages"),
])
def test_bad_placement_is_one_line(raw, field):
    with pytest.raises(PlacementError) as e:
        placement_from_dict(raw)
    assert str(e.value).startswith(field) and "\n" not in str(e.value)


def test_more_than_the_cluster_has():
    too_many = placement_from_dict({"env": {"count": 8, "num_cpus": 1}})
    with pytest.raises(PlacementError, match=r"asks for 9 CPUs .* has 2"):
        check_fits(too_many, {"CPU": 2.0, "GPU": 0.0})
    gpu = placement_from_dict({"rollout": {"num_gpus": 0.5}, "learner": {"num_gpus": 1}})
    with pytest.raises(PlacementError, match=r"asks for 1.5 GPUs"):
        check_fits(gpu, {"CPU": 16.0, "GPU": 1.0})
    labelled = placement_from_dict({"env": {"labels": {"role": "env"}}})
    with pytest.raises(PlacementError, match=r"placement.env.labels: no node has labels"):
        check_fits(labelled, {"CPU": 16.0}, [{"ray.io/node-id": "x"}])
    check_fits(labelled, {"CPU": 16.0}, [{}, {"role": "env"}])
    with pytest.raises(PlacementError, match="backend: unknown backend 'spark'"):
        make_backend("spark", preset("collocated"))


def test_unreachable_address_fails_before_start():
    with pytest.raises(PlacementError, match=r"placement.address: cannot reach the Ray head"):
        check_address(f"127.0.0.1:{free_port()}")
    with pytest.raises(PlacementError, match=r"placement.address: 'nohost'"):
        check_address("nohost")


def test_local_roles_are_deterministic_and_seeded(tmp_path):
    cfg = load_config(None, TINY)
    a = train_roles(cfg, preset("collocated", 2), "local", iterations=2, log_dir=tmp_path)
    b = train_roles(cfg, preset("collocated", 2), "local", iterations=2)
    c = train_roles(load_config(None, TINY + ["train.seed=1"]), preset("collocated", 2), "local", iterations=2)
    assert a["version"] == 2 and [h["weight_version"] for h in a["history"]] == [0, 1]
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
    assert not torch.equal(a["weights"]["actor.0.weight"], c["weights"]["actor.0.weight"])
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    for tag in ("time/inference_seconds", "time/env_wait_seconds", "time/update_seconds", "train/approx_kl"):
        assert [e.step for e in events.Scalars(tag)] == [64, 128], tag  # 8 envs x 8 steps per iteration


def test_stale_schedules():
    """max_staleness k: batch i is collected on version max(0, i - k) (each update pushes its own
    weights, even with several in flight) and the history logs it."""
    cfg = load_config(None, TINY)
    runs = {k: train_roles(cfg, preset("collocated", 1), "local", iterations=4, max_staleness=k) for k in (0, 1, 2)}
    for k, run in runs.items():
        assert [h["staleness"] for h in run["history"]] == [min(i, k) for i in range(4)], k
        assert [h["weight_version"] for h in run["history"]] == [max(0, i - k) for i in range(4)], k
        assert run["version"] == 4
    w = {k: run["weights"]["actor.0.weight"] for k, run in runs.items()}
    assert not torch.equal(w[0], w[1]) and not torch.equal(w[1], w[2])
    for bad in (-1, 1.5, True):
        with pytest.raises(PlacementError, match=f"max_staleness: {bad!r}; allowed: an integer >= 0"):
            train_roles(cfg, preset("collocated", 1), "local", max_staleness=bad)


def test_learner_thread_equals_the_inline_stale_schedule():
    """backend local with max_staleness 1 runs the learner's calls on a thread of its own, so an
    update runs beside the next collection (whose policy samples from torch's global stream); the
    learner draws its minibatch permutations from a generator of its own, so the weights equal
    the inline schedule's (and Ray's: test_stale_schedule_on_ray_equals_local)."""
    cfg = load_config(None, TINY + ["ppo.epochs=2"])
    threaded = train_roles(cfg, preset("collocated", 2), "local", iterations=3, max_staleness=1)
    inline = train_roles(cfg, preset("collocated", 2), "local", iterations=3, max_staleness=1, learner_thread=False)
    assert threaded["where"]["learner"][0]["thread"].startswith("LearnerWorker")
    assert inline["where"]["learner"][0]["thread"] == threading.current_thread().name
    assert [h["staleness"] for h in threaded["history"]] == [0, 1, 1]
    for k, v in inline["weights"].items():
        assert torch.equal(v, threaded["weights"][k]), k


def test_stale_schedule_recomputes_the_log_probs_by_default():
    """ppo.recompute_log_probs unset: a stale schedule recomputes the old log-probs (the same
    weights as with it set true, others than with it false)."""
    def run(extra, k):
        cfg = load_config(None, TINY + ["ppo.epochs=2", *extra])
        return train_roles(cfg, preset("collocated", 1), "local", iterations=3, max_staleness=k)["weights"]

    key = "actor.0.weight"
    default, on, off = run([], 1), run(["ppo.recompute_log_probs=true"], 1), run(["ppo.recompute_log_probs=false"], 1)
    assert torch.equal(default[key], on[key]) and not torch.equal(default[key], off[key])


@pytest.mark.parametrize("workers", [1, 2])
def test_sharded_collector_matches_the_single_process_collector(workers):
    """One shard, synchronous: the same trajectory and episode stats as embodied/rl/rollout.py's
    RolloutCollector with the same policy, seeds and RNG stream (60 steps: every env finishes
    an episode of at most 50). Two shards: the same first episodes."""
    cfg = load_config(None, ["env.task=PushCube", "env.num_envs=4", "ppo.rollout_steps=60",
                             "policy.hidden_sizes=[32,32]", "env.num_threads=1"])
    env = build_env(cfg.env)
    policy = build_role_policy(cfg, env.spec, seed=0)
    ref = RolloutCollector(env, policy, 60)
    ref.reset(seed=0)
    torch.manual_seed(1)  # RolloutWorker's own stream starts at seed + 1
    want = ref.collect()
    env.close()

    backend = LocalBackend(preset("collocated", workers))
    try:
        collector, _ = build_roles(cfg, preset("collocated", workers), backend)
        collector.reset(seed=0)
        got = collector.collect().traj
    finally:
        backend.shutdown()
    assert want.dones.any(0).all()  # every env finished an episode
    if workers == 2:  # the same first episodes (seed + i per env); later ones follow each shard's stream
        first_end = int(want.dones.any(1).nonzero()[0])
        assert torch.equal(got.obs["state"][:first_end + 1], want.obs["state"][:first_end + 1])
        assert not torch.equal(got.obs["state"], want.obs["state"])
        return
    for name in ("actions", "log_probs", "values", "rewards", "valid", "terminated", "truncated", "bootstrap",
                 "last_value"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert collector.pop_episode_stats() == ref.pop_episode_stats()


def roles_batch(cfg, place, seed: int):
    """(collector, batch): one collect() of roles built in this process with placement `place`."""
    backend = LocalBackend(place)
    try:
        collector, _ = build_roles(cfg, place, backend)
        collector.reset(seed=seed)
        return collector, collector.collect()
    finally:
        backend.shutdown()


def test_grouped_collector_matches_the_single_process_one():
    """GRPO over 3 env workers of 3, 3 and 2 envs, groups of 4 (both groups span two workers):
    every env's episode is the one embodied/rl/episodes.py's GroupCollector collects with the same
    policy, group seeds and RNG stream; a group's envs start from one state."""
    cfg = load_config(None, ["env.task=ReachPoint", "env.num_envs=8", "train.algorithm=grpo", "grpo.group_size=4",
                             "policy.hidden_sizes=[32,32]", "env.num_threads=1"])
    env = build_env(cfg.env)
    ref = GroupCollector(env, build_role_policy(cfg, env.spec, seed=0), 4, seed=3)
    torch.manual_seed(1)  # RolloutWorker's own stream starts at seed + 1
    want = ref.collect()
    env.close()
    collector, batch = roles_batch(cfg, placement_from_dict({"env": {"count": 3, "num_cpus": 0.25}}), seed=3)
    got, mask = batch.traj, want.episode_mask
    assert collector.sizes == [3, 3, 2] and torch.equal(got.episode_mask, mask) and torch.equal(got.group_ids,
                                                                                                want.group_ids)
    assert torch.equal(got.obs["state"][0, 4], got.obs["state"][0, 7])  # group 1: workers 1 and 2
    assert not torch.equal(got.obs["state"][0, 0], got.obs["state"][0, 4])
    for name in ("log_probs", "rewards", "success"):
        assert torch.equal(getattr(got, name)[mask], getattr(want, name)[mask]), name
    assert collector.pop_episode_stats() == ref.pop_episode_stats()
    assert batch.env_steps == int((want.valid & mask[..., None]).sum())


class StagedPolicy:
    """A policy that infers for rows [0, split) and then [split, B): what a 2-stage collector
    asks of the rollout role at every step."""

    def __init__(self, policy, split):
        self.policy, self.split = policy, split

    def act(self, obs):
        halves = [{k: (v[sl] if torch.is_tensor(v) else v[sl]) for k, v in obs.items()}
                  for sl in (slice(0, self.split), slice(self.split, None))]
        outs = [self.policy.act(h) for h in halves]
        cat = lambda xs: None if xs[0] is None else torch.cat(xs)  # noqa: E731
        return ActOutput(actions=cat([o.actions for o in outs]), log_prob=cat([o.log_prob for o in outs]),
                         value=cat([o.value for o in outs]),
                         replay={k: torch.cat([o.replay[k] for o in outs]) for k in outs[0].replay},
                         log_prob_parts=cat([o.log_prob_parts for o in outs]))


def test_pipelined_grouped_collector_is_group_collector_with_staged_inference():
    """GRPO with 2 stages (pipelined: each stage's env worker on its thread, steps overlapping
    the other stage's inference), 12 envs in groups of 4 (group 1 spans the stages): the batch
    holds every env's episode as GroupCollector collects it when its policy infers for the two
    stages one after the other (the steps after an episode ended are padding, as there). Episodes end at different steps (one at 27 of 50); the collector's last
    inference for stage 0, begun before stage 1's last results were in, is discarded."""
    cfg = load_config(None, ["env.task=Reach", "env.num_envs=12", "train.algorithm=grpo", "grpo.group_size=4",
                             "policy.hidden_sizes=[32,32]", "policy.init_log_std=0.0", "env.num_threads=1"])
    env = build_env(cfg.env)
    ref = GroupCollector(env, StagedPolicy(build_role_policy(cfg, env.spec, seed=0), 6), 4, seed=1)
    torch.manual_seed(1)  # RolloutWorker's own stream starts at seed + 1
    want = ref.collect()
    env.close()
    collector, batch = roles_batch(cfg, preset("pipelined", env_workers=2), seed=1)
    got, mask = batch.traj, want.episode_mask
    assert collector.stages == 2 and torch.equal(got.episode_mask, mask)
    assert sorted(mask.sum(0).tolist())[:2] == [27, 50]  # episodes of different lengths
    assert torch.equal(got.group_ids, want.group_ids)
    for name in ("actions", "log_probs", "rewards", "valid", "terminated", "success"):
        assert torch.equal(getattr(got, name)[mask], getattr(want, name)[mask]), name
    assert torch.equal(got.obs["state"][mask], want.obs["state"][mask])
    assert collector.pop_episode_stats() == ref.pop_episode_stats()
    assert batch.env_steps == int((want.valid & mask[..., None]).sum())


def test_pipelined_batch_is_the_synchronous_batch():
    """With the policy acting deterministically, 2 stages collect the same trajectory as 1 (52
    steps: every env's episode is truncated once, with its bootstrap value): the pipeline changes
    when envs step, not what the batch holds; stochastic runs differ only in the draws. (Bit for
    bit here; the tolerance allows for matrix kernels that round a half batch differently.)"""
    cfg = load_config(None, ["env.task=PushCube", "env.num_envs=8", "ppo.rollout_steps=52",
                             "policy.hidden_sizes=[32,32]", "env.num_threads=1"])
    trajs = []
    for name in ("collocated", "pipelined"):
        place = preset(name, 2)
        backend = LocalBackend(place)
        try:
            collector, _ = build_roles(cfg, place, backend)
            policy = collector.rollout.obj.policy
            policy.act = functools.partial(policy.act, deterministic=True)
            collector.reset(seed=0)
            trajs.append(collector.collect().traj)
        finally:
            backend.shutdown()
    sync, piped = trajs
    assert sync.truncated.any(0).all() and (sync.bootstrap != 0).any()
    for name in ("valid", "terminated", "truncated"):
        assert torch.equal(getattr(sync, name), getattr(piped, name)), name
    for name in ("actions", "log_probs", "values", "rewards", "bootstrap", "last_value"):
        torch.testing.assert_close(getattr(piped, name), getattr(sync, name), rtol=1e-4, atol=1e-5, msg=name)
    for k in sync.obs:
        torch.testing.assert_close(piped.obs[k], sync.obs[k], rtol=1e-4, atol=1e-5, msg=k)
