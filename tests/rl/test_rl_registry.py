"""The algorithm table (embodied/rl/registry.py): the single-process loop and the roles both
build their collector and learner from it, and the config accepts exactly its names."""

import dataclasses

import pytest

from embodied.config import load_config
from embodied.config_loader import ConfigError
from embodied.rl.registry import ALGORITHMS, algorithm
from embodied.rl.train import train

TINY = ["env.task=Reach", "env.num_envs=8", "ppo.rollout_steps=8", "ppo.minibatches=2", "ppo.epochs=1",
        "policy.hidden_sizes=[32,32]", "train.total_steps=128", "train.eval_every=0", "train.eval_episodes=2",
        "train.video_episodes=0", "train.progress=false", "train.torch_threads=1"]


def test_the_table_holds_ppo_and_grpo_and_nothing_else_is_accepted():
    assert {"ppo", "grpo"} <= set(ALGORITHMS)
    assert algorithm("grpo").section == "grpo"
    with pytest.raises(ConfigError, match=r"^train.algorithm: 'a2c' is not allowed; choose one of ppo, grpo"):
        load_config(None, ["train.algorithm=a2c"])
    with pytest.raises(ConfigError, match=r"^grpo.group_size: env.num_envs=6"):  # the entry's own check
        load_config(None, ["train.algorithm=grpo", "env.num_envs=6"])


@pytest.mark.parametrize("roles", [False, True], ids=["local_loop", "roles"])
def test_a_new_entry_is_all_both_loops_need(tmp_path, monkeypatch, roles):
    """A new name whose factories wrap PPO's: trained by name, through the single-process loop
    and through the roles, with no other change; each loop calls the factories it needs."""
    calls = []
    ppo = ALGORITHMS["ppo"]

    def counted(kind, fn):
        def wrapper(*args, **kwargs):
            calls.append(kind)
            return fn(*args, **kwargs)
        return wrapper

    entry = dataclasses.replace(ppo, name="ppo_counted", collector=counted("collector", ppo.collector),
                                sharded_collector=counted("sharded", ppo.sharded_collector),
                                learner=counted("learner", ppo.learner))
    monkeypatch.setitem(ALGORITHMS, "ppo_counted", entry)
    extra = ["train.backend=local"] if roles else []
    cfg = load_config(None, TINY + extra + ["train.algorithm=ppo_counted", f"train.run_dir={tmp_path}"])
    summary = train(cfg)
    assert summary["iterations"] == 2 and summary["env_steps"] == 128
    assert sorted(set(calls)) == (["learner", "sharded"] if roles else ["collector", "learner"])
