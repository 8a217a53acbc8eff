"""Command-line arguments of `embodied robot-sim` and `embodied serve` (argparse only, so that
building the CLI parser imports nothing heavy)."""

from __future__ import annotations

import argparse

TRANSPORT_CHOICES = ["auto", "dds", "rclpy"]


def robot_sim_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", help="task name (embodied list)")
    p.add_argument("--rate", type=float, default=20.0, help="heartbeat / free-run rate in Hz")
    p.add_argument("--domain-id", type=int, default=None, help="ROS 2 domain (default $ROS_DOMAIN_ID or 0)")
    p.add_argument("--namespace", default="")
    p.add_argument("--image-size", type=int, default=64, help="camera image side; 0: no camera")
    p.add_argument("--camera", default="front", choices=["front", "wrist"],
                   help="kept for old command lines: every camera of the task is published, front on "
                        "/camera/image_raw, the others on /camera/<name>/image_raw")
    p.add_argument("--interface", default="cmd", choices=["cmd", "pose", "twist", "trajectory"],
                   help="how it is commanded: /cmd (EE deltas), a pose target, a twist, a joint trajectory "
                        "(docs/robot_interfaces.md)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--free-run", action="store_true", help="step at --rate instead of once per command")
    p.add_argument("--transport", default="auto", choices=TRANSPORT_CHOICES)
    p.add_argument("--duration", type=float, default=None, help="exit after this many seconds")
    p.add_argument("--reality", default=None, metavar="PRESET",
                   help="reality preset, a name in configs/reality/ or a YAML path: the twin differs "
                        "from nominal simulation in its stated ways (docs/sim2real.md)")


def serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint, checkpoints/ or run directory of `embodied train`, or "
                   "`embodied sft`'s final or run directory")
    p.add_argument("--episodes", type=int, default=10, help="episodes to run (0: until interrupted)")
    p.add_argument("--rate", type=float, default=20.0, help="control rate in Hz")
    p.add_argument("--domain-id", type=int, default=None, help="ROS 2 domain (default $ROS_DOMAIN_ID or 0)")
    p.add_argument("--namespace", default="")
    p.add_argument("--transport", default="auto", choices=TRANSPORT_CHOICES)
    p.add_argument("--record", default=None, help="write the episodes into this dataset directory")
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of the mean")
    p.add_argument("--device", default="auto", help="where the policy runs: auto (CUDA when present), cpu, cuda, cuda:N")
