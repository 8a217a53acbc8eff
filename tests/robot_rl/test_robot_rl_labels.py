"""Operator labels (embodied/robot_rl/labels.py): success / failure / reset from a std_msgs/String
or a Joy button over DDS, and the actor ending an episode on a label (in-process twin)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from embodied.robot_rl.config import FinetuneConfigError, config_from_dict
from embodied.robot_rl.labels import LabelConfig, Labels
from robot_bridge import ros_types as rt
from robot_bridge.transport import COMMAND_QOS
from robot_bridge.transport_factory import make_transport
from sims.vecenv import EnvError


def _until(cond, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return cond()


def _labelled_episodes(cfg, run, labels: list[str]):
    """An in-process actor (a random policy saved in run) playing one episode per label, each
    label given before its episode's first step -> (the closed actor, the episodes' summaries)."""
    from embodied.robot_rl.actor import Actor
    from embodied.robot_rl.data import save_policy
    from embodied.robot_rl.networks import TanhGaussianActor

    run.mkdir()
    save_policy(run / "policy.safetensors", TanhGaussianActor(15, 4, (16,)), 0, (16,))
    actor, episodes = Actor(cfg), []
    try:
        obs, _ = actor.env.reset()
        for i, label in enumerate(labels):
            actor.labels.give(label, t=float("inf"))  # counts for the next episode's first step
            obs, summary = actor.episode(obs, i)
            episodes.append(summary)
    finally:
        actor.link.close()
        actor._progress.close()
        actor.close()
    return actor, episodes


def test_string_and_joy_labels_over_dds(dds_env):
    robot, op = make_transport("dds", node_name="robot"), make_transport("dds", node_name="keyboard")
    try:
        words = Labels(LabelConfig(), robot)
        joy_labels = Labels(LabelConfig(topic="/joy", type="sensor_msgs/msg/Joy", success="buttons.1",
                                        failure="buttons.2", reset="buttons.0"), robot)
        say = op.publisher("/labels", "std_msgs/msg/String", COMMAND_QOS)
        pad = op.publisher("/joy", "sensor_msgs/msg/Joy", COMMAND_QOS)
        joy = rt.msg_class("sensor_msgs/msg/Joy")
        time.sleep(0.5)  # discovery
        t0 = time.monotonic()
        say.publish(rt.scalar("std_msgs/msg/String", "hello"))  # not a label
        say.publish(rt.scalar("std_msgs/msg/String", "Success"))
        assert _until(lambda: len(words._events) == 1)
        assert words.take(since=time.monotonic()) is None  # given before the episode started: dropped
        say.publish(rt.scalar("std_msgs/msg/String", "failure"))
        assert _until(lambda: len(words._events) == 1) and words.take(since=t0) == "failure"
        assert words.take(since=t0) is None  # taken once
        say.publish(rt.scalar("std_msgs/msg/String", "reset"))
        assert _until(lambda: len(words._events) == 1) and words.take(since=t0) == "reset"

        def press(*buttons):
            pad.publish(joy(header=rt.header(), axes=np.zeros(2, np.float32), buttons=np.array(buttons, np.int32)))

        for b in ([0, 1, 0], [0, 1, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1], [1, 0, 1]):  # a held button is one press
            press(*b)
        assert _until(lambda: len(joy_labels._events) == 3)
        assert [label for _, label in joy_labels._events] == ["success", "failure", "reset"]
        assert joy_labels.take(since=t0) == "reset"  # the newest
    finally:
        robot.close()
        op.close()


def test_label_config_errors_are_one_line():
    with pytest.raises(EnvError, match=r"^labels.type: unsupported 'std_msgs/msg/Bool'; allowed: "):
        LabelConfig(type="std_msgs/msg/Bool")
    with pytest.raises(EnvError, match=r"^labels: 'axes.1' is not a Joy button"):
        LabelConfig(type="sensor_msgs/msg/Joy", success="axes.1", failure="buttons.0")
    with pytest.raises(EnvError, match=r"^labels.failure, labels.reset: the same 'stop'; each label needs its own"):
        LabelConfig(failure="stop", reset="stop")
    assert LabelConfig().reset == "reset" and LabelConfig(type="sensor_msgs/msg/Joy", success="buttons.1",
                                                          failure="buttons.2").reset is None
    robot = {"task": "Reach", "privileged_topic": "/privileged", "privileged_dim": 15}
    with pytest.raises(FinetuneConfigError, match=r"^labels.topic: the in-process twin"):
        config_from_dict({"robot": robot, "sim": {}, "labels": {}})
    with pytest.raises(FinetuneConfigError, match=r"^labels.colour: unknown key"):
        config_from_dict({"robot": robot, "labels": {"colour": 1}})


def test_actor_ends_an_episode_on_a_label(tmp_path):
    run = tmp_path / "run"
    cfg = config_from_dict({"run_dir": str(run), "robot": {"task": "Reach", "privileged_topic": "/privileged",
                                                           "privileged_dim": 15},
                            "sim": {"seed": 1}, "labels": {"topic": None, "terminal": True},
                            "actor": {"episodes": 3, "eval_every": 0}})
    actor, (first, second, third) = _labelled_episodes(cfg, run, ["success", "failure", "reset"])
    assert (first["success"], first["steps"]) == (True, 1) and (second["success"], second["steps"]) == (False, 1)
    assert (third["success"], third["steps"], third["label"], second["label"]) == (False, 1, "reset", "failure")
    from embodied.data.dataset import read_episodes

    eps = list(read_episodes(run / "online"))
    assert eps[0]["success"].tolist() == [True, True]  # the labelled step and its kept frame
    assert eps[1]["success"].tolist() == [False] and eps[1]["reward"].tolist() == [0.0]
    sent = [t for ep in sorted(actor.memory) for t in actor.memory[ep]]
    assert [(t["terminated"], float(t["reward"])) for t in sent] == [(1.0, 1.0), (0.0, 0.0), (0.0, 0.0)]


def test_frames_past_a_success_are_recorded_as_positives_and_not_streamed(tmp_path):
    from embodied.data.dataset import read_episodes
    from embodied.robot_rl.reward import episode_frames

    robot = {"task": "Reach", "privileged_topic": "/privileged", "privileged_dim": 15}
    with pytest.raises(FinetuneConfigError, match=r"^actor.frames_after_success: 2; allowed: >= 0, and 0 with "):
        config_from_dict({"robot": robot, "actor": {"frames_after_success": 2, "keep_success_frame": False}})
    run = tmp_path / "run"
    cfg = config_from_dict({"run_dir": str(run), "robot": robot, "sim": {"seed": 1},
                            "labels": {"topic": None, "terminal": True},
                            "actor": {"episodes": 2, "eval_every": 0, "frames_after_success": 3}})
    actor, (first, second) = _labelled_episodes(cfg, run, ["success", "failure"])
    assert (first["success"], first["steps"], second["steps"]) == (True, 1, 1)
    eps = list(read_episodes(run / "online"))
    # the labelled step, 3 frames past it (the twin holds a finished episode), the kept frame
    assert eps[0]["success"].tolist() == [True] * 5 and len(eps[1]["success"]) == 1
    held = eps[0]["obs.privileged"][1:]
    assert torch.equal(held, held[:1].expand_as(held)) and not torch.equal(eps[1]["obs.privileged"][0], held[0])
    assert [lab.tolist() for _, lab in episode_frames(run / "online", "privileged")] == [[False] + [True] * 4, [False]]
    assert [(t["episode"], t["step"]) for ep in sorted(actor.memory) for t in actor.memory[ep]] == [(0, 0), (1, 0)]
    assert actor.train_steps == 5  # the 3 commands past the success are robot time


def test_robot_env_holds_a_finished_episode_until_the_caller_resets(dds_env):
    """RobotEnv.autoreset False over DDS (the frames past success): the twin's final frame stays
    the newest, step_past_end sends a command and returns the held frame, reset() starts anew."""
    import threading

    from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
    from robot_bridge.sim_node import SimNodeConfig, SimRobotNode
    from sims.registry import expert_for

    node = SimRobotNode(SimNodeConfig(task="Reach", image_size=0, transport="dds", seed=4))
    spin = threading.Thread(target=node.spin, daemon=True)
    spin.start()
    env = RobotEnv(RobotEnvConfig(task="Reach", privileged_topic="/privileged", privileged_dim=15, transport="dds",
                                  control_hz=100, max_episode_steps=40))
    try:
        env.autoreset = False
        obs, _ = env.reset()
        expert = expert_for("Reach")
        for _ in range(40):
            res = env.step(torch.as_tensor(expert(obs["privileged"].double().numpy())))
            obs = res.obs
            if bool(res.done[0]):
                break
        assert bool(res.info["success"][0]) and torch.equal(res.obs["privileged"], res.final_obs["privileged"])
        sent = env.commands_sent
        held = [env.step_past_end(torch.tensor([[0.5, 0.0, 0.0, 0.0]])) for _ in range(2)]
        assert env.commands_sent == sent + 2
        assert all(torch.equal(h["privileged"], res.final_obs["privileged"]) for h in held)  # the twin holds
        fresh, _ = env.reset()
        assert not torch.equal(fresh["privileged"], res.final_obs["privileged"])
    finally:
        env.close()
        node.stop.set()
        spin.join(5)
        node.close()
