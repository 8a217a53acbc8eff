"""The command interfaces against real rclpy controller nodes (robot_bridge/fake_arms.py: a
CRISP-like pose controller, MoveIt Servo, a joint_trajectory_controller, a forward position
controller), one node process per ROS 2 distribution serving all four arms; our RobotEnv, driven
by the configs in configs/robots/, on the rclpy transport (Jazzy, Kilted) and on the DDS transport
(Jazzy; topics cross middlewares). Per arm: it moves as commanded, the safety fuzz leaves 0
commands outside the limits (checked on what the controller received; the EE arms get
tests/robot_bridge/test_bridge_safety.py's fuzz, the joint arms the same kinds in A dims), a stale state holds the
arm and an e-stop holds it. The ROS 2 venvs come from `make ros2`; without them these skip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from robot_bridge.fake_arms import FR3_HOME, SO101_JOINTS, UR_JTC_HOME
from test_bridge_ros2 import _json_tail, _wait_for, ros, ros_python  # noqa: F401 (ros: the fixture)

ROOT = Path(__file__).resolve().parents[2]
ARMS = {"fr3": "fr3_crisp", "ur": "ur_servo", "ur_jtc": "ur_jtc", "so101": "so101_forward"}
HZ = 50.0

DRIVE = """
import json, sys, threading, time, numpy as np, torch, yaml
from robot_bridge import ros_types as rt
from robot_bridge.robot_env import RobotEnv
from robot_bridge.robot_env_config import robot_config_from_mapping
from robot_bridge.transport import COMMAND_QOS
from robot_bridge.transport_factory import make_transport
from sims.vecenv import EnvError
sys.path.insert(0, "tests/robot_bridge")
from test_bridge_safety import fuzz_actions  # the safety fuzz of the simulator's tests (4-d EE actions)

ARMS, HZ = json.loads(sys.argv[2]), float(sys.argv[3])
tr = make_transport(sys.argv[1], None, "arm_driver")

def summary(m):
    name = type(m).__name__
    if "PoseStamped" in name:
        p = m.pose.position
        return ["pose", p.x, p.y, p.z]
    if "TwistStamped" in name:
        v = m.twist.linear
        return ["twist", v.x, v.y, v.z]
    if "JointTrajectory" in name:
        return ["traj", len(m.points), list(m.points[-1].positions)]
    return [name, np.asarray(m.data).tolist()]

def fuzz(rng, A, center):  # the same kinds for joint actions of any A
    kind = rng.integers(0, 6)
    if kind == 0:
        return rng.uniform(-1, 1, A) + center
    if kind == 1:
        return rng.normal(0, 1e6, A)
    if kind == 2:
        a = rng.uniform(-1, 1, A) + center
        a[rng.integers(0, A)] = rng.choice([np.nan, np.inf, -np.inf])
        return a
    if kind == 3:
        return rng.uniform(-5, 5, A + 1)
    return np.sign(rng.uniform(-1, 1, A)) * rng.uniform(0.5, 50, A) + center

out = {"transport": tr.name, "start": time.monotonic()}
arms = {}
for arm, file in ARMS.items():  # made first: the pause and e-stop publishers are matched before they are used
    cfg = robot_config_from_mapping(yaml.safe_load(open(f"configs/robots/{file}.yaml")), namespace=f"/{tr.name}/{arm}",
                                    reset="topic", success="classifier", control_hz=HZ, max_episode_steps=10**6,
                                    obs_timeout_s=3.0)
    arms[arm] = (cfg, RobotEnv(cfg, transport=tr, success_fn=lambda obs: False),
                 tr.publisher(cfg.topic("/pause"), "std_msgs/msg/Float64", COMMAND_QOS),
                 tr.publisher(cfg.topic("/estop"), "std_msgs/msg/Bool", COMMAND_QOS))

