"""ROS 2 launch file: serve a checkpoint as a policy node (`embodied serve`).

    ros2 launch launch/policy.launch.py checkpoint:=runs/ppo_reach episodes:=20 rate:=20

With with_sim:=true it also starts the sim robot node (launch/sim_robot.launch.py) for the
checkpoint's task, so the pair runs as a digital-twin evaluation on one machine.
"""

import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, IncludeLaunchDescription
from launch.conditions import IfCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import EnvironmentVariable, LaunchConfiguration


def generate_launch_description() -> LaunchDescription:
    here = os.path.dirname(os.path.abspath(__file__))
    args = [
        DeclareLaunchArgument("checkpoint", description="checkpoint, checkpoints/ or run directory of embodied "
                                                        "train, or embodied sft's final"),
        DeclareLaunchArgument("episodes", default_value="10", description="episodes (0: until stopped)"),
        DeclareLaunchArgument("rate", default_value="20.0", description="control rate (Hz)"),
        DeclareLaunchArgument("namespace", default_value=""),
        DeclareLaunchArgument("domain_id", default_value=EnvironmentVariable("ROS_DOMAIN_ID", default_value="0")),
        DeclareLaunchArgument("transport", default_value="auto", description="auto, dds or rclpy"),
        DeclareLaunchArgument("with_sim", default_value="false", description="also start the sim robot node"),
        DeclareLaunchArgument("task", default_value="Reach", description="task of the sim robot node"),
    ]
    policy = ExecuteProcess(
        cmd=["embodied", "serve", LaunchConfiguration("checkpoint"),
             "--episodes", LaunchConfiguration("episodes"),
             "--rate", LaunchConfiguration("rate"),
             "--namespace", LaunchConfiguration("namespace"),
             "--domain-id", LaunchConfiguration("domain_id"),
             "--transport", LaunchConfiguration("transport")],
        name="policy_node",
        output="screen",
    )
    sim = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(here, "sim_robot.launch.py")),
        launch_arguments={"task": LaunchConfiguration("task"), "rate": LaunchConfiguration("rate"),
                          "image_size": "0", "namespace": LaunchConfiguration("namespace"),
                          "domain_id": LaunchConfiguration("domain_id"),
                          "transport": LaunchConfiguration("transport")}.items(),
        condition=IfCondition(LaunchConfiguration("with_sim")),
    )
    return LaunchDescription([*args, sim, policy])
