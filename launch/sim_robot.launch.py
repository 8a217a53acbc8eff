"""ROS 2 launch file: a MuJoCo task as a ROS 2 robot (`embodied robot-sim`).

    ros2 launch launch/sim_robot.launch.py task:=Reach rate:=20 image_size:=64

Needs the `embodied` command on PATH (pip install the toolkit into the Python that ROS 2
uses, or a venv activated before `ros2 launch`). The node joins $ROS_DOMAIN_ID unless
domain_id is given; the transport is rclpy when importable, else cyclonedds.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess
from launch.substitutions import EnvironmentVariable, LaunchConfiguration


def generate_launch_description() -> LaunchDescription:
    args = [
        DeclareLaunchArgument("task", default_value="Reach", description="task name (embodied list)"),
        DeclareLaunchArgument("rate", default_value="20.0", description="heartbeat / free-run rate (Hz)"),
        DeclareLaunchArgument("image_size", default_value="64", description="camera image side; 0: no camera"),
        DeclareLaunchArgument("namespace", default_value="", description="topic namespace, e.g. /twin"),
        DeclareLaunchArgument("domain_id", default_value=EnvironmentVariable("ROS_DOMAIN_ID", default_value="0")),
        DeclareLaunchArgument("transport", default_value="auto", description="auto, dds or rclpy"),
    ]
    node = ExecuteProcess(
        cmd=["embodied", "robot-sim", LaunchConfiguration("task"),
             "--rate", LaunchConfiguration("rate"),
             "--image-size", LaunchConfiguration("image_size"),
             "--namespace", LaunchConfiguration("namespace"),
             "--domain-id", LaunchConfiguration("domain_id"),
             "--transport", LaunchConfiguration("transport")],
        name="sim_robot",
        output="screen",
        additional_env={"MUJOCO_GL": "egl"},
    )
    return LaunchDescription([*args, node])
