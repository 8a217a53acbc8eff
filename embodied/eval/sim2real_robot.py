"""The robot side of `embodied sim2real`: the twin over ROS 2 DDS, or a real robot's RobotEnv.

The twin is `embodied robot-sim TASK --reality PRESET` in a second process, on loopback DDS
(its own domain), stepped once per command. A real robot is a RobotEnv built from a YAML of
RobotEnvConfig fields (`--robot FILE`), checked against the checkpoint's observations before
anything connects; its frames go through the camera transform the checkpoint's dataset recorded,
and before the first reset every topic the policy reads must deliver (robot_bridge/robot_check.py).
Episodes start from seeded resets (the simulation's seeds, so the twin starts where the
simulation started) and execute every action of each predicted chunk.
Videos: the first failed robot episode is written from the frames of the robot's first camera,
the frames its policy saw; a twin of a state policy is asked for a front camera at VIDEO_SIZE
for this (the policy ignores it), a real robot records only if its config lists a camera.
"""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
TWIN_RATE_HZ = 200.0  # command rate towards the twin: it steps once per command, so as fast as it answers
VIDEO_SIZE = 64  # side of the frames a state policy's twin renders for the failure video (128: 1.3x the twin's time)


class Sim2RealError(ValueError):
    """Bad sim2real input; the message is one line naming the field and what is allowed."""


def observed_cameras(cfg: Any) -> tuple[str, ...]:
    """The cameras a checkpoint's policy reads: () for a state policy."""
    return tuple(cfg.env.cameras) if cfg.env.obs_mode == "rgb" else ()


def robot_config_from_file(path: str | Path, cfg: Any, label: str, record: dict[str, Any] | None = None) -> Any:
    """RobotEnvConfig from a YAML of its fields; Sim2RealError when it cannot feed the checkpoint.
    record: the policy's record; the camera transform its dataset recorded becomes the robot's
    `camera` (a YAML `camera` that differs from it is refused)."""
    from robot_bridge.robot_env import RobotEnvConfig
    from robot_bridge.safety import SafetyConfig
    from sims.vecenv import EnvError

    path = Path(path)
    if not path.is_file():
        raise Sim2RealError(f"--robot: {path} does not exist (a YAML of RobotEnvConfig fields, docs/sim2real.md)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise Sim2RealError(f"--robot: {path} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise Sim2RealError(f"robot: expected a mapping of RobotEnvConfig fields, got {data!r:.60}")
    fields = {f.name for f in dataclasses.fields(RobotEnvConfig)}
    for key in data:
        if key not in fields:
            raise Sim2RealError(f"robot.{key}: unknown field; allowed: {', '.join(sorted(fields))}")
    for key in ("joint_names", "image_size"):
        if key in data:
            data[key] = tuple(data[key])
    safety = data.pop("safety", None)
    try:
        action_dim = int(data.get("action_dim", 4))
        data["safety"] = SafetyConfig(**{"action_dim": action_dim, **(safety or {})})
        rc = RobotEnvConfig(**data)
    except (EnvError, TypeError, ValueError) as e:
        raise Sim2RealError(f"robot: {e}") from None
    check_robot_matches(rc, cfg, label)
    return with_recorded_camera(rc, record, f"checkpoint {label}")


def _camera_keys(camera: Any) -> Any:
    """A YAML `camera` mapping as recorded_camera gives it (roi a list, no None values)."""
    if not isinstance(camera, dict):
        return camera
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in camera.items() if v is not None}


