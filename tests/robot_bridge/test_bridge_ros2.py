"""Real ROS 2 nodes (rclpy from the registry's wheels, Fast DDS, their default middleware), each
in its own process, talking to ours both ways, on loopback (Cyclone and Fast DDS both limited to
127.0.0.1, a domain of this module's own).

- A real node sees the twin (`embodied robot-sim`) in its graph (node list, publishers and
  subscribers by topic with our node's name, services by node), receives its joint states,
  images and camera info, drives it on /cmd and resets it through the /reset service: with the
  twin on the rclpy transport (Jazzy and Kilted), and on the DDS transport (Jazzy: all but the
  service, which cannot cross middlewares; the twin says so in one line).
- Our RobotEnv(reset="service") drives and resets a real rclpy robot node: on the rclpy transport
  (Jazzy and Kilted); on the DDS transport the reset fails at once with one line naming the cause
  and the fix, never a bare timeout.

The ROS 2 venvs come from `make ros2`; without them these tests skip.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robot_bridge.transport import TransportError, fastdds_loopback_env

ROOT = Path(__file__).resolve().parents[2]
PEER = str(Path(__file__).resolve().parent / "ros2_peer.py")


def ros_python(distro: str) -> str:
    py = ROOT / f".venv-ros-{distro}" / "bin" / "python"
    if not py.exists():
        pytest.skip(f".venv-ros-{distro} missing: build it with `make ros2` (ROS 2 {distro} wheels)")
    return str(py)


@pytest.fixture
def ros(dds_env, tmp_path):
    """start(argv, distro, log name, stdin) -> Popen: a process on this module's domain with
    Cyclone and Fast DDS on loopback; every process is ended afterwards."""
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], distro: str, name: str, stdin=None, ros_distro: str | None = None,
              type_propagation: bool = True) -> subprocess.Popen:
        env = {**os.environ, **fastdds_loopback_env(tmp_path, type_propagation), "PYTHONPATH": str(ROOT), "MUJOCO_GL": "egl",
               "ROS_DISTRO": ros_distro or distro, "PYTHONUNBUFFERED": "1"}
        env.pop("FASTRTPS_DEFAULT_PROFILES_FILE" if distro == "kilted" else "FASTDDS_DEFAULT_PROFILES_FILE")
        log = (tmp_path / f"{name}.log").open("w")
        p = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=stdin, text=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _json_tail(path: Path) -> dict:
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("{")]
    assert lines, path.read_text()[-2000:]
    return json.loads(lines[-1])


def _wait_for(path: Path, text: str, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("distro,twin_transport", [("jazzy", "rclpy"), ("kilted", "rclpy"), ("jazzy", "dds"),
                                                   ("kilted", "dds")])
def test_real_node_sees_drives_and_resets_the_twin(ros, tmp_path, distro, twin_transport):
    """Kilted with the DDS twin: only with type propagation off on the Kilted node (Fast DDS 3's
    type information is not resolved by Cyclone); then our endpoints show without node name."""
    py = ros_python(distro)
    kilted_dds = (distro, twin_transport) == ("kilted", "dds")
    twin_py = py if twin_transport == "rclpy" else sys.executable
    twin = ros([twin_py, "-m", "robot_bridge.sim_node", "Reach", "--transport", twin_transport, "--image-size", "32",
                "--rate", "20"], distro, "twin")
    assert _wait_for(tmp_path / "twin.log", "robot-sim: Reach on domain", 60), (tmp_path / "twin.log").read_text()
    service_works = twin_transport == "rclpy"
    obs = ros([py, PEER, "observer", "--timeout", "20", "--reset-timeout", "10" if service_works else "2",
               "--graph-timeout", "5" if kilted_dds else "20"], distro, "observer", type_propagation=not kilted_dds)
    obs.wait(90)
    out = _json_tail(tmp_path / "observer.log")
    assert out["rmw"] == "rmw_fastrtps_cpp"
    # the graph: what `ros2 node list`, `ros2 topic info -v` and `ros2 service list` show
    assert "sim_robot" in out["nodes"], out
    if kilted_dds:  # known gap (docs/ros2.md): the endpoints are seen, without their node's name
        assert out["joint_states_publishers"] == ["_CREATED_BY_BARE_DDS_APP_"], out
    else:
        assert out["graph_ok"], out
        assert out["joint_states_publishers"] == ["sim_robot"] and out["cmd_subscribers"] == ["sim_robot"], out
    assert ["/reset", ["std_srvs/srv/Trigger"]] in out["twin_services"], out
    # data, each kind several times, consistent
    assert min(out["received"].values()) >= 3, out
    assert out["image"] == [32, 32, "rgb8", 32 * 32 * 3] and out["camera_info"][:2] == [32, 32], out
    # driven on /cmd: +x then -x
    x = out["x"]
    assert x[1] > x[0] + 0.05 and x[2] < x[1] - 0.05, x
    if service_works:
        assert out["reset"][0] is True, out
    else:  # no answer across middlewares, and the twin says why in one line
        assert out["reset"] is None, out
        assert _wait_for(tmp_path / "twin.log", "service /reset: the client is a Fast DDS node; ROS 2 services do "
                         "not cross middlewares", 5), (tmp_path / "twin.log").read_text()[-3000:]
    assert twin.poll() is None  # the twin is still up


ROBOT_ENV = """
import json, sys, time, torch
from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
env = RobotEnv(RobotEnvConfig(success="classifier", max_episode_steps=10**9, transport=sys.argv[1], reset="service",
                              reset_timeout_s=10.0), success_fn=lambda obs: False)
