"""A real ROS 2 robot with one camera (rclpy from the ROS 2 pip wheels, default middleware) for the tests.

Run with a side venv's python (.venv-ros-jazzy); it imports only rclpy and the ROS 2 message
packages, never the toolkit. Publishes at --hz /joint_states (x, y, z, finger_left,
finger_right) and one camera, with the sensor-data QoS: with --jpeg, those JPEG bytes as a
sensor_msgs/CompressedImage (format "jpeg", as image_transport's compressed plugin) on
/camera/image_raw/compressed; without, a 64 x 64 rgb8 sensor_msgs/Image on /camera/image_raw.
Echoes each std_msgs/Int64 on /reset to /reset_done. Prints --ready once publishing; stops
after --seconds, or when stdin closes with --until-stdin-closes.
"""

from __future__ import annotations

import argparse
import select
import sys
import time

import rclpy
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Int64


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jpeg", help="a JPEG file to publish compressed (default: a raw 64 x 64 rgb8 frame)")
    p.add_argument("--hz", type=float, default=30.0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--until-stdin-closes", action="store_true")
    p.add_argument("--ready", default="camera up")
    p.add_argument("--node", default="ros2_camera")
    args = p.parse_args(argv)
    rclpy.init()
    node = rclpy.create_node(args.node)
    if args.jpeg:
        image = node.create_publisher(CompressedImage, "/camera/image_raw/compressed", qos_profile_sensor_data)
        data = open(args.jpeg, "rb").read()
        frame = lambda: CompressedImage(format="jpeg", data=data)  # noqa: E731
    else:
        image = node.create_publisher(Image, "/camera/image_raw", qos_profile_sensor_data)
        pixels = bytes(64 * 64 * 3)
        frame = lambda: Image(height=64, width=64, encoding="rgb8", step=64 * 3, data=pixels)  # noqa: E731
    joints = node.create_publisher(JointState, "/joint_states", 10)
    done = node.create_publisher(Int64, "/reset_done", 10)
    node.create_subscription(Int64, "/reset", lambda m: done.publish(Int64(data=m.data)), 10)

    def tick() -> None:
        stamp = node.get_clock().now().to_msg()
        msg = frame()
        msg.header.stamp, msg.header.frame_id = stamp, "camera"
        image.publish(msg)
        js = JointState(name=["x", "y", "z", "finger_left", "finger_right"], position=[0.0, 0.0, 0.1, 0.02, 0.02],
                        velocity=[0.0] * 5)
        js.header.stamp = stamp
        joints.publish(js)

    node.create_timer(1 / args.hz, tick)
    print(args.ready, flush=True)
    end = time.monotonic() + args.seconds
    while rclpy.ok() and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
        if args.until_stdin_closes and select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1):
            break  # the test closed our stdin
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
