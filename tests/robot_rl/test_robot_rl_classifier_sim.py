"""A learned success classifier on the in-process twin (`sim:` with robot.success: classifier,
embodied/robot_rl/sim_robot.py): in training episodes the classifier's verdict ends the episode
and gives the reward; the twin's own success only ends its physics (the twin holds its last frame
as robot-sim does) and is reported as info["twin_success"]; held-out evaluation keeps the twin's
success. The success functions here are rules on the privileged observation, so every verdict is
known; tests/robot_rl/test_reward_classifier.py runs the actor with a trained classifier."""

from __future__ import annotations

import pytest
import torch

from embodied.robot_rl.config import FinetuneConfigError, config_from_dict
from embodied.robot_rl.sim_robot import SimConfig, SimRobot
from robot_bridge.robot_env import RobotEnvConfig
from sims.registry import expert_for

ROBOT = {"task": "Reach", "privileged_topic": "/privileged", "privileged_dim": 15, "max_episode_steps": 25}


def _twin(success_fn, judging: bool = True) -> SimRobot:
    env = SimRobot(RobotEnvConfig(**ROBOT), SimConfig(seed=3), success_fn=success_fn)
    env.judging = judging
    return env


def _expert_until_done(env: SimRobot, obs: dict) -> list:
    """The task's expert acts until the episode ends; the step results [StepResult]."""
    expert, out = expert_for("Reach"), []
    for _ in range(ROBOT["max_episode_steps"]):
        out.append(env.step(torch.as_tensor(expert(obs["privileged"].double().numpy()))))
        obs = out[-1].obs
        if bool(out[-1].done[0]):
            break
    return out


def test_a_missed_success_holds_the_twin_until_the_time_limit():
    env = _twin(lambda obs: False)  # a classifier that never says success
    try:
        steps = _expert_until_done(env, env.reset()[0])
        twin = [bool(r.info["twin_success"][0]) for r in steps]
        first = twin.index(True)  # the expert reaches the goal within the time limit
        assert first < ROBOT["max_episode_steps"] - 2 and all(twin[first:])
        assert len(steps) == ROBOT["max_episode_steps"]  # not ended by the twin: truncated at the limit
        assert not any(bool(r.info["success"][0]) or float(r.reward[0]) for r in steps)
        assert bool(steps[-1].truncated[0]) and not bool(steps[-1].terminated[0])
        held = steps[first].obs["privileged"]
        assert all(torch.equal(r.obs["privileged"], held) for r in steps[first:-1])  # the twin holds
        assert torch.equal(steps[-1].final_obs["privileged"], held)
        assert not torch.equal(steps[-1].obs["privileged"], held)  # the next episode, the twin's own
    finally:
        env.close()


def test_the_classifier_ends_the_episode_and_evaluation_keeps_the_twins_success():
    near = lambda obs: bool(obs["privileged"][0, -3:].norm() < 0.05)  # noqa: E731  (twice the twin's 2.5 cm)
    env = _twin(near)
    try:
        steps = _expert_until_done(env, env.reset()[0])
        last = steps[-1]
        assert bool(last.terminated[0]) and float(last.reward[0]) == 1.0 and near(last.final_obs)
        assert not bool(last.info["twin_success"][0])  # a false success: the twin is not there yet
        assert not any(bool(r.done[0]) for r in steps[:-1])
        env.judging = False  # held-out evaluation: the twin's own success, the classifier not asked
        steps = _expert_until_done(env, env.reset(seed=5)[0])
        assert bool(steps[-1].terminated[0]) and "twin_success" not in steps[-1].info
        assert float(steps[-1].final_obs["privileged"][0, -3:].norm()) < 0.025
    finally:
        env.close()


def test_config_takes_a_classifier_with_the_in_process_twin(tmp_path):
    cfg = config_from_dict({"robot": {**ROBOT, "success": "classifier"}, "sim": {"seed": 0},
                            "reward_classifier": str(tmp_path / "clf.safetensors")})
    assert cfg.robot.success == "classifier"
    with pytest.raises(FinetuneConfigError, match=r"^sim.reward: 'dense' with robot.success 'classifier' .*"
                                                  r"allowed: sparse$"):
        config_from_dict({"robot": {**ROBOT, "success": "classifier"}, "sim": {"reward": "dense"},
                          "reward_classifier": "clf.safetensors"})
    with pytest.raises(FinetuneConfigError, match=r"^robot.success: 'operator' with the in-process twin"):
        config_from_dict({"robot": {**ROBOT, "success": "operator"}, "sim": {}})


def test_frames_past_a_false_success_follow_the_twin_and_a_reset_starts_anew():
    """autoreset False (actor.frames_after_success): after a success the twin had not reached, the
    twin moves on with the commands past it (it has not finished); reset() then begins an episode."""
    env = _twin(lambda obs: True)
    env.autoreset = False
    try:
        obs, _ = env.reset()
        res = env.step(torch.zeros(1, 4))
        assert bool(res.terminated[0]) and not bool(res.info["twin_success"][0])
        assert torch.equal(res.obs["privileged"], res.final_obs["privileged"])  # the frame stays the newest
        push = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
        past = [env.step_past_end(push)["privileged"].clone() for _ in range(2)]
        assert not torch.equal(past[0], res.final_obs["privileged"]) and not torch.equal(past[0], past[1])
        fresh, _ = env.reset()
        assert env.step(torch.zeros(1, 4)).info["twin_success"].tolist() == [False]  # a new episode, judged
        assert not torch.equal(fresh["privileged"], past[1])
    finally:
        env.close()
