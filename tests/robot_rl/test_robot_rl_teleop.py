"""Teleop input over DDS (Twist and Joy mapped through the config, NaN dropped, deadman, timeout),
and the finetune config's one-line errors."""

from __future__ import annotations

import time

import numpy as np
import pytest

from embodied.robot_rl.config import FinetuneConfigError, config_from_dict
from robot_bridge import ros_types as rt
from robot_bridge.teleop import Teleop, TeleopConfig, twist
from robot_bridge.transport import COMMAND_QOS
from robot_bridge.transport_factory import make_transport
from sims.vecenv import EnvError


def _wait(teleop: Teleop, count: int, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while teleop.sub.count + teleop.sub.rejected < count and time.monotonic() < end:
        time.sleep(0.01)


def test_twist_maps_to_an_action_and_nan_never_gets_through(dds_env):
    robot, op = make_transport("dds", node_name="robot"), make_transport("dds", node_name="operator")
    try:
        teleop = Teleop(robot, TeleopConfig(scale=(1.0, 1.0, 2.0, 1.0), timeout_s=0.5))
        pub = op.publisher("/teleop", "geometry_msgs/msg/Twist", COMMAND_QOS)
        time.sleep(0.5)  # discovery
        assert teleop.action() is None  # nothing received: the policy acts
        pub.publish(twist([0.1, -0.2, 0.7, 0.0, 0.0, -1.0]))
        _wait(teleop, 1)
        np.testing.assert_allclose(teleop.action(), [0.1, -0.2, 1.0, -1.0])  # 2 * 0.7 clipped to 1
        pub.publish(twist([float("nan"), 0.0, 0.0, 0.0, 0.0, 0.0]))
        pub.publish(twist([0.0, float("inf"), 0.0, 0.0, 0.0, 0.0]))
        _wait(teleop, 3)
        assert teleop.sub.rejected == 2 and "NaN or inf" in teleop.sub.last_rejection
        np.testing.assert_allclose(teleop.action(), [0.1, -0.2, 1.0, -1.0])  # the last good message
        assert teleop.action(now=time.monotonic() + 1.0) is None  # older than timeout_s: released
    finally:
        robot.close()
        op.close()


def test_joy_axes_buttons_and_deadman(dds_env):
    robot, op = make_transport("dds", node_name="robot"), make_transport("dds", node_name="operator")
    try:
        cfg = TeleopConfig(type="sensor_msgs/msg/Joy", fields=("axes.1", "axes.0", "axes.3", "buttons.0"),
                           scale=(0.5, 0.5, 0.5, 1.0), engage="buttons.4", timeout_s=1.0)
        teleop = Teleop(robot, cfg)
        pub = op.publisher("/teleop", "sensor_msgs/msg/Joy", COMMAND_QOS)
        joy = rt.msg_class("sensor_msgs/msg/Joy")
        time.sleep(0.5)

        def send(axes, buttons):
            pub.publish(joy(header=rt.header(), axes=np.array(axes, np.float32), buttons=np.array(buttons, np.int32)))

        send([0.2, 0.4, 0.0, -1.0], [1, 0, 0, 0, 1])
        _wait(teleop, 1)
        np.testing.assert_allclose(teleop.action(), [0.2, 0.1, -0.5, 1.0], atol=1e-6)
        send([0.2, 0.4, 0.0, -1.0], [1, 0, 0, 0, 0])  # deadman released
        _wait(teleop, 2)
        assert teleop.action() is None
        send([0.2], [1])  # too short for the mapping: dropped
        _wait(teleop, 3)
        assert teleop.sub.rejected == 1 and "mapped fields" in teleop.sub.last_rejection
    finally:
        robot.close()
        op.close()


@pytest.mark.parametrize("teleop, match", [
    ({"type": "sensor_msgs/msg/Image"}, r"^teleop\.type: unsupported 'sensor_msgs/msg/Image'; allowed: "
                                        r"geometry_msgs/msg/Twist, sensor_msgs/msg/Joy$"),
    ({"fields": ["linear.q"], "scale": [1.0]}, r"^teleop\.fields: 'linear\.q' is not a Twist field"),
    ({"type": "sensor_msgs/msg/Joy", "fields": ["sticks.0"], "scale": [1.0]}, r"^teleop\.fields: 'sticks\.0' is not a Joy"),
])
def test_teleop_config_errors_are_one_line(teleop, match):
    with pytest.raises(FinetuneConfigError, match=match) as e:
        config_from_dict({"robot": {"privileged_topic": "/privileged", "privileged_dim": 15}, "teleop": teleop})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("data, match", [
    ({"robot": {"command_type": "geometry_msgs/msg/Twist"}}, r"^robot\.command_type: unknown 'geometry_msgs/msg/Twist'; allowed"),
    ({"actor": {"on_learner_loss": "panic"}}, r"^actor\.on_learner_loss: unknown 'panic'; allowed: continue, hold$"),
    ({"learner": {"pushes": 1}}, r"^learner\.pushes: unknown key; allowed: "),
    ({"sac": {"gamma": 2}}, r"^sac\.gamma: must be in \[0, 1\], got 2$"),
    ({"rund_dir": "x"}, r"^rund_dir: unknown key"),
    ({"sim": {"reward": "shaped"}}, r"^sim\.reward: unknown 'shaped'; allowed: sparse, dense$"),
])
def test_finetune_config_errors_are_one_line(data, match):
    data = {**data, "robot": {"privileged_topic": "/privileged", "privileged_dim": 15, **data.get("robot", {})}}
    with pytest.raises((FinetuneConfigError, EnvError), match=match) as e:
        config_from_dict(data)
    assert "\n" not in str(e.value)


def test_finetune_robot_finds_a_config_by_its_name_in_configs(capsys):
    """`embodied finetune-robot finetune_reach_sim`, as the docs write it: the file in configs/ is
    read (here an unknown override is refused after reading it, before anything runs)."""
    from embodied.cli import main

    assert main(["finetune-robot", "finetune_reach_sim", "nope=1", "--role", "init"]) == 2
    assert capsys.readouterr().err.strip() == "embodied finetune-robot: error: nope: unknown key; allowed: " + ", ".join(sorted(
        ["actor", "demos", "init", "labels", "learner", "obs_key", "residual", "reward_classifier", "robot",
         "run_dir", "sac", "sim", "teleop"]))