def drive(arm):
    cfg, env, pause, estop = arms[arm]
    env.out.keep_sent = True
    ee, A, J = cfg.safety.mode == "ee_delta", cfg.action_dim, len(cfg.joint_names)
    chunked = cfg.interface == "joint_trajectory"
    r = out[arm] = {}
    t0 = time.monotonic()
    try:
        obs, _ = env.reset(seed=1)
        s0 = obs["state"][0].double().numpy()
        if ee:
            move = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
        else:
            goal = s0[:A].copy() if A == J else np.append(s0[:J], 1.0)
            goal[0] += 0.3
        for i in range(15):
            if ee:
                res = env.step(move)
            elif chunked:
                res = env.chunk_step(torch.tensor(np.repeat(goal[None], 5, 0)[None]))
                # observed once, after the 5 / HZ the trajectory takes
                r["chunk_wait"] = min(r.get("chunk_wait", 1.0), env.last_obs_time - env.last_command_time)
            else:
                res = env.step(torch.tensor(goal[None]))
        r["s0"], r["s1"] = s0.tolist(), res.obs["state"][0].tolist()
        rng = np.random.default_rng(0)
        center = np.zeros(A) if ee else (np.append(s0[:J], 0.0) if A > J else s0[:A])
        if ee:
            for a in fuzz_actions(40, seed=0):
                env.step(a)
        for i in range(8 if chunked else 0 if ee else 30):
            if chunked:
                env.chunk_step(torch.tensor(np.stack([fuzz(rng, A, center)[:A] for _ in range(4)])[None]))
            else:
                env.step(torch.tensor(fuzz(rng, A, center)[None]))
        r["counts"] = dict(env.safety.counts)
        n = len(env.out.sent)
        pause.publish(rt.scalar("std_msgs/msg/Float64", 1.0))
        end = time.monotonic() + 2.0  # until the newest state is older than the watchdog
        while time.monotonic() - env._js.latest().recv_time < cfg.safety.watchdog_s and time.monotonic() < end:
            time.sleep(0.01)
        env.cfg.obs_timeout_s = 0.4  # how long it holds before it gives up (3 s elsewhere: a loaded machine)
        try:
            env.step(torch.tensor(center[None] + 0.5))
        except EnvError as e:
            r["stale"] = str(e)
        env.cfg.obs_timeout_s = 3.0
        r["stale_sent"] = [summary(m) for m in env.out.sent[n:]]
        env._js.wait_after(time.monotonic(), 3.0)  # the states are back
        obs, _ = env.reset(seed=2)
        estop.publish(rt.scalar("std_msgs/msg/Bool", True))
        time.sleep(0.2)
        n = len(env.out.sent)
        try:
            env.step(torch.tensor(center[None] + 0.5))
        except EnvError as e:
            r["estop"] = str(e)
        r["estop_sent"] = [summary(m) for m in env.out.sent[n:]]
    except Exception as e:
        r["error"] = f"{type(e).__name__}: {e}"
    finally:
        env.close()
        r["seconds"] = time.monotonic() - t0

threads = [threading.Thread(target=drive, args=(arm,)) for arm in ARMS]  # the four arms at once
for t in threads:
    t.start()
for t in threads:
    t.join()
