"""Data-parallel learner: the same batch split over 2 processes (torch.distributed, gloo on
127.0.0.1) gives the single-process update within float tolerance, for PPO and for GRPO (whole
groups per rank, weighed by their episodes)."""

import copy
import dataclasses

import torch
import torch.multiprocessing as mp

from embodied.config import load_config
from embodied.distributed.data_parallel import DataParallel, grpo_shard, shard_rows, shard_trajectory
from embodied.distributed.loop import free_port
from embodied.distributed.roles import LearnerWorker, build_role_policy
from embodied.rl.episodes import GroupCollector
from embodied.rl.learner import PPOLearner
from embodied.rl.rollout import RolloutCollector
from embodied.run.env import build_env

# One minibatch and no per-minibatch advantage normalisation: the loss is a plain mean over the
# batch, so the mean of the two halves' gradients is the whole batch's (data_parallel.py).
CFG = ["env.task=PushCube", "env.num_envs=8", "ppo.rollout_steps=8", "ppo.minibatches=1", "ppo.epochs=3",
       "ppo.normalize_advantages=false", "policy.hidden_sizes=[32,32]", "env.num_threads=1"]

# 3 groups of 4 over 2 ranks: rank 0 takes 2 groups, rank 1 one, so the ranks' gradients weigh 2/3
# and 1/3 (an equal average would differ). Every group kept; one minibatch; adaptive lr on.
GRPO = ["env.task=ReachPoint", "env.num_envs=12", "train.algorithm=grpo", "grpo.group_size=4", "grpo.reward=return",
        "grpo.filter_groups=false", "ppo.minibatches=1", "ppo.epochs=2", "policy.hidden_sizes=[32,32]",
        "env.num_threads=1"]


def rank_update(rank: int, world: int, master: str, path: str) -> None:
    torch.set_num_threads(1)
    data = torch.load(path, weights_only=False)  # this test's own file in tmp_path: a Trajectory and an EnvSpec
    cfg = load_config(None, CFG)
    policy = build_role_policy(cfg, data["spec"], seed=100 + rank)  # rank 1 starts elsewhere: broadcast fixes it
    if rank == 0:
        policy.load_state_dict(data["init"])
    learner = PPOLearner(policy, cfg.ppo)
    dp = DataParallel(policy, rank, world, master)
    dp.attach(learner)
    torch.manual_seed(rank)
    learner.update(shard_trajectory(data["traj"], rank, world))
    torch.save(policy.state_dict(), f"{path}.rank{rank}")
    # GRPO in the same process group (one spawn for both: starting the processes is most of the time)
    worker = LearnerWorker(load_config(None, GRPO), data["grpo_spec"], 0, 1, rank, world, master)
    worker.update(data["grpo_traj"])
    torch.save(worker.policy.state_dict(), f"{path}.grpo{rank}")
    dp.close()
    worker.dp.close()


def test_shard_rows_cover_the_batch():
    assert [shard_rows(10, r, 3) for r in range(3)] == [slice(0, 4), slice(4, 7), slice(7, 10)]


def test_two_processes_equal_one(tmp_path):
    """PPO (halves of the envs) and GRPO (whole groups, 2 and 1 of 3)."""
    torch.set_num_threads(1)
    cfg = load_config(None, CFG)
    env = build_env(cfg.env)
    policy = build_role_policy(cfg, env.spec, seed=0)
    collector = RolloutCollector(env, policy, cfg.ppo.rollout_steps)
    collector.reset(seed=0)
    traj = collector.collect()
    env.close()
    init = copy.deepcopy(policy.state_dict())
    path = str(tmp_path / "batch.pt")
    grpo_cfg, grpo_spec, grpo_traj = grpo_batch()
    torch.save({"traj": traj, "init": init, "spec": env.spec, "grpo_traj": grpo_traj, "grpo_spec": grpo_spec}, path)
    one = LearnerWorker(grpo_cfg, grpo_spec, 0)
    grpo_init = copy.deepcopy(one.policy.state_dict())
    one.update(grpo_traj)
    grpo_whole = one.policy.state_dict()

    torch.manual_seed(0)
    PPOLearner(policy, cfg.ppo).update(traj)
    whole = policy.state_dict()
    half = build_role_policy(cfg, env.spec, seed=0)
    PPOLearner(half, cfg.ppo).update(shard_trajectory(traj, 0, 2))  # one half alone: must differ

    mp.spawn(rank_update, args=(2, f"127.0.0.1:{free_port()}", path), nprocs=2, join=True)
    ranks = [torch.load(f"{path}.rank{r}", weights_only=True) for r in range(2)]
    for k, v in whole.items():
        for r in ranks:
            torch.testing.assert_close(r[k], v, rtol=1e-5, atol=1e-6, msg=f"{k}")
    moved = (whole["actor.0.weight"] - init["actor.0.weight"]).abs().max()
    assert moved > 1e-4  # the update did something
    assert (half.state_dict()["actor.0.weight"] - whole["actor.0.weight"]).abs().max() > 1e-3 * float(moved)
    grpo_ranks = [torch.load(f"{path}.grpo{r}", weights_only=True) for r in range(2)]
    for k, v in grpo_whole.items():
        for r in grpo_ranks:
            torch.testing.assert_close(r[k], v, rtol=1e-5, atol=1e-6, msg=f"grpo {k}")
    assert (grpo_whole["actor.0.weight"] - grpo_init["actor.0.weight"]).abs().max() > 1e-4


def grpo_batch():
    cfg = load_config(None, GRPO)
    env = build_env(cfg.env)
    traj = GroupCollector(env, build_role_policy(cfg, env.spec, seed=0), 4, seed=0).collect()
    env.close()
    return cfg, env.spec, traj


def test_grpo_shards_hold_whole_kept_groups():
    cfg, _, traj = grpo_batch()
    mixed = lambda envs: dataclasses.replace(  # noqa: E731  success on envs' first steps: their groups kept
        traj, success=torch.zeros_like(traj.success).index_fill_(1, torch.tensor(envs), True) & traj.episode_mask)
    grpo = dataclasses.replace(cfg.grpo, reward="success", filter_groups=True)
    two = [grpo_shard(mixed([0, 9]), grpo, r, 2) for r in range(2)]  # groups 0 and 2 kept
    assert [s.group_ids.tolist() for s, _ in two] == [[0] * 4, [2] * 4] and [w for _, w in two] == [0.5, 0.5]
    one = grpo_shard(mixed([5]), grpo, 1, 2)  # one kept group for two ranks: both take the whole batch
    assert one[0] is not None and one[0].num_envs == 12 and one[1] == 0.5
    assert [w for _, w in (grpo_shard(traj, cfg.grpo, r, 2) for r in range(2))] == [8 / 12, 4 / 12]