out = {"transport": env.tr.name}
try:
    t = time.monotonic()
    obs, _ = env.reset()
    x = [float(obs["state"][0, 0])]
    for _ in range(20):
        res = env.step(torch.tensor([[1.0, 0.0, 0.0, -1.0]]))
    x.append(float(res.obs["state"][0, 0]))
    obs, _ = env.reset()
    x.append(float(obs["state"][0, 0]))
    out["x"] = x
except Exception as e:
    out["error"], out["seconds"] = f"{type(e).__name__}: {e}", time.monotonic() - t
finally:
    env.close()
print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("distro,transport", [("jazzy", "auto"), ("kilted", "rclpy"), ("jazzy", "dds")])
def test_robot_env_drives_and_resets_a_real_robot_node(ros, tmp_path, distro, transport):
    """`auto` takes rclpy where it imports (the ROS 2 venv's python)."""
    py = ros_python(distro)
    robot = ros([py, PEER, "robot"], distro, "robot", stdin=subprocess.PIPE)
    assert _wait_for(tmp_path / "robot.log", "ready", 30)
    env_py = sys.executable if transport == "dds" else py
    ros([env_py, "-c", ROBOT_ENV, transport], distro, "env").wait(120)
    out = _json_tail(tmp_path / "env.log")
    robot.stdin.close()
    robot.wait(30)
    seen = _json_tail(tmp_path / "robot.log")
    assert out["transport"] == ("dds" if transport == "dds" else "rclpy")
    if transport != "dds":
        assert "error" not in out, out
        x = out["x"]
        assert x[1] > x[0] + 0.05, x  # driven: 20 commands of +x
        assert abs(x[2]) < 1e-9, x  # reset: the robot went back to the origin
        assert seen["reset"] == 2 and seen["cmd"] >= 20, seen
    else:  # one line naming the cause and the fix, at once, not after the 10 s timeout
        assert out["error"].startswith("TransportError: service /reset: the server is a Fast DDS node; ROS 2 "
                                       "services do not cross middlewares"), out
        assert "--transport rclpy" in out["error"] and "\n" not in out["error"], out
        assert out["seconds"] < 5.0, out
        assert seen["reset"] == 0, seen


def test_foreign_service_message_names_cause_and_fix():
    from robot_bridge.dds import foreign_service_peer

    line = foreign_service_peer("/reset", b"\x01\x0f", "server")
    assert line.startswith("service /reset: the server is a Fast DDS node") and "rmw_fastrtps" in line
    assert "--transport rclpy" in line and "RMW_IMPLEMENTATION=rmw_cyclonedds_cpp" in line
    assert "vendor 01.99" in foreign_service_peer("/s", b"\x01\x99", "client")
    assert issubclass(TransportError, RuntimeError)


MIXED = """
import json, sys, torch
from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
env = RobotEnv(RobotEnvConfig(task="Reach", privileged_topic="/privileged", privileged_dim=15, control_hz=100.0,
                              max_episode_steps=50, transport=sys.argv[1], obs_timeout_s=5.0, reset_timeout_s=20.0))
try:
    first, _ = env.reset(seed=3)
    obs = first
    for _ in range(10):
        obs = env.step(torch.cat([torch.clamp(obs["privileged"][:, 12:15] / 0.02, -1, 1), -torch.ones(1, 1)], 1)).obs
    moved = float((obs["state"][0, :3] - first["state"][0, :3]).norm())
    env.reset(seed=4)  # another seed between: a late duplicate acknowledgement of seed 3 is not taken
    again, _ = env.reset(seed=3)  # for this reset's (docs/ros2.md, "Topic resets")
    print(json.dumps({"transport": env.tr.name, "moved": moved,
                      "same_reset": bool(torch.allclose(first["privileged"], again["privileged"]))}), flush=True)
finally:
    env.close()
"""


@pytest.mark.parametrize("twin_transport,env_transport", [("dds", "rclpy"), ("rclpy", "dds")])
def test_mixed_transports(ros, tmp_path, twin_transport, env_transport):
    """The twin on one transport, the controller (RobotEnv, seeded topic resets) on the other
    (Jazzy: topics cross the two middlewares): it steps towards the goal, and a seeded reset
    gives the same start twice."""
    py = ros_python("jazzy")
    pick = {"dds": sys.executable, "rclpy": py}
    ros([pick[twin_transport], "-m", "robot_bridge.sim_node", "Reach", "--transport", twin_transport,
         "--image-size", "0", "--rate", "50"], "jazzy", "twin")
    assert _wait_for(tmp_path / "twin.log", "robot-sim: Reach on domain", 60), (tmp_path / "twin.log").read_text()
    ros([pick[env_transport], "-c", MIXED, env_transport], "jazzy", "env").wait(120)
    out = _json_tail(tmp_path / "env.log")
    assert out["transport"] == env_transport
    assert out["moved"] > 0.01 and out["same_reset"], out


@pytest.mark.parametrize("distro", ["jazzy", "kilted"])
def test_transport_tests_pass_on_rclpy(ros, tmp_path, distro):
    """The transport tests written for both transports (test_bridge_transport.py's `pair`:
    latest message with receive time and QoS, services, a closed transport sends nothing), run
    on rclpy in the distribution's venv (in this venv their rclpy cases skip)."""
    py = ros_python(distro)
    p = ros([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/robot_bridge/test_bridge_transport.py", "-k", "rclpy"],
            distro, "pytest")
    p.wait(180)
    log = (tmp_path / "pytest.log").read_text()
    summary = log.strip().splitlines()[-1]  # pytest -q's last line: "4 passed, 2 deselected in 1.23s"
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary))
    assert p.returncode == 0 and counts.get("passed") == 4 and set(counts) <= {"passed", "deselected"}, log[-3000:]

