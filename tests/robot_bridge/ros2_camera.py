"""A real ROS 2 camera robot (rclpy from the ROS 2 pip wheels, default middleware) for the tests.

Run with a side venv's python (.venv-ros-jazzy); it imports only rclpy and the ROS 2 message
packages, never the toolkit. Publishes, at 30 Hz: the JPEG bytes of --jpeg as a
sensor_msgs/CompressedImage (format "jpeg", as image_transport's compressed plugin) on
/camera/image_raw/compressed with the sensor-data QoS, and /joint_states (x, y, z,
finger_left, finger_right); echoes each std_msgs/Int64 on /reset to /reset_done. Prints
"camera up" once publishing, and stops after --seconds.
"""

from __future__ import annotations

import argparse
import time

import rclpy
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, JointState
from std_msgs.msg import Int64


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jpeg", required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    args = p.parse_args()
    rclpy.init()
    node = rclpy.create_node("ros2_camera")
    image = node.create_publisher(CompressedImage, "/camera/image_raw/compressed", qos_profile_sensor_data)
    joints = node.create_publisher(JointState, "/joint_states", 10)
    done = node.create_publisher(Int64, "/reset_done", 10)
    node.create_subscription(Int64, "/reset", lambda m: done.publish(Int64(data=m.data)), 10)
    data = open(args.jpeg, "rb").read()

    def tick() -> None:
        stamp = node.get_clock().now().to_msg()
        msg = CompressedImage(format="jpeg", data=data)
        msg.header.stamp, msg.header.frame_id = stamp, "camera"
        image.publish(msg)
        js = JointState(name=["x", "y", "z", "finger_left", "finger_right"], position=[0.0, 0.0, 0.1, 0.02, 0.02],
                        velocity=[0.0] * 5)
        js.header.stamp = stamp
        joints.publish(js)

    node.create_timer(1 / 30, tick)
    print("camera up", flush=True)
    end = time.monotonic() + args.seconds
    while rclpy.ok() and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