def check_robot_matches(rc: Any, cfg: Any, label: str) -> None:
    """The robot must give the checkpoint its observations: cameras, image size, state, action."""
    from sims.registry import make_env

    want = observed_cameras(cfg)
    have = tuple(rc.image_topics)
    if sorted(have) != sorted(want):
        raise Sim2RealError(f"robot.image_topics: cameras {list(have)} do not match checkpoint {label}'s "
                            f"cameras {list(want)}; allowed: exactly {list(want)}")
    if want and tuple(rc.image_size) != (cfg.env.image_size,) * 2:
        raise Sim2RealError(f"robot.image_size: {list(rc.image_size)} does not match checkpoint {label}'s "
                            f"{cfg.env.image_size} x {cfg.env.image_size} images")
    spec = make_env(cfg.env.task, 1, num_threads=1).spec
    if rc.action_dim != spec.action_dim:
        raise Sim2RealError(f"robot.action_dim: {rc.action_dim}; checkpoint {label} acts in {spec.action_dim} dims")
    reads_privileged = cfg.policy.name == "mlp" and cfg.policy.obs_key == "privileged"  # a VLA's obs_key is unused
    if reads_privileged and (not rc.privileged_topic or rc.privileged_dim != spec.privileged_dim):
        raise Sim2RealError(f"robot.privileged_topic: checkpoint {label} reads the privileged state "
                            f"({spec.privileged_dim} values); allowed: a topic with privileged_dim "
                            f"{spec.privileged_dim} (digital twins only)")


def with_recorded_camera(rc: Any, record: dict[str, Any] | None, label: str = "the checkpoint") -> Any:
    """rc with `camera` the transform the policy's dataset recorded (none recorded: rc); a
    different `camera` already in rc is a Sim2RealError."""
    from embodied.deploy.serve import recorded_camera

    recorded = recorded_camera(record) if rc.image_topics else None
    if recorded is None or _camera_keys(rc.camera) == recorded:
        return rc
    if rc.camera is not None:
        raise Sim2RealError(f"robot.camera: {rc.camera} differs from the transform {label}'s training frames went "
                            f"through, {recorded}; allowed: leave it out (that one applies), or the same")
    return dataclasses.replace(rc, camera=recorded)


