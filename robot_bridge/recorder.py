"""Recording into our episode dataset format (embodied.data.dataset.EpisodeWriter, what `embodied
collect` writes).

`RecordingEnv` wraps a VecEnv with B = 1 (RobotEnv, or a simulator) and hands each episode to
EpisodeWriter when it ends: obs.<key> [L, ...] (the observations the actions were taken
from), action [L, A], reward [L], success [L]. An episode cut short by an error is not
written; every finished one is committed already (EpisodeWriter writes atomically).

`ingest_rosbag` turns a rosbag2 recording (rosbags' Reader) into the same format, aligning
topics by time: one step per command message; each observation topic contributes its
newest message received at or before the command (ZOH), steps before every topic has a
message are dropped. Episodes are split at messages on the reset topic (or one episode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied.data.dataset import EpisodeWriter
from robot_bridge import ros_types as rt
from sims.vecenv import EnvError, Obs, Seed, StepResult, VecEnv


def _spec_dict(spec: Any) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(spec).items()}


class RecordingEnv(VecEnv):
    """Records every finished episode of a one-env VecEnv into `root`."""

    def __init__(self, env: VecEnv, root: str | Path):
        if env.num_envs != 1:
            raise EnvError(f"num_envs: RecordingEnv records one env, got {env.num_envs}")
        self.env, self.spec, self.device = env, env.spec, env.device
        self.writer = EpisodeWriter(root, env.spec.task, _spec_dict(env.spec))
        self._steps: list[dict[str, torch.Tensor]] = []
        self._obs: Obs | None = None
        self._seed: int | None = None
        self.episodes_written = 0

    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        self._obs, info = self.env.reset(seed=seed, env_ids=env_ids)
        self._steps, self._seed = [], (seed if isinstance(seed, int) or seed is None else list(seed)[0])
        return self._obs, info

    def step(self, action: torch.Tensor) -> StepResult:
        res = self.env.step(action)
        a = torch.as_tensor(action, dtype=torch.float32).reshape(1, -1)[0]
        self._steps.append({**{f"obs.{k}": v[0] for k, v in self._obs.items() if torch.is_tensor(v)},
                            "action": a, "reward": res.reward[0].float(), "success": res.info["success"][0]})
        if bool(res.done[0]):
            episode = {k: torch.stack([s[k] for s in self._steps]) for k in self._steps[0]}
            self.writer.add(episode, self._obs["instruction"][0], self._seed)
            self.episodes_written += 1
            self._steps, self._seed = [], None
        self._obs = res.obs
        return res

    def close(self) -> None:
        self.env.close()


@dataclass
class BagTopics:
    """Which topics of a bag make which fields. obs_topics: obs key -> topic; the key decides
    the decoding: "state" (JointState positions then velocities of joint_names, or the
    tabletop layout when joint_names is None and the joints are the MuJoCo gripper's),
    "rgb_*" (Image/CompressedImage), anything else (Float64MultiArray values)."""

    command_topic: str = "/cmd"
    obs_topics: dict[str, str] = field(default_factory=lambda: {"state": "/joint_states"})
    joint_names: tuple[str, ...] | None = None
    success_topic: str | None = "/success"
    reset_topic: str | None = "/reset"
    instruction: str = ""
    control_hz: float = 20.0  # the dataset's fps


def _decode(key: str, msg: Any, joint_names: tuple[str, ...] | None, grip: float) -> torch.Tensor:
    if key.startswith("rgb_"):
        return torch.from_numpy(rt.image_to_rgb(msg))
    if hasattr(msg, "position") and hasattr(msg, "name"):  # JointState
        idx = {n: i for i, n in enumerate(msg.name)}
        if joint_names is None:
            pos, vel = np.asarray(msg.position), np.asarray(msg.velocity)
            p = [pos[idx[n]] for n in ("x", "y", "z", "finger_left", "finger_right")]
            v = [vel[idx[n]] for n in ("x", "y", "z", "finger_left", "finger_right")] if len(vel) else [0.0] * 5
            return torch.tensor([*p[:3], *v[:3], p[3] + p[4], v[3] + v[4], grip], dtype=torch.float32)
        pos = [msg.position[idx[n]] for n in joint_names]
        vel = [msg.velocity[idx[n]] for n in joint_names] if len(msg.velocity) else [0.0] * len(joint_names)
        return torch.tensor([*pos, *vel], dtype=torch.float32)
    return torch.from_numpy(rt.float64_array_values(msg).reshape(-1).astype(np.float32))


def ingest_rosbag(bag: str | Path, out: str | Path, task: str, topics: BagTopics | None = None) -> dict[str, Any]:
    """Convert a rosbag2 directory into an episode dataset at `out`; returns a summary."""
    from rosbags.rosbag2 import Reader

    topics = topics or BagTopics()
    wanted = {topics.command_topic, topics.success_topic, topics.reset_topic, *topics.obs_topics.values()} - {None}
    store = rt.typestore()
    with Reader(Path(bag)) as reader:
        present = {c.topic for c in reader.connections}
        missing = sorted({topics.command_topic, *topics.obs_topics.values()} - present)
        if missing:
            raise EnvError(f"bag topics: {missing} not in {Path(bag).name}; it has {sorted(present)}")
        conns = [c for c in reader.connections if c.topic in wanted]
        events = [(t, c.topic, store.deserialize_cdr(raw, c.msgtype)) for c, t, raw in reader.messages(connections=conns)]
    events.sort(key=lambda e: e[0])
    latest: dict[str, Any] = {}
    success, grip = False, 0.0
    episodes: list[list[dict[str, torch.Tensor]]] = [[]]
    for _, topic, msg in events:
        if topic == topics.reset_topic:
            if episodes[-1]:
                episodes.append([])
            latest.clear()
            success = False
        elif topic == topics.success_topic:
            success = bool(msg.data)
            if episodes[-1]:
                episodes[-1][-1]["success"] = torch.tensor(success)
                episodes[-1][-1]["reward"] = torch.tensor(float(success))
        elif topic == topics.command_topic:
            a = np.asarray(msg.data if hasattr(msg, "data") else msg.points[0].positions, np.float32).reshape(-1)
            if all(t in latest for t in topics.obs_topics.values()):
                step = {f"obs.{k}": _decode(k, latest[t], topics.joint_names, grip) for k, t in topics.obs_topics.items()}
                step.update(action=torch.from_numpy(a), reward=torch.tensor(0.0), success=torch.tensor(False))
                episodes[-1].append(step)
            if len(a) > 3:
                grip = float(a[3])
        else:
            latest[topic] = msg
    writer = EpisodeWriter(out, task, {"task": task, "num_envs": 1, "control_hz": topics.control_hz,
                                       "source": f"rosbag2:{Path(bag).name}"})
    written = 0
    for steps in episodes:
        if steps:
            writer.add({k: torch.stack([s[k] for s in steps]) for k in steps[0]}, topics.instruction, None)
            written += 1
    return {"out": str(out), "episodes": written, "steps": sum(len(e) for e in episodes)}
