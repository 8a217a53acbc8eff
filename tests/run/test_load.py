"""Loading what a run wrote, without the RL room (embodied/run/load.py, embodied/run/env.py):
a checkpoint records the spec of the env its policy ran in, and `embodied serve` sizes the
robot from that record, building no simulator; checkpoints written before records held a spec
fall back to the task's simulator. (That replaying imports no module of embodied.rl is
tests/test_imports.py's: tools/check_imports.py follows every chain of imports.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from embodied.config import load_config
from embodied.run.load import load_trained

ROOT = Path(__file__).resolve().parents[2]
OLD_MLP = ROOT / "tests" / "fixtures" / "checkpoints_v1" / "mlp"  # written before records held a spec


def test_a_trained_checkpoint_records_its_env_spec_and_serve_reads_it(tmp_path):
    """The end of an iteration (end_iteration, which both training loops call) writes the spec
    of the env it evaluated in; load_trained gives it back and serve sizes the robot from it."""
    from embodied.deploy.serve import robot_config_for
    from embodied.rl.loop_parts import end_iteration
    from embodied.run.env import build_env, eval_seeds
    from embodied.run.logger import Logger
    from policies.registry import build_policy

    cfg = load_config(None, ["env.task=Reach", "env.num_envs=1", "env.max_episode_steps=5", "policy.hidden_sizes=[16]",
                             "train.total_steps=8", "train.video_episodes=0", "train.progress=false",
                             f"train.run_dir={tmp_path}"])
    env = build_env(cfg.env)
    try:
        policy = build_policy(cfg.policy, env.spec)
        logger = Logger(tmp_path / "tb", 8, 8, False)
        end_iteration(cfg, 1, 8, policy, env, eval_seeds(1), logger, {}, dict, None)
        logger.close()
        spec = env.spec
    finally:
        env.close()
    _, loaded, policy = load_trained(tmp_path)
    got = policy.record["env_spec"]
    assert got["task"] == "Reach" and "num_envs" not in got
    assert {k: got[k] for k in ("action_dim", "privileged_dim", "state_dim", "max_episode_steps")} == {
        "action_dim": spec.action_dim, "privileged_dim": spec.privileged_dim, "state_dim": spec.state_dim,
        "max_episode_steps": 5}
    rc = robot_config_for(loaded, record=policy.record)
    assert (rc.action_dim, rc.privileged_dim, rc.max_episode_steps) == (spec.action_dim, spec.privileged_dim, 5)
    # the record alone sizes the robot: a task no simulator here knows, with the spec recorded
    unknown = load_config(None, ["env.task=ArmOnlyOnTheRobot"])
    rc = robot_config_for(unknown, record={**policy.record, "env_spec": {**got, "max_episode_steps": 7}})
    assert (rc.task, rc.max_episode_steps, rc.action_dim) == ("ArmOnlyOnTheRobot", 7, spec.action_dim)


def test_a_checkpoint_without_a_recorded_spec_reads_the_tasks_simulator():
    from embodied.deploy.serve import recorded_spec, robot_config_for
    from sims.vecenv import EnvError

    _, cfg, policy = load_trained(OLD_MLP)
    assert "env_spec" not in policy.record
    spec = recorded_spec(cfg, policy.record)
    assert (spec["task"], spec["action_dim"], spec["max_episode_steps"]) == ("Reach", 4, 50)
    assert robot_config_for(cfg, record=policy.record).privileged_dim == policy.config.obs_dim
    with pytest.raises(EnvError):  # no spec recorded and no simulator of the task: the simulator's one-line error
        recorded_spec(load_config(None, ["env.task=ArmOnlyOnTheRobot"]), {})



def test_a_policy_trained_in_a_world_model_fits_the_task_the_model_learned(tmp_path):
    """Tasks compare by the simulator task behind them: the record's env_spec.sim_task, or for a
    record written before it, the world-model family's (its config.json), with no prefix test
    outside the family table."""
    import json

    from policies.base import PolicyLoadError, check_fits
    from sims.registry import make_env, sim_task

    (tmp_path / "config.json").write_text(json.dumps({"config": {"task": "Reach"}}))
    assert sim_task(f"wm:{tmp_path}") == "Reach" and sim_task("Reach") == "Reach"
    _, _, policy = load_trained(OLD_MLP)
    reach, push = make_env("Reach", 1, num_threads=1).spec, make_env("PushCube", 1, num_threads=1).spec
    policy.record = {**policy.record, "task": f"wm:{tmp_path}", "env_spec": {"sim_task": "Reach"}}
    check_fits(policy, reach, "here")
    with pytest.raises(PolicyLoadError, match="^here: trained on task 'Reach', not 'PushCube'"):
        check_fits(policy, push, "here")
    # an old record (no env_spec), as load_trained completes it from the family table
    from embodied.run import load

    policy.record = {"task": f"wm:{tmp_path}"}
    load._with_sim_task(policy)
    assert policy.record["sim_task"] == "Reach"
    check_fits(policy, reach, "here")
