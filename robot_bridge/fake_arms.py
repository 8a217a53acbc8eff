"""Fake arm controllers: one real rclpy node that behaves like the controllers real arms run
(docs/robot_interfaces.md), for tests, the robot configs' dry runs and the bring-your-arm guide.

  python -m robot_bridge.fake_arms [--prefix P ...] [--seconds S]   (a python where rclpy imports)

Four arms, each under its namespace (after a prefix: --prefix /a --prefix /b serves two sets), each publishing at 50 Hz (stamped now) and serving a topic
reset (std_msgs/Int64 on <ns>/reset: back home, echoed on <ns>/reset_done):

  /fr3    a Cartesian impedance controller (CRISP-like): takes target_pose (PoseStamped), moves
          its TCP towards it at up to 0.5 m/s, publishes current_pose (PoseStamped, base frame)
          and joint_states (fr3_finger_joint1/2, half the gripper width each); its gripper takes
          gripper/commands (Float64MultiArray [width m], 0..0.08) and moves at 0.1 m/s
  /ur     MoveIt Servo: takes servo_node/delta_twist_cmds (TwistStamped) and integrates the
          newest twist; a twist older than 0.1 s counts as zero (Servo's command timeout);
          publishes current_pose; its gripper takes gripper/command (Float64, a knuckle position
          0..0.8 rad) and shows it as the joint finger_joint in joint_states
  /ur_jtc a (scaled) joint_trajectory_controller on 6 UR joints: takes scaled_joint_trajectory_controller/
          joint_trajectory and follows it by time_from_start (linear between points, from where
          it was when the trajectory came; a new trajectory replaces the old); its gripper as /ur's
  /so101  forward_position_controller on 6 SO-101 joints (the gripper is the 6th): takes
          forward_position_controller/commands (Float64MultiArray [6]) and moves towards them at
          up to 2 rad/s
  <ns>/pause (std_msgs/Float64 s): publish nothing for that long (a stale state, for tests).

When stdin closes (or --seconds pass) it prints one JSON line: per prefix and arm, every command it received
(pose targets [x, y, z], twists [vx, vy, vz], trajectories as [[t_from_start, *positions]...],
forward commands, gripper values), the frame ids, and where each arm ended. Imports only rclpy and
the ROS 2 message packages (numpy for the arithmetic), never the toolkit.
"""

from __future__ import annotations

import argparse
import json
import select
import sys
import time

import numpy as np

UR_JOINTS = ["shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint"]
SO101_JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
FR3_HOME, UR_HOME = (0.45, 0.0, 0.35), (0.40, -0.10, 0.30)
UR_JTC_HOME = [0.0, -1.57, 1.57, -1.57, -1.57, 0.0]
DT = 0.02  # the controllers' tick (50 Hz)


def _dur(d) -> float:
    return d.sec + d.nanosec * 1e-9