class Twin:
    """`embodied robot-sim TASK --reality PRESET` in a second process on loopback DDS."""

    def __init__(self, task: str, preset: str, cfg: Any, label: str, log: Path, video: bool = False):
        """video: a twin of a state policy also renders and publishes the front camera (VIDEO_SIZE),
        so that the robot side can record a failed episode; a camera policy's images serve."""
        from robot_bridge.transport import loopback_env

        cams = observed_cameras(cfg)  # the twin publishes every camera of the task (sim_node.camera_topic)
        self.tmp = tempfile.TemporaryDirectory(prefix="sim2real_dds_")
        if os.environ.get("CYCLONEDDS_URI") and os.environ.get("ROS_DOMAIN_ID"):  # a DDS set-up given
            self.env_vars = {k: os.environ[k] for k in ("CYCLONEDDS_URI", "ROS_DOMAIN_ID")}
        else:  # loopback only, a random domain: nothing leaves this machine
            self.env_vars = loopback_env(domain_id=random.randint(100, 199), directory=self.tmp.name)
        self._old_env = {k: os.environ.get(k) for k in self.env_vars}
        os.environ.update(self.env_vars)  # this process's participants join the twin's domain
        self.video_only = video and not cams  # frames for the video only, not for the policy
        image = str(cfg.env.image_size) if cams else str(VIDEO_SIZE) if video else "0"
        cmd = [sys.executable, "-m", "embodied.cli", "robot-sim", task, "--transport", "dds",
               "--reality", preset, "--image-size", image, "--rate", "50",
               "--domain-id", self.env_vars["ROS_DOMAIN_ID"]]
        self.log = log
        self._log = open(log, "w")
        env = {**os.environ, **self.env_vars, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
               "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        self.preset, self.cmd = preset, cmd

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log.read_text().strip().splitlines()[-1:] if self.log.exists() else []
            raise Sim2RealError(f"--twin: robot-sim exited with status {self.proc.returncode}"
                                + (f": {tail[0][:200]}" if tail else ""))

    def robot_config(self, cfg: Any) -> Any:
        from embodied.deploy.serve import robot_config_for

        from robot_bridge.sim_node import camera_topic

        rc = robot_config_for(cfg, control_hz=TWIN_RATE_HZ, transport="dds",  # every camera the policy reads
                              domain_id=int(self.env_vars["ROS_DOMAIN_ID"]))
        if self.video_only:
            rc = dataclasses.replace(rc, image_topics={"front": camera_topic("front")}, image_size=(VIDEO_SIZE,) * 2)
        return dataclasses.replace(rc, reset_timeout_s=120.0, obs_timeout_s=5.0)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.tmp.cleanup()
        for k, v in self._old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@torch.no_grad()
def run_robot(policy: Any, rc: Any, seeds: Sequence[int], twin: Twin | None = None,
              video: tuple[Path, float] | None = None) -> tuple[list[bool], list[int], dict]:
    """One episode per seed on the robot; returns (successes, lengths in control steps, info).

    video (PREFIX, fps): the first failed episode's frames (the robot's first camera: the reset's
    frame, then one per step) go to PREFIX_seed<s>.mp4, named in info["video"]; no camera, no video."""
    from embodied.eval.video import write_mp4
    from embodied.run.device import policy_act
    from robot_bridge.robot_check import START_TIMEOUT_S, check_robot_gives
    from robot_bridge.robot_env import RobotEnv
    from sims.vecenv import EnvError

    if twin is not None:
        twin.check_alive()
    else:  # a real robot: its frames through the transform the policy's dataset recorded
        rc = with_recorded_camera(rc, getattr(policy, "record", None))
    env = RobotEnv(rc)
    needs = ["state", *(["privileged"] if rc.privileged_topic else []), *(f"rgb_{c}" for c in rc.image_topics)]
    try:  # before the first reset: every observation the policy reads arrives (a robot may still be starting)
        check_robot_gives(env, needs, max(START_TIMEOUT_S, rc.reset_timeout_s))
    except EnvError as e:
        env.close()
        if twin is not None:
            twin.check_alive()
        raise Sim2RealError(str(e)) from None
    cam = f"rgb_{next(iter(rc.image_topics))}" if video and rc.image_topics else None
    successes, lengths, t0, written = [], [], time.monotonic(), None
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=int(seed))
            done, success, length = False, False, 0
            frames = [obs[cam][0].numpy()] if cam and written is None else None
            while not done:
                chunk = policy_act(policy, obs).actions[0].float().cpu()  # [K, A], on the policy's device
                if rc.interface == "joint_trajectory":  # the whole chunk as one trajectory, timed by the controller
                    res = env.chunk_step(chunk[None])
                    length += int(res.valid.sum())
                    if frames is not None:
                        frames.append((res.final_obs if res.final_obs is not None else res.obs)[cam][0].numpy())
                    if bool((res.terminated | res.truncated).any()):
                        done, success = True, bool(res.info["success"].any())
                    obs = res.obs
                    continue
                for a in chunk:
                    res = env.step(a[None])
                    length += 1
                    if frames is not None:
                        frames.append((res.final_obs if res.final_obs is not None else res.obs)[cam][0].numpy())
                    if bool(res.done[0]):
                        done, success = True, bool(res.info["success"][0])
                        break
                    obs = res.obs
            successes.append(success)
            lengths.append(length)
            if frames is not None and not success:
                prefix, fps = video
                written = write_mp4(Path(f"{prefix}_seed{int(seed)}.mp4"), np.stack(frames), fps=fps)
    except EnvError as e:
        if twin is not None:
            twin.check_alive()
        raise Sim2RealError(str(e) if str(e).startswith("robot") else f"robot: {e}") from None
    finally:
        counts = dict(env.safety.counts) if env.safety is not None else {}
        env.close()
    return successes, lengths, {"wall_s": time.monotonic() - t0, "safety_interventions": counts, "video": written}
