"""Multi-task RL plumbing: GRPO groups envs of one task; per-task success in TensorBoard, on the
console and in the summary (sims/multitask.py, VecEnv.task_labels / row_tasks)."""

from __future__ import annotations

import json

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from embodied.cli import main
from embodied.config import load_config
from embodied.rl.episodes import GroupCollector
from embodied.rl.train import train
from sims.metaworld.proc import metaworld_python
from sims.registry import make_env
from sims.vecenv import EnvError


class _Still:
    """A policy that holds still (one zero action per step): the grouping is about the envs."""

    has_critic = False

    def act(self, obs, deterministic=False):
        from types import SimpleNamespace

        B = obs["state"].shape[0]
        return SimpleNamespace(actions=torch.zeros(B, 1, 4), log_prob=torch.zeros(B), value=None,
                               replay={"x": torch.zeros(B)}, log_prob_parts=None)


def test_grpo_groups_stay_within_a_task():
    env = make_env("multi:Reach+PushCube", 8, max_episode_steps=2)
    col = GroupCollector(env, _Still(), group_size=2, seed=0)
    assert col.group_ids.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    traj = col.collect()
    first = traj.obs["privileged"][0]  # [B, P]: members of a group start from the same state
    for g in range(4):
        a, b = (first[i] for i in (traj.group_ids == g).nonzero().flatten().tolist())
        assert torch.equal(a, b)
    assert not torch.equal(first[0], first[2])
    with pytest.raises(EnvError, match="3 envs run Reach, not a multiple of group_size=2"):
        GroupCollector(make_env("multi:Reach+PushCube", 6), _Still(), group_size=2)


@pytest.mark.skipif(not metaworld_python().exists(), reason=".venv-metaworld is absent (make metaworld)")
def test_grpo_groups_metaworld_rows_of_one_task():
    env = make_env("metaworld:MT10", 20, num_workers=1)  # env i runs task i mod 10
    try:
        ids = GroupCollector(env, _Still(), group_size=2).group_ids
        for i in range(10):
            assert ids[i] == ids[i + 10] and ids[i] != ids[(i + 1) % 10]
    finally:
        env.close()


def test_per_task_success_is_logged(tmp_path, capsys):
    cfg = load_config(None, ["env.task=multi:Reach+ReachColor", "env.num_envs=8", "ppo.rollout_steps=32",
                             "ppo.minibatches=2", "ppo.epochs=1", "policy.hidden_sizes=[32,32]",
                             "train.total_steps=512", "train.eval_every=1", "train.eval_episodes=8",
                             "train.video_episodes=0", "train.progress=false", "train.torch_threads=1",
                             f"train.run_dir={tmp_path / 'run'}"])
    summary = train(cfg)
    tags = EventAccumulator(str(tmp_path / "run" / "tb")).Reload().Tags()["scalars"]
    for t in ("rollout/success/Reach", "rollout/success/ReachColor", "eval/success/Reach", "eval/success/ReachColor"):
        assert t in tags, t
    steps, per = summary["eval_per_task"][-1]
    assert set(per) == {"Reach", "ReachColor"} and steps == summary["env_steps"]
    assert "per task: Reach" in capsys.readouterr().out
    # `embodied eval` builds a batch that splits over the tasks (5 episodes: 4 envs, 2 per task)
    # and takes key=value overrides after an option too
    assert main(["eval", summary["checkpoint"], "--episodes", "5", "env.max_episode_steps=3"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["episode_length"] <= 3
    assert set(k for k in res if k.startswith("success/")) == {"success/Reach", "success/ReachColor"}
