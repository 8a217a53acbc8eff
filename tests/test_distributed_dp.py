"""Data-parallel learner: the same batch split over 2 processes (torch.distributed, gloo on
127.0.0.1) gives the single-process update within float tolerance."""

import copy

import torch
import torch.multiprocessing as mp

from embodied.config import load_config
from embodied.distributed.data_parallel import DataParallel, shard_rows, shard_trajectory
from embodied.distributed.loop import free_port
from embodied.distributed.roles import build_role_policy
from embodied.learner import PPOLearner
from embodied.rollout import RolloutCollector
from embodied.train import build_env

# One minibatch and no per-minibatch advantage normalisation: the loss is a plain mean over the
# batch, so the mean of the two halves' gradients is the whole batch's (data_parallel.py).
CFG = ["env.task=PushCube", "env.num_envs=8", "ppo.rollout_steps=8", "ppo.minibatches=1", "ppo.epochs=3",
       "ppo.normalize_advantages=false", "policy.hidden_sizes=[32,32]", "env.num_threads=1"]


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
    dp.close()


def test_shard_rows_cover_the_batch():
    assert [shard_rows(10, r, 3) for r in range(3)] == [slice(0, 4), slice(4, 7), slice(7, 10)]


def test_two_processes_equal_one(tmp_path):
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
    torch.save({"traj": traj, "init": init, "spec": env.spec}, path)

    torch.manual_seed(0)
    PPOLearner(policy, cfg.ppo).update(traj)
    whole = policy.state_dict()
    half = build_role_policy(cfg, env.spec, seed=0)
    PPOLearner(half, cfg.ppo).update(shard_trajectory(traj, 0, 2))  # one half alone: must differ

    mp.spawn(rank_update, args=(2, f"127.0.0.1:{free_port()}", path), nprocs=2, join=True)
    ranks = [torch.load(f"{path}.rank{r}") for r in range(2)]
    for k, v in whole.items():
        for r in ranks:
            torch.testing.assert_close(r[k], v, rtol=1e-5, atol=1e-6, msg=f"{k}")
    moved = (whole["actor.0.weight"] - init["actor.0.weight"]).abs().max()
    assert moved > 1e-4  # the update did something
    assert (half.state_dict()["actor.0.weight"] - whole["actor.0.weight"]).abs().max() > 1e-3 * float(moved)
