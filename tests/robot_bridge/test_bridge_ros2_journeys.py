"""Robot journeys on the rclpy transport (ROS 2 Jazzy's wheels, Fast DDS) against the twin on
rclpy, each process on its own, on loopback: `embodied robot-operator` and `embodied
finetune-robot`. (`serve`, the recorder and `sim2real --robot` on rclpy: test_bridge_e2e.py.)
The ROS 2 venvs come from `make ros2`; without them these tests skip."""

from __future__ import annotations

import os
import subprocess
import sys

from test_bridge_ros2 import PEER, ROOT, _json_tail, _wait_for, ros, ros_python  # noqa: F401 (ros: a fixture)


def test_robot_operator_on_rclpy_takes_over(ros, tmp_path):
    """`embodied robot-operator` on rclpy (Jazzy) with the twin on rclpy: a real rclpy controller
    holds still, so the operator sees no progress and takes over with Twist on /teleop."""
    py = ros_python("jazzy")
    ros([py, "-m", "embodied.cli", "robot-sim", "Reach", "--transport", "rclpy", "--image-size", "0", "--rate", "50"],
        "jazzy", "twin")
    assert _wait_for(tmp_path / "twin.log", "robot-sim: Reach on domain", 60), (tmp_path / "twin.log").read_text()
    op = ros([py, "-m", "embodied.cli", "robot-operator", "Reach", "--transport", "rclpy"], "jazzy", "operator")
    ros([py, PEER, "driver", "--seconds", "45", "--until-teleop", "3"], "jazzy", "driver").wait(60)
    op.terminate()
    op.wait(20)
    seen = _json_tail(tmp_path / "driver.log")
    assert seen["teleop"] >= 3 and seen["nonzero"] >= 3, seen
    assert _wait_for(tmp_path / "operator.log", "takeovers", 5)
    n = int((tmp_path / "operator.log").read_text().split("robot-operator: ")[-1].split()[0])
    assert n >= 1, (tmp_path / "operator.log").read_text()[-2000:]


def test_finetune_robot_on_rclpy(ros, tmp_path):
    """`embodied finetune-robot` (actor and learner in one process) on rclpy (Jazzy) against the
    twin on rclpy: BC init from 3 demos, 2 online episodes recorded."""
    import yaml

    from embodied.data.dataset import read_meta

    py = ros_python("jazzy")
    demos = tmp_path / "demos"
    subprocess.run([sys.executable, "-m", "embodied.cli", "collect", "Reach", "--episodes", "3", "--out", str(demos)],
                   check=True, cwd=ROOT, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    ros([py, "-m", "embodied.cli", "robot-sim", "Reach", "--transport", "rclpy", "--image-size", "0", "--rate", "50"],
        "jazzy", "twin")
    run = tmp_path / "run"
    cfg = {"run_dir": str(run), "demos": str(demos),
           "robot": {"task": "Reach", "privileged_topic": "/privileged", "privileged_dim": 15, "control_hz": 50,
                     "transport": "rclpy", "reset_timeout_s": 20},
           "init": {"bc_episodes": 3, "bc_steps": 50},
           "sac": {"hidden": [32, 32], "batch_size": 32, "bc_weight": 1.0},
           "actor": {"episodes": 2, "eval_every": 0, "learner_timeout_s": 1.0},
           "learner": {"warmup_transitions": 20, "critic_warmup_updates": 5, "push_every_s": 0.3,
                       "checkpoint_every_s": 0.5}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    p = ros([py, "-m", "embodied.cli", "finetune-robot", str(tmp_path / "cfg.yaml"), "--role", "all"], "jazzy", "finetune")
    p.wait(180)
    log = (tmp_path / "finetune.log").read_text()
    assert p.returncode == 0, log[-3000:]
    assert read_meta(run / "online")["total_episodes"] >= 2, log[-3000:]