tr.close()
print(json.dumps(out), flush=True)
"""


def _config(arm: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / "robots" / f"{ARMS[arm]}.yaml").read_text())


def _check_arm(arm: str, drove: dict, seen: dict) -> None:
    """What the driver saw and what the controller node received, against the config's limits."""
    c, r, got = _config(arm), drove[arm], seen[arm]
    s = c["safety"]
    assert "error" not in r, r
    s0, s1 = np.array(r["s0"]), np.array(r["s1"])
    cmds = got["commands"]
    assert len(cmds) > 20, got
    tol = 1e-6
    if arm in ("fr3", "ur"):
        assert s1[0] > s0[0] + 0.05, (s0, s1)  # moved +x as commanded (pose targets / integrated twists)
        g = np.array(got["gripper"])  # the gripper took its topic, in its units, never past them
        assert s1[8] == 1.0 and np.isclose(g, c["gripper_closed"]).any(), g[-5:]
        assert (g >= min(c["gripper_open"], c["gripper_closed"]) - tol).all() and (g <= max(c["gripper_open"], c["gripper_closed"]) + tol).all()
        assert set(got["frames"]) == {c["frame_id"]}
        if arm == "fr3":  # every pose target inside the box, in the base frame
            lo = np.add(c["ee_origin"], s["workspace_low"]) - tol
            hi = np.add(c["ee_origin"], s["workspace_high"]) + tol
            assert all(((lo <= p) & (p <= hi)).all() for p in np.array(cmds)), "a pose target left the box"
        else:  # every twist within the speed limit
            vmax = s["max_delta"] * s["ee_step"] * HZ
            assert np.abs(np.array(cmds)).max() <= vmax + tol
        for what in ("range", "delta", "shape", "nonfinite", "workspace"):
            assert r["counts"].get(what, 0) > 0, (what, r["counts"])
    else:
        lo, hi = np.array(s["joint_low"]), np.array(s["joint_high"])
        step = min(s["max_delta"], s["joint_vel_max"] / HZ)
        J = len(c["joint_names"])
        if arm == "ur_jtc":  # one trajectory per chunk, points 1 / HZ apart, each inside the limits
            assert r["chunk_wait"] >= 5 / HZ, r  # the state after a chunk is one from after its last point
            for traj in cmds:
                pts = np.array(traj)
                np.testing.assert_allclose(pts[:, 0], (np.arange(len(pts)) + 1) / HZ, atol=1e-9)
                assert ((lo[:J] - tol <= pts[:, 1:]) & (pts[:, 1:] <= hi[:J] + tol)).all()
                assert (np.abs(np.diff(pts[:, 1:], axis=0)) <= step + tol).all()
            assert max(len(t) for t in cmds) == 5
        else:
            pts = np.array(cmds)
            assert ((lo - tol <= pts) & (pts <= hi + tol)).all()
        assert s1[0] > s0[0] + 0.05, (s0, s1)  # towards the goal 0.3 rad away (0.02-0.03 rad a step, from where it is)
        assert r["counts"].get("joint_limit", 0) > 0 and r["counts"].get("velocity", 0) > 0, r["counts"]
    # a stale state: nothing moves the arm (Servo: zero twists), and the episode stops in one line
    assert "observations stale" in r["stale"], r
    assert all(m[0] == "twist" and m[1:] == [0.0, 0.0, 0.0] for m in r["stale_sent"]), r["stale_sent"]
    assert (len(r["stale_sent"]) > 0) == (arm == "ur"), r["stale_sent"]
    # an e-stop (0.2 s after a reset, the arm still at home): the arm is held where it is
    assert "e-stop engaged" in r["estop"], r
    held = r["estop_sent"][-1]
    if arm == "ur":
        assert held == ["twist", 0.0, 0.0, 0.0]
    elif arm == "fr3":
        assert held[0] == "pose" and np.allclose(held[1:], FR3_HOME, atol=1e-6), held
    elif arm == "ur_jtc":
        assert held[:2] == ["traj", 1] and np.allclose(held[2], UR_JTC_HOME, atol=1e-6), held
    else:
        assert np.allclose(held[1], np.zeros(len(SO101_JOINTS)), atol=1e-6), held


@pytest.mark.parametrize("distro", ["jazzy", "kilted"])
def test_arm_interfaces_against_real_controller_nodes(ros, tmp_path, distro):
    py = ros_python(distro)
    """Jazzy: two drivers at once, on the rclpy and the DDS transport, each on its own set of
    arms (prefix /rclpy, /dds); Kilted: rclpy (its Fast DDS 3 needs type propagation off for DDS)."""
    py = ros_python(distro)
    drivers = {"rclpy": py, **({"dds": sys.executable} if distro == "jazzy" else {})}
    node = ros([py, "-m", "robot_bridge.fake_arms", *(a for t in drivers for a in ("--prefix", f"/{t}"))],
               distro, "arms", stdin=subprocess.PIPE)
    procs = {t: ros([exe, "-c", DRIVE, t, json.dumps(ARMS), str(HZ)], distro, f"drive_{t}") for t, exe in drivers.items()}
    drove = {}
    for t, p in procs.items():
        p.wait(120)
        drove[t] = _json_tail(tmp_path / f"drive_{t}.log")
        assert drove[t]["transport"] == t
    node.stdin.close()
    node.wait(30)
    seen = _json_tail(tmp_path / "arms.log")
    assert seen["rmw"] == "rmw_fastrtps_cpp"
    for t in drivers:
        for arm in ARMS:
            _check_arm(arm, drove[t], seen[f"/{t}"])
