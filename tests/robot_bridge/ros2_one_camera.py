"""A real ROS 2 robot with one camera (rclpy from the ROS 2 pip wheels, default middleware).

Run with a side venv's python (.venv-ros-jazzy); it imports only rclpy and the ROS 2 message
packages, never the toolkit. Publishes at 20 Hz /joint_states (x, y, z, finger_left,
finger_right) and a 64 x 64 rgb8 sensor_msgs/Image on /camera/image_raw (sensor-data QoS), and no
other camera. Prints "robot up" once publishing; stops after --seconds or when stdin closes.
"""

from __future__ import annotations

import argparse
import select
import sys
import time

import rclpy
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=120.0)
    args = p.parse_args()
    rclpy.init()
    node = rclpy.create_node("one_camera_robot")
    image = node.create_publisher(Image, "/camera/image_raw", qos_profile_sensor_data)
    joints = node.create_publisher(JointState, "/joint_states", 10)
    pixels = bytes(64 * 64 * 3)

    def tick() -> None:
        stamp = node.get_clock().now().to_msg()
        img = Image(height=64, width=64, encoding="rgb8", step=64 * 3, data=pixels)
        img.header.stamp, img.header.frame_id = stamp, "front"
        image.publish(img)
        js = JointState(name=["x", "y", "z", "finger_left", "finger_right"], position=[0.0, 0.0, 0.1, 0.02, 0.02],
                        velocity=[0.0] * 5)
        js.header.stamp = stamp
        joints.publish(js)

    node.create_timer(1 / 20, tick)
    print("robot up", flush=True)
    end = time.monotonic() + args.seconds
    while rclpy.ok() and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1):
            break  # the test closed our stdin
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