class FakeArms:
    def __init__(self, node, prefix: str = ""):
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64, Float64MultiArray, Int64
        from trajectory_msgs.msg import JointTrajectory

        self.node, self.msgs = node, (PoseStamped, JointState, Int64)
        P = prefix.rstrip("/")
        self.log: dict = {a: {"commands": [], "gripper": [], "frames": []} for a in ("fr3", "ur", "ur_jtc", "so101")}
        self.paused_until = {a: 0.0 for a in self.log}
        self.pubs: dict = {}
        for arm in self.log:
            self.pubs[arm] = {"js": node.create_publisher(JointState, f"{P}/{arm}/joint_states", 10),
                              "done": node.create_publisher(Int64, f"{P}/{arm}/reset_done", 10)}
            node.create_subscription(Int64, f"{P}/{arm}/reset", lambda m, a=arm: self.reset(a, m.data), 10)
            node.create_subscription(Float64, f"{P}/{arm}/pause",
                                     lambda m, a=arm: self.paused_until.__setitem__(a, time.monotonic() + m.data), 10)
        for arm in ("fr3", "ur"):
            self.pubs[arm]["pose"] = node.create_publisher(PoseStamped, f"{P}/{arm}/current_pose", 10)
        node.create_subscription(PoseStamped, f"{P}/fr3/target_pose", self.on_target, 10)
        node.create_subscription(TwistStamped, f"{P}/ur/servo_node/delta_twist_cmds", self.on_twist, 10)
        node.create_subscription(JointTrajectory, f"{P}/ur_jtc/scaled_joint_trajectory_controller/joint_trajectory", self.on_traj, 10)
        node.create_subscription(Float64MultiArray, f"{P}/so101/forward_position_controller/commands", self.on_forward, 10)
        node.create_subscription(Float64MultiArray, f"{P}/fr3/gripper/commands", lambda m: self.on_gripper("fr3", m.data[0]), 10)
        for arm in ("ur", "ur_jtc"):
            node.create_subscription(Float64, f"{P}/{arm}/gripper/command", lambda m, a=arm: self.on_gripper(a, m.data), 10)
        for arm in self.log:
            self.reset(arm, None)
        node.create_timer(DT, self.tick)

    # ------------------------------------------------------------------ commands
    def reset(self, arm: str, seed: int | None) -> None:
        if arm == "fr3":
            self.fr3 = {"p": np.array(FR3_HOME), "q": [0.0, 1.0, 0.0, 0.0], "target": np.array(FR3_HOME), "w": 0.08, "gw": 0.08}
        elif arm == "ur":
            self.ur = {"p": np.array(UR_HOME), "v": np.zeros(3), "t": 0.0, "g": 0.0, "gg": 0.0}
        elif arm == "ur_jtc":
            self.jtc = {"q": np.array(UR_JTC_HOME), "plan": None, "g": 0.0}
        else:
            self.so = {"q": np.zeros(6), "cmd": np.zeros(6)}
        if seed is not None:  # the state after the reset goes out before its acknowledgement
            self.publish(time.monotonic())
            self.pubs[arm]["done"].publish(self.msgs[2](data=seed))

    def on_target(self, m) -> None:
        p, q = m.pose.position, m.pose.orientation
        self.fr3["target"] = np.array([p.x, p.y, p.z])
        self.fr3["q"] = [q.w, q.x, q.y, q.z]
        self.log["fr3"]["commands"].append([p.x, p.y, p.z])
        self.log["fr3"]["frames"].append(m.header.frame_id)

    def on_twist(self, m) -> None:
        v = m.twist.linear
        self.ur["v"], self.ur["t"] = np.array([v.x, v.y, v.z]), time.monotonic()
        self.log["ur"]["commands"].append([v.x, v.y, v.z])
        self.log["ur"]["frames"].append(m.header.frame_id)

    def on_traj(self, m) -> None:
        idx = [list(m.joint_names).index(n) for n in UR_JOINTS]  # KeyError-free: names checked by the test
        now = time.monotonic()
        times = [now] + [now + _dur(p.time_from_start) for p in m.points]
        qs = [self.jtc["q"].copy()] + [np.asarray(p.positions)[idx] for p in m.points]
        self.jtc["plan"] = (np.array(times), np.stack(qs))
        self.log["ur_jtc"]["commands"].append([[_dur(p.time_from_start), *p.positions] for p in m.points])

    def on_forward(self, m) -> None:
        self.so["cmd"] = np.asarray(m.data, np.float64)
        self.log["so101"]["commands"].append(list(m.data))

    def on_gripper(self, arm: str, value: float) -> None:
        self.log[arm]["gripper"].append(float(value))
        if arm == "fr3":
            self.fr3["gw"] = float(np.clip(value, 0.0, 0.08))
        elif arm == "ur":
            self.ur["gg"] = float(value)
        else:
            self.jtc["g"] = float(value)

    # ------------------------------------------------------------------ the controllers
    def tick(self) -> None:
        now = time.monotonic()
        dt = min(now - self.last_tick, 0.1) if hasattr(self, "last_tick") else DT  # the time that passed
        self.last_tick = now
        f = self.fr3
        step = f["target"] - f["p"]
        n = np.linalg.norm(step)
        f["p"] = f["p"] + (step if n <= 0.5 * dt else step * 0.5 * dt / n)
        f["w"] += float(np.clip(f["gw"] - f["w"], -0.1 * dt, 0.1 * dt))
        u = self.ur
        if now - u["t"] > 0.1:
            u["v"] = np.zeros(3)
        u["p"] = u["p"] + u["v"] * dt
        u["g"] += float(np.clip(u["gg"] - u["g"], -2.0 * dt, 2.0 * dt))
        j = self.jtc
        if j["plan"] is not None:
            times, qs = j["plan"]
            j["q"] = np.array([np.interp(now, times, qs[:, i]) for i in range(qs.shape[1])])
        s = self.so
        if s["cmd"].shape == (6,):
            s["q"] = s["q"] + np.clip(s["cmd"] - s["q"], -2.0 * dt, 2.0 * dt)
        self.publish(now)

    def publish(self, now: float) -> None:
        PoseStamped, JointState, _ = self.msgs
        stamp = self.node.get_clock().now().to_msg()
        for arm in ("fr3", "ur"):
            if now < self.paused_until[arm]:
                continue
            p, q = (self.fr3["p"], self.fr3["q"]) if arm == "fr3" else (self.ur["p"], [0.0, 1.0, 0.0, 0.0])
            m = PoseStamped()
            m.header.stamp, m.header.frame_id = stamp, "base"
            m.pose.position.x, m.pose.position.y, m.pose.position.z = (float(v) for v in p)
            m.pose.orientation.w, m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z = (float(v) for v in q)
            self.pubs[arm]["pose"].publish(m)
        states = {"fr3": (["fr3_finger_joint1", "fr3_finger_joint2"], [self.fr3["w"] / 2] * 2),
                  "ur": (["finger_joint"], [self.ur["g"]]),
                  "ur_jtc": (UR_JOINTS + ["finger_joint"], [*self.jtc["q"], self.jtc["g"]]),
                  "so101": (SO101_JOINTS, list(self.so["q"]))}
        for arm, (names, pos) in states.items():
            if now < self.paused_until[arm]:
                continue
            m = JointState(name=names, position=[float(v) for v in pos], velocity=[0.0] * len(names))
            m.header.stamp = stamp
            self.pubs[arm]["js"].publish(m)

    def summary(self) -> dict:
        end = {"fr3": list(self.fr3["p"]), "ur": list(self.ur["p"]), "ur_jtc": list(self.jtc["q"]), "so101": list(self.so["q"])}
        return {arm: {**self.log[arm], "end": [float(v) for v in end[arm]]} for arm in self.log}


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException

    p = argparse.ArgumentParser(prog="python -m robot_bridge.fake_arms")
    p.add_argument("--prefix", action="append", default=None, help="serve the four arms under this prefix (repeatable)")
    p.add_argument("--seconds", type=float, default=600.0)
    args = p.parse_args(argv)
    rclpy.init()
    try:
        node = rclpy.create_node("fake_arms")
        sets = {pre: FakeArms(node, pre) for pre in (args.prefix or [""])}
        print("fake_arms ready", flush=True)
        end = time.monotonic() + args.seconds
        try:  # until stdin closes, --seconds pass, or Ctrl-C / SIGTERM
            while time.monotonic() < end and not select.select([sys.stdin], [], [], 0)[0]:
                rclpy.spin_once(node, timeout_sec=0.005)
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        out = {"rmw": rclpy.utilities.get_rmw_implementation_identifier(),
               **{pre: arms.summary() for pre, arms in sets.items()}}
        node.destroy_node()
    finally:
        rclpy.try_shutdown()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
