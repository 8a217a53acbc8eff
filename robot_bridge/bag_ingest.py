"""rosbag2 recordings (sqlite3 or MCAP) -> an episode dataset (LeRobot v3, embodied.data.dataset).

`ingest_rosbag(bag, out, task, BagTopics(...))` reads a `ros2 bag record` directory with rosbags'
Reader (the storage, sqlite3 or MCAP, is read from its metadata.yaml) and writes one step per
message on the command topic:

  time         a message's header stamp where it has a header (stamps="header"), else the time the
               recorder logged it (stamps="log", or messages without a header: Float64MultiArray)
  observation  per obs topic, the newest message whose time is at or before the command's time
               (as-of: never a sample from after the command); a step before every obs topic has
               a message in the episode is dropped
  action       by the command's type, in the policy's action units (robot_bridge/arm_commands.py
               maps the other way):
                 Float64MultiArray   its values
                 JointTrajectory     the first point's positions
                 TwistStamped        linear * (1 / control_hz) / ee_step  (x, y, z)
                 PoseStamped         (target - the current pose on pose_topic, as-of) / ee_step
                                     (x, y, z), clipped to [-1, 1]
               then, with gripper_topic, the gripper command as-of the command:
               2 (value - gripper_open) / (gripper_closed - gripper_open) - 1, in [-1 open, +1 closed]
  reward, success  1 / True on the last step at or before a True on success_topic
Episodes are split at messages on reset_topic (or the bag is one episode); an observation must come
after its episode's reset. Observation keys are the dataset's: "state" (JointState: positions
then velocities of joint_names, or the tabletop layout when joint_names is None; a PoseStamped:
x, y, z, qw, qx, qy, qz), "privileged" (Float64MultiArray values), "rgb_<cam>" (Image or
CompressedImage, through `camera`, a CameraTransform, which the dataset's meta/info.json records
as `embodied.spec.camera_transform`, for `embodied serve` and `sim2real --robot` to apply the
same).

`BagTopics.for_robot(robot)` takes all of it from the RobotEnvConfig the arm is served with
(configs/robots/*.yaml): its command, pose, gripper and camera topics, ee_step, control rate and
camera transform, and "state" in its state_layout exactly as RobotEnv builds it
(robot_bridge/robot_state.py: in the ee_pose layout the TCP from the as-of pose, its velocity from
the pose before it, the gap from gripper_joints in the as-of joint state), so that a policy
trained on the dataset reads on the arm what it read in the recording.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from robot_bridge import ros_types as rt
from robot_bridge.camera import CameraTransform, decode
from robot_bridge.recorder import episode_writer
from robot_bridge.robot_state import StateReader
from robot_bridge.transport import Received
from sims.vecenv import EnvError

STAMPS = ("header", "log")
TABLETOP = ("x", "y", "z", "finger_left", "finger_right")


@dataclass
class BagTopics:
    """Which topics of a bag make which fields (see the module docstring)."""

    command_topic: str = "/cmd"
    obs_topics: dict[str, str] = field(default_factory=lambda: {"state": "/joint_states"})
    joint_names: tuple[str, ...] | None = None
    pose_topic: str | None = None  # the arm's current PoseStamped (PoseStamped commands are deltas from it)
    gripper_topic: str | None = None  # std_msgs/Float64 (or a Float64MultiArray's first value)
    gripper_open: float = 0.09
    gripper_closed: float = 0.0
    ee_step: float = 0.02  # metres per EE action unit (SafetyConfig.ee_step)
    success_topic: str | None = "/success"
    reset_topic: str | None = "/reset"
    instruction: str = ""
    control_hz: float = 20.0  # the dataset's fps
    camera: CameraTransform | None = None  # frames to the policy's size; None: as recorded
    stamps: str = "header"
    robot: Any = None  # a RobotEnvConfig: "state" in its state_layout, as RobotEnv builds it (for_robot)

    def __post_init__(self) -> None:
        if self.stamps not in STAMPS:
            raise EnvError(f"bag stamps: unknown {self.stamps!r}; allowed: {', '.join(STAMPS)}")
        if self.control_hz <= 0 or self.ee_step <= 0 or self.gripper_open == self.gripper_closed:
            raise EnvError("bag control_hz, ee_step: must be > 0, and gripper_open != gripper_closed")
        for key in self.obs_topics:
            if key not in ("state", "privileged") and not (key.startswith("rgb_") and len(key) > 4):
                raise EnvError(f"bag obs_topics: {key!r} is not a dataset feature; allowed: state, privileged, "
                               f"rgb_<camera>")


    @classmethod
    def for_robot(cls, robot: Any, **overrides: Any) -> "BagTopics":
        """The topics and scales of the RobotEnvConfig `robot` (then `overrides`, e.g. instruction)."""
        t = robot.topic
        state = robot.ee_pose_topic if robot.state_layout == "ee_pose" else robot.joint_states_topic
        obs = {"state": t(state), **{f"rgb_{c}": t(top) for c, top in robot.image_topics.items()}}
        if robot.privileged_topic:
            obs["privileged"] = t(robot.privileged_topic)
        kw = dict(command_topic=t(robot.command_topic), obs_topics=obs, joint_names=tuple(robot.joint_names),
                  pose_topic=t(robot.ee_pose_topic) if robot.ee_pose_topic else None,
                  gripper_topic=t(robot.gripper_topic) if robot.gripper_topic else None,
                  gripper_open=robot.gripper_open, gripper_closed=robot.gripper_closed,
                  ee_step=robot.safety.ee_step if robot.safety is not None else 0.02, control_hz=robot.control_hz,
                  success_topic=t(robot.success_topic) if robot.success == "topic" else None,
                  reset_topic=t(robot.reset_topic) if robot.reset == "topic" else None,
                  camera=robot.camera_transform if robot.image_topics else None, robot=robot)
        return cls(**{**kw, **overrides})


def message_time(msg: Any, log_ns: int, stamps: str) -> float:
    """Seconds: the header stamp (stamps "header" and a non-zero stamp), else the log time."""
    header = getattr(msg, "header", None)
    if stamps == "header" and header is not None:
        t = rt.stamp_seconds(header.stamp)
        if t > 0:
            return t
    return log_ns * 1e-9


def _pose(msg: Any) -> np.ndarray:
    p, q = msg.pose.position, msg.pose.orientation
    return np.array([p.x, p.y, p.z, q.w, q.x, q.y, q.z], np.float64)


def _scalar(msg: Any) -> float:
    data = msg.data
    return float(data if np.isscalar(data) else np.asarray(data).reshape(-1)[0])


def decode_obs(key: str, msg: Any, joint_names: tuple[str, ...] | None, grip: float,
               camera: CameraTransform | None = None) -> torch.Tensor:
    """One observation value of `key` from its message (see the module docstring)."""
    if key.startswith("rgb_"):
        return torch.from_numpy(decode(msg) if camera is None else camera(msg))
    if hasattr(msg, "position") and hasattr(msg, "name"):  # JointState
        idx = {n: i for i, n in enumerate(msg.name)}
        names = joint_names or TABLETOP
        missing = [n for n in names if n not in idx]
        if missing:
            raise EnvError(f"bag {key}: joints {missing} not in the JointState's {list(msg.name)} (BagTopics.joint_names)")
        pos = np.asarray(msg.position, np.float64)[[idx[n] for n in names]]
        vel = (np.asarray(msg.velocity, np.float64)[[idx[n] for n in names]] if len(msg.velocity)
               else np.zeros(len(names)))
        if joint_names is None:  # the tabletop layout (robot_env.py)
            return torch.tensor([*pos[:3], *vel[:3], pos[3] + pos[4], vel[3] + vel[4], grip], dtype=torch.float32)
        return torch.from_numpy(np.concatenate([pos, vel]).astype(np.float32))
    if hasattr(msg, "pose"):  # PoseStamped
        return torch.from_numpy(_pose(msg).astype(np.float32))
    return torch.from_numpy(rt.float64_array_values(msg).reshape(-1).astype(np.float32))


def command_action(msg: Any, topics: BagTopics, pose: Any | None) -> np.ndarray:
    """The policy-space action [A'] of one command message (before the gripper is appended)."""
    if hasattr(msg, "twist"):  # TwistStamped
        v = msg.twist.linear
        return np.array([v.x, v.y, v.z]) / (topics.control_hz * topics.ee_step)
    if hasattr(msg, "pose"):  # PoseStamped target
        if pose is None:
            raise EnvError("bag pose_topic: PoseStamped commands are targets; the current pose they move "
                           "from needs a pose_topic (a PoseStamped)")
        return np.clip((_pose(msg)[:3] - _pose(pose)[:3]) / topics.ee_step, -1.0, 1.0)
    if hasattr(msg, "points"):  # JointTrajectory
        return np.asarray(msg.points[0].positions, np.float64)
    return np.asarray(msg.data, np.float64).reshape(-1)


class _Series:
    """One topic's messages in time order; `asof(t, after)`: the newest with after <= time <= t."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.logs: list[float] = []
        self.msgs: list[Any] = []

    def add(self, t: float, log: float, msg: Any) -> None:
        self.times.append(t)
        self.logs.append(log)
        self.msgs.append(msg)

    def sort(self) -> None:
        order = sorted(range(len(self.times)), key=self.times.__getitem__)
        self.times, self.logs, self.msgs = ([v[i] for i in order] for v in (self.times, self.logs, self.msgs))

    def index(self, t: float, after: float) -> int | None:
        i = bisect.bisect_right(self.times, t) - 1
        return i if i >= 0 and self.logs[i] >= after else None

    def asof(self, t: float, after: float) -> Any | None:
        i = self.index(t, after)
        return None if i is None else self.msgs[i]


def robot_state(robot: Any, states: _Series, i: int, joints: Any | None, grip: float) -> torch.Tensor:
    """float32 [S]: RobotEnv's state (robot.state_layout) from message i of the state topic, the
    pose before it (the ee_pose layout's velocity), the as-of joint state (its gripper joints) and
    the last gripper command."""
    reader = StateReader(robot)
    reader.grip = grip
    if reader.on_pose:
        for j in (i - 1, i) if i > 0 else (i,):
            reader.track(states.msgs[j])
        if joints is not None:
            reader.grip_js = _Held(joints)
    return torch.from_numpy(reader.vector(states.msgs[i]).astype(np.float32))


class _Held:
    """A subscription that holds one message (StateReader reads the gripper joints from one)."""

    def __init__(self, msg: Any):
        self.msg = msg

    def latest(self) -> Received:
        return Received(self.msg, 0.0, 1)


def _joints_topic(topics: BagTopics) -> str | None:
    """The joint states whose gripper joints give the ee_pose layout's finger gap, if any."""
    r = topics.robot
    return r.topic(r.joint_states_topic) if r is not None and r.state_layout == "ee_pose" and r.gripper_joints else None


def read_bag(bag: Path, topics: BagTopics) -> tuple[dict[str, _Series], str]:
    """topic -> its messages (time, log time, message), and the bag's storage (sqlite3, mcap)."""
    from rosbags.rosbag2 import Reader

    needed = {topics.command_topic, *topics.obs_topics.values(), topics.gripper_topic, topics.pose_topic} - {None}
    wanted = needed | ({topics.success_topic, topics.reset_topic, _joints_topic(topics)} - {None})
    store = rt.typestore()
    series: dict[str, _Series] = {t: _Series() for t in wanted}
    try:
        reader = Reader(bag)
    except Exception as e:  # noqa: BLE001 (rosbags' errors for a missing or broken bag)
        raise EnvError(f"bag: {bag} is not a readable rosbag2 directory ({type(e).__name__}: {str(e)[:120]})") from None
    with reader:
        present = {c.topic for c in reader.connections}
        missing = sorted(needed - present)
        if missing:
            raise EnvError(f"bag topics: {missing} not in {bag.name}; it has {sorted(present)}")
        conns = [c for c in reader.connections if c.topic in wanted]
        for c, log_ns, raw in reader.messages(connections=conns):
            msg = store.deserialize_cdr(raw, c.msgtype)
            series[c.topic].add(message_time(msg, log_ns, topics.stamps), log_ns * 1e-9, msg)
    storage = str(yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
                  .get("storage_identifier", "sqlite3"))
    for s in series.values():
        s.sort()
    return series, storage


def ingest_rosbag(bag: str | Path, out: str | Path, task: str, topics: BagTopics | None = None) -> dict[str, Any]:
    """Convert a rosbag2 directory (sqlite3 or MCAP) into an episode dataset at `out`; returns a
    summary: out, storage, episodes, steps."""
    topics, bag = topics or BagTopics(), Path(bag)
    series, storage = read_bag(bag, topics)
    resets = series[topics.reset_topic].logs if topics.reset_topic else []
    cmds = series[topics.command_topic]
    success = series[topics.success_topic] if topics.success_topic else _Series()
    episodes: dict[int, list[dict[str, torch.Tensor]]] = {}
    step_times: dict[int, list[float]] = {}
    grip = 0.0
    for t, log, msg in zip(cmds.times, cmds.logs, cmds.msgs):
        ep = bisect.bisect_right(resets, log)  # episode index: resets logged before this command
        start = resets[ep - 1] if ep else float("-inf")
        if ep not in episodes:
            episodes[ep], step_times[ep], grip = [], [], 0.0
        latest = {k: series[top].asof(t, start) for k, top in topics.obs_topics.items()}
        pose = series[topics.pose_topic].asof(t, start) if topics.pose_topic else None
        if pose is None and topics.pose_topic:
            continue
        a = command_action(msg, topics, pose)
        if topics.gripper_topic:
            g = series[topics.gripper_topic].asof(t, start)
            if g is None:
                continue
            closed, open_ = topics.gripper_closed, topics.gripper_open
            a = np.append(a, np.clip(2.0 * (_scalar(g) - open_) / (closed - open_) - 1.0, -1.0, 1.0))
        if all(m is not None for m in latest.values()):
            step = {f"obs.{k}": decode_obs(k, m, topics.joint_names, grip, topics.camera) for k, m in latest.items()
                    if not (k == "state" and topics.robot is not None)}
            if topics.robot is not None:  # the state as RobotEnv builds it in the robot's layout
                states = series[topics.obs_topics["state"]]
                joints = series[_joints_topic(topics)].asof(t, start) if _joints_topic(topics) else None
                step["obs.state"] = robot_state(topics.robot, states, states.index(t, start), joints, grip)
            step.update(action=torch.from_numpy(a.astype(np.float32)), reward=torch.tensor(0.0),
                        success=torch.tensor(False))
            episodes[ep].append(step)
            step_times[ep].append(t)
        if len(a) > 3:
            grip = float(a[3])
    for t, log, msg in zip(success.times, success.logs, success.msgs):  # the last step at or before it
        ep = bisect.bisect_right(resets, log)
        i = bisect.bisect_right(step_times.get(ep, []), t) - 1
        if i >= 0:
            episodes[ep][i]["success"] = torch.tensor(bool(msg.data))
            episodes[ep][i]["reward"] = torch.tensor(float(bool(msg.data)))
    spec = {"task": task, "num_envs": 1, "control_hz": topics.control_hz, "source": f"rosbag2:{bag.name} ({storage})"}
    writer = episode_writer(out, task, spec, topics.camera)
    written = steps = 0
    for ep in sorted(episodes):
        if episodes[ep]:
            writer.add({k: torch.stack([s[k] for s in episodes[ep]]) for k in episodes[ep][0]}, topics.instruction, None)
            written, steps = written + 1, steps + len(episodes[ep])
    return {"out": str(out), "storage": storage, "episodes": written, "steps": steps}
