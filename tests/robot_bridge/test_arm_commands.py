"""The messages each command interface builds from safe commands (robot_bridge/arm_commands.py),
on a real DDS participant (what went out is kept with keep_sent): the arithmetic of pose targets,
twists, trajectory timing, forward commands and the gripper's units."""

from __future__ import annotations

import numpy as np
import pytest

from robot_bridge import ros_types as rt
from robot_bridge.arm_commands import ArmCommands, gripper_command, gripper_value, pose_values
from robot_bridge.robot_env_config import RobotEnvConfig
from robot_bridge.safety import SafetyConfig
from robot_bridge.transport_factory import make_transport

HZ = 20.0


@pytest.fixture
def tr(dds_env):
    t = make_transport("dds", None, "arm_commands")
    yield t
    t.close()


def _commands(tr, **kw) -> ArmCommands:
    out = ArmCommands(RobotEnvConfig(**{"control_hz": HZ, "gripper_topic": "/gripper/command", **kw}), tr)
    out.keep_sent = True
    return out


def test_pose_target_twist_and_gripper(tr):
    cmd = np.array([[0.5, -1.0, 0.25, 1.0]])  # [1, A]: EE delta in action units, gripper closed
    tcp = np.array([0.1, 0.0, 0.2])
    pose = _commands(tr, interface="pose_target", state_layout="ee_pose", ee_pose_topic="/current_pose",
                     frame_id="base", ee_origin=(0.45, 0.0, 0.1), gripper_open=0.08, gripper_closed=0.0)
    pose.orientation = np.array([0.0, 1.0, 0.0, 0.0])
    pose.send(cmd, tcp)
    grip, target = pose.sent
    assert grip.data == pytest.approx(0.0)  # closed: the width gripper_closed, sent first
    np.testing.assert_allclose(pose_values(target), [0.45 + 0.11, -0.02, 0.1 + 0.205, 0.0, 1.0, 0.0, 0.0], atol=1e-12)
    assert target.header.frame_id == "base"
    twist = _commands(tr, interface="twist", state_layout="ee_pose", ee_pose_topic="/current_pose", frame_id="base_link")
    twist.send(cmd, tcp)
    v = twist.sent[-1].twist
    np.testing.assert_allclose([v.linear.x, v.linear.y, v.linear.z], [0.5 * 0.02 * HZ, -0.02 * HZ, 0.25 * 0.02 * HZ])
    assert [v.angular.x, v.angular.y, v.angular.z] == [0.0, 0.0, 0.0]
    assert twist.hold() and twist.sent[-1].twist.linear.x == 0.0  # hold: a zero twist
    for g in (-1.0, -0.3, 0.0, 1.0):  # the gripper's units and back
        assert gripper_command(gripper_value(g, 0.08, 0.0), 0.08, 0.0) == pytest.approx(g)
    assert gripper_value(-1.0, 0.0, 0.8) == 0.0 and gripper_value(1.0, 0.0, 0.8) == pytest.approx(0.8)


def test_a_chunk_is_one_trajectory_and_forward_commands_are_positions(tr):
    names = ("j1", "j2", "j3")
    joint = SafetyConfig(action_dim=4, mode="joint", joint_low=(-1, -1, -1, -1), joint_high=(1, 1, 1, 1))
    jt = _commands(tr, interface="joint_trajectory", state_layout="arm", joint_names=names, safety=joint,
                   gripper_closed=0.8, gripper_open=0.0)
    chunk = np.array([[0.1, 0.2, 0.3, 1.0], [0.2, 0.3, 0.4, 1.0], [0.3, 0.4, 0.5, -1.0]])  # [K, J + 1]
    jt.send(chunk, np.zeros(3))
    grip, traj = jt.sent
    assert grip.data == pytest.approx(0.0)  # the chunk's last gripper command: open
    assert list(traj.joint_names) == list(names) and len(traj.points) == 3
    np.testing.assert_allclose([rt.stamp_seconds(p.time_from_start) for p in traj.points], [0.05, 0.10, 0.15])
    np.testing.assert_allclose([p.positions for p in traj.points], chunk[:, :3])
    # the twin's tabletop layout: EE deltas become targets of the TCP slides x, y, z, accumulated
    twin = _commands(tr, interface="joint_trajectory")
    twin.send(np.array([[1.0, 0.0, -1.0, 0.0], [1.0, 0.5, 0.0, 0.0]]), np.array([0.0, 0.1, 0.2]))
    traj = twin.sent[-1]
    assert list(traj.joint_names) == ["x", "y", "z"]
    np.testing.assert_allclose([p.positions for p in traj.points], [[0.02, 0.1, 0.18], [0.04, 0.11, 0.18]])
    fwd = _commands(tr, interface="forward_commands", state_layout="joints", joint_names=names,
                    safety=SafetyConfig(action_dim=3, mode="joint", joint_low=(-1,) * 3, joint_high=(1,) * 3),
                    action_dim=3, gripper_topic=None)
    fwd.send(np.array([[0.1, -0.2, 0.3]]), np.zeros(3))
    assert fwd.sent[-1].data.tolist() == [0.1, -0.2, 0.3] and fwd.grip_pub is None
