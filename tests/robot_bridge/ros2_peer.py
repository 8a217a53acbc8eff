"""A real ROS 2 node (rclpy from the ROS 2 pip wheels, default middleware) for the tests.

Run with a side venv's python (.venv-ros-jazzy, .venv-ros-kilted); it imports only rclpy and
the ROS 2 message packages, never the toolkit. Prints one JSON line with what it saw.

  observer   looks at the twin (`embodied robot-sim`): the graph (node list, publishers and
             subscribers by topic with node names, services by node), joint states, images,
             camera info; drives it on /cmd; resets it through the /reset service
  robot      plays a robot: publishes /joint_states (x, y, z, finger_left, finger_right) at
             50 Hz, integrates /cmd (x += 0.01 * cmd[0], ...), serves /reset
             (std_srvs/srv/Trigger: back to the origin, counts the calls) until its stdin
             closes (or --seconds pass), then prints the counts
  driver     a controller that holds still: publishes [0, 0, 0, -1] on /cmd at 20 Hz for
             --seconds (or until --until-teleop moving Twists came), counts the
             geometry_msgs/Twist an operator sends on /teleop
"""

from __future__ import annotations

import argparse
import json
import select
import sys
import time

import rclpy
from rclpy.qos import qos_profile_sensor_data
from geometry_msgs.msg import Twist
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

JOINTS = ["x", "y", "z", "finger_left", "finger_right"]


def spin_until(node, pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.02)
        if pred():
            return True
    return False


def observer(args) -> dict:
    node = rclpy.create_node("ros2_observer")
    out: dict = {"rmw": rclpy.utilities.get_rmw_implementation_identifier()}
    got = {"joint_states": [], "image": [], "camera_info": []}
    node.create_subscription(JointState, "/joint_states", lambda m: got["joint_states"].append(m), 10)
    node.create_subscription(Image, "/camera/image_raw", lambda m: got["image"].append(m), qos_profile_sensor_data)
    node.create_subscription(CameraInfo, "/camera/camera_info", lambda m: got["camera_info"].append(m),
                             qos_profile_sensor_data)
    cmd = node.create_publisher(Float64MultiArray, "/cmd", 10)

    def graph_ready() -> bool:
        names = [n for n, _ in node.get_node_names_and_namespaces()]
        pubs = node.get_publishers_info_by_topic("/joint_states")
        return args.twin in names and any(p.node_name == args.twin for p in pubs)

    out["graph_ok"] = spin_until(node, graph_ready, args.graph_timeout)
    out["nodes"] = sorted(n for n, _ in node.get_node_names_and_namespaces())
    out["joint_states_publishers"] = [p.node_name for p in node.get_publishers_info_by_topic("/joint_states")]
    out["cmd_subscribers"] = [s.node_name for s in node.get_subscriptions_info_by_topic("/cmd")]
    try:
        out["twin_services"] = [[n, list(t)] for n, t in node.get_service_names_and_types_by_node(args.twin, "/")]
    except Exception as e:  # the node is not in the graph
        out["twin_services"] = f"{type(e).__name__}: {e}"
    spin_until(node, lambda: all(len(v) >= 3 for v in got.values()), args.timeout)
    out["received"] = {k: len(v) for k, v in got.items()}
    if got["image"] and got["camera_info"]:
        im, ci = got["image"][-1], got["camera_info"][-1]
        out["image"] = [im.width, im.height, im.encoding, len(im.data)]
        out["camera_info"] = [ci.width, ci.height, list(ci.k)[:3]]
    if not got["joint_states"]:
        return out

    def x() -> float:
        return float(got["joint_states"][-1].position[0])

    out["x"] = [x()]
    for sign in (1.0, -1.0):
        for _ in range(15):
            cmd.publish(Float64MultiArray(data=[sign, 0.0, 0.0, -1.0]))
            spin_until(node, lambda: False, 0.05)
        spin_until(node, lambda: False, 0.3)
        out["x"].append(x())

    client = node.create_client(Trigger, "/reset")
    out["service_ready"] = client.wait_for_service(timeout_sec=args.timeout)
    if out["service_ready"]:
        future = client.call_async(Trigger.Request())
        rclpy.spin_until_future_complete(node, future, timeout_sec=args.reset_timeout)
        res = future.result()
        out["reset"] = None if res is None else [bool(res.success), res.message]
        if res is not None:
            spin_until(node, lambda: False, 0.3)
            out["x"].append(x())
    node.destroy_node()
    return out


def robot(args) -> dict:
    node = rclpy.create_node("fake_robot")
    pos = [0.0] * 5
    counts = {"cmd": 0, "reset": 0}
    pub = node.create_publisher(JointState, "/joint_states", 10)

    def on_cmd(m: Float64MultiArray) -> None:
        counts["cmd"] += 1
        for i in range(3):
            pos[i] += 0.01 * float(m.data[i])

    def on_reset(req, res):
        counts["reset"] += 1
        pos[:] = [0.0] * 5
        res.success, res.message = True, f"reset #{counts['reset']}"
        return res

    def tick() -> None:
        msg = JointState(name=JOINTS, position=list(pos), velocity=[0.0] * 5)
        msg.header.stamp = node.get_clock().now().to_msg()
        pub.publish(msg)

    node.create_subscription(Float64MultiArray, "/cmd", on_cmd, 10)
    node.create_service(Trigger, "/reset", on_reset)
    node.create_timer(0.02, tick)
    print("ready", flush=True)
    spin_until(node, lambda: bool(select.select([sys.stdin], [], [], 0)[0]), args.seconds)  # stdin closed
    node.destroy_node()
    return {"rmw": rclpy.utilities.get_rmw_implementation_identifier(), **counts, "x": pos[0]}


def driver(args) -> dict:
    node = rclpy.create_node("still_driver")
    cmd = node.create_publisher(Float64MultiArray, "/cmd", 10)
    teleop: list = []
    node.create_subscription(Twist, "/teleop", lambda m: teleop.append(m), 10)
    node.create_timer(0.05, lambda: cmd.publish(Float64MultiArray(data=[0.0, 0.0, 0.0, -1.0])))
    moving = lambda m: abs(m.linear.x) + abs(m.linear.y) + abs(m.linear.z) > 0  # noqa: E731
    spin_until(node, lambda: sum(map(moving, teleop)) >= args.until_teleop, args.seconds)
    node.destroy_node()
    return {"teleop": len(teleop), "nonzero": sum(abs(m.linear.x) + abs(m.linear.y) + abs(m.linear.z) > 0 for m in teleop)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["observer", "robot", "driver"])
    p.add_argument("--twin", default="sim_robot")
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--reset-timeout", type=float, default=10.0)
    p.add_argument("--graph-timeout", type=float, default=20.0)
    p.add_argument("--until-teleop", type=int, default=3)
    p.add_argument("--seconds", type=float, default=60.0)
    args = p.parse_args()
    rclpy.init()
    try:
        out = {"observer": observer, "robot": robot, "driver": driver}[args.mode](args)
    finally:
        rclpy.try_shutdown()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
