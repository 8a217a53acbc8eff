"""RobotEnv: one ROS 2 robot behind the VecEnv contract (B = 1), behind the safety layer.

Observations (dict, B = 1): "state" [1, S], optionally "privileged", "ee_pose", "rgb_<cam>",
and "instruction"; the topics they come from, the checks that drop unusable messages and what a
reset reads: robot_bridge/robot_inputs.py.
Actions float32 [1, A]: the safety filter makes a command of them against the newest
state (where the robot is now, even when a late reply left the observation behind), sent
through the command interface (robot_bridge/arm_commands.py: the twin's /cmd, a pose target, a
twist, a joint trajectory, forward commands; the gripper on its own topic). `chunk_step` sends
a chunk [1, K, A] as one JointTrajectory of K points (interface joint_trajectory), each point
filtered against the one before. When no command may be sent (stale state, e-stop) the arm is
held: a zero twist; on e-stop also the pose held as target, or the joint positions. In the
ee_pose layout the newest PoseStamped plays the joint state's part below.
Pacing: one command per 1 / control_hz. With `sync`, step waits for a joint
state newer (header stamp) than the newest one when the command was sent, so a stepped twin
and a robot streaming states both work, and a step after a late reply is back in lock step; a
command whose step timed out is answered (a newer state) before the next one is checked.
Episodes end on success (topic, classifier or operator) or after max_episode_steps; reset by
topic (std_msgs/Int64 seed, acknowledged on reset_done_topic), service (std_srvs/Trigger) or
operator prompt.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import torch

from robot_bridge import ros_types as rt
from robot_bridge.arm_commands import ArmCommands, pose_values
from robot_bridge.robot_env_config import RobotEnvConfig
from robot_bridge.robot_inputs import RobotInputs, dropped
from robot_bridge.robot_state import StateReader
from robot_bridge.safety import SafetyFilter
from robot_bridge.transport import COMMAND_QOS, Received, Transport
from robot_bridge.transport_factory import make_transport
from sims.vecenv import ChunkStepResult, EnvError, EnvSpec, Obs, Seed, StepResult, VecEnv


class RobotEnv(VecEnv):
    """A ROS 2 robot as a VecEnv with one env. success_fn: obs -> bool for success="classifier"."""

    def __init__(self, config: RobotEnvConfig, transport: Transport | None = None,
                 success_fn: Callable[[Obs], bool] | None = None):
        c = self.cfg = config
        if c.success == "classifier" and success_fn is None:
            raise EnvError("success: 'classifier' needs a success_fn")
        self.success_fn = success_fn
        self.st = StateReader(c)  # the state vector of the layout; st.grip: the last gripper command
        self.spec = EnvSpec(task=c.task, num_envs=1, action_dim=c.action_dim, state_dim=self.st.dim,
                            privileged_dim=c.privileged_dim, max_episode_steps=c.max_episode_steps,
                            control_hz=c.control_hz, cameras=tuple(c.image_topics), image_size=tuple(c.image_size))
        self.tr = transport or make_transport(c.transport, c.domain_id, "robot_env")
        self._own_transport = transport is None
        self.safety = SafetyFilter(c.safety) if c.safety is not None else None
        t = c.topic
        self.inputs = ins = RobotInputs(c, self.tr, self.st)
        # the inputs' subscriptions, also read as the env's (robot_check, the robot-RL actor, tests)
        self._js, self._images, self._priv, self._succ = ins.js, ins.images, ins.priv, ins.succ
        self._on_pose, self.camera = ins.on_pose, ins.camera
        self._reset_done = self.tr.subscribe(t(c.reset_done_topic), "std_msgs/msg/Int64", COMMAND_QOS) if c.reset == "topic" else None
        self._reset_pub = self.tr.publisher(t(c.reset_topic), "std_msgs/msg/Int64", COMMAND_QOS) if c.reset == "topic" else None
        self.out = ArmCommands(c, self.tr)
        self.tr.subscribe(t(c.estop_topic), "std_msgs/msg/Bool", COMMAND_QOS, callback=self._on_estop)
        self.commands_sent = 0
        self.last_command_time = float("nan")
        self.last_obs_time = float("nan")  # receive time of the state the last step observed
        self._stamp = -1.0  # header stamp of the joint state the current obs was built from
        self._acted_on = -1.0  # header stamp of the newest joint state when the last command was sent
        self._unanswered = False  # sync: the last command's step timed out before the robot's answer came
        self.autoreset = True  # False: step() leaves a finished episode as it ended; the caller resets
        self._elapsed = 0
        self._next_tick = 0.0
        self._obs: Obs | None = None

    # ------------------------------------------------------------------ e-stop
    def _on_estop(self, msg: Any) -> None:
        if msg.data and self.safety is not None:
            self.safety.estop("estop topic")

    # ------------------------------------------------------------------ observations
    def _observe(self, js: Received, after: float | None = None) -> Obs:
        """The observation of joint state js (robot_inputs.py; after: the reset's acknowledgement)."""
        obs, state = self.inputs.observe(js, after)
        self._stamp = rt.stamp_seconds(js.msg.header.stamp)
        self._pos = state[:self.st.n_pos].copy()  # float64 positions the safety filter checks against
        return obs

    # ------------------------------------------------------------------ reset
    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        if seed is not None and not isinstance(seed, int):
            seed = list(seed)[0]
        if self.safety is not None:  # the last episode's interventions, in one line
            self.safety.end_episode("last episode")
        c = self.cfg
        sent = time.monotonic()
        if c.reset == "topic":  # the state after the reset comes after the acknowledgement
            value = -1 if seed is None else int(seed)
            end, done = sent + c.reset_timeout_s, None
            while done is None and time.monotonic() < end:  # resend until acknowledged
                self._reset_pub.publish(rt.scalar("std_msgs/msg/Int64", value))
                done = self._reset_done.wait_after(sent, 0.25)
                if done is not None and done.msg.data != value:
                    done = None
            if done is None:
                raise EnvError(f"robot: reset not acknowledged on {c.topic(c.reset_done_topic)} within "
                               f"{c.reset_timeout_s:.1f} s (is the robot driver running on this domain?)")
            acked = done.recv_time
        elif c.reset == "service":
            req = rt.msg_class("std_srvs/srv/Trigger_Request")(structure_needs_at_least_one_member=0)
            resp = self.tr.call_service(c.topic(c.reset_service), "std_srvs/srv/Trigger", req, c.reset_timeout_s)
            if not resp.success:
                raise EnvError(f"robot: reset service refused: {resp.message}")
            acked = time.monotonic()
        else:
            input(f"[robot] reset the scene (seed {seed}), then press Enter: ")
            acked = time.monotonic()
        js = self._js.wait_after(acked, c.obs_timeout_s)
        if js is None:
            raise EnvError(f"robot: no {self._js.topic} after reset within {c.obs_timeout_s:.1f} s"
                           + dropped(self._js))
        self.st.grip = self.st.gripper_now(js.msg)
        if c.interface == "pose_target" and c.ee_orientation is None:  # pose targets keep this orientation
            self.out.orientation = pose_values(js.msg)[3:]
        if self.safety is not None:
            self.safety.hold_gripper = self.st.grip
        self._elapsed = 0
        self._unanswered = False
        self._obs = self._observe(js, after=acked)
        return self._obs, {}

    # ------------------------------------------------------------------ stepping
    def _publish(self, cmd: np.ndarray, start: np.ndarray) -> None:
        """Send commands [A] or [K, A] that passed the filter from position start."""
        self.out.send(cmd, start)
        self.commands_sent += 1
        self._unanswered = True  # until a state newer than _acted_on arrives (step's inputs.fresh_state)
        self.last_command_time = time.monotonic()  # for latency: command sent - observation received

    def _position(self, js: Received) -> tuple[np.ndarray, float]:
        """float64 positions the safety filter checks against [3] (TCP) or [J], and the stamp."""
        return self.st.vector(js.msg)[:self.st.n_pos], rt.stamp_seconds(js.msg.header.stamp)

    def hold(self, estop: bool = False) -> bool:
        """Command the arm to stay (arm_commands.ArmCommands.hold): always for twist (a zero twist);
        on e-stop also the newest pose as target, or the newest joint positions."""
        if self.cfg.interface == "twist":
            return self.out.hold()
        if not estop:
            return False
        js = self._js.latest()
        if js is None:
            return False
        pos = self._position(js)[0]
        if self._on_pose:
            return self.out.hold(pose=pose_values(js.msg)[:3])
        return self.out.hold(joints=pos)

    def _command(self, action: Any, chunk: bool = False) -> int:
        """Filter and send one command (chunk: a list of K, as one trajectory) at the next control
        tick; returns how many were sent; EnvError when none may be sent."""
        now = time.monotonic()
        if now < self._next_tick:
            time.sleep(self._next_tick - now)
        self._next_tick = max(now, self._next_tick) + 1.0 / self.cfg.control_hz
        if self.cfg.sync and self._unanswered:
            # the last command's answer did not come in time (a link fault); it may still arrive and
            # move the robot, so the next command waits for it: else its limits would be checked
            # against a state the robot has already left
            self.inputs.fresh_state(self._acted_on)
            self._unanswered = False
        latest = self._js.latest()
        self._acted_on = max(self._stamp, rt.stamp_seconds(latest.msg.header.stamp) if latest else -1.0)
        actions = action if chunk else [action]
        if self.safety is None:
            cmds = np.stack([np.asarray(a, np.float64).reshape(-1) for a in actions])
            if cmds.shape[1] != self.cfg.action_dim or not np.isfinite(cmds).all():
                raise EnvError(f"action: expected {self.cfg.action_dim} finite values, got shape {cmds.shape}")
            return self._sent(cmds, self._pos)
        end = time.monotonic() + self.cfg.obs_timeout_s
        while True:
            js = self._js.latest()
            age = time.monotonic() - js.recv_time if js is not None else float("inf")
            # the limits hold for where the robot is now: the newest joint state, which is newer than
            # the observation when a reply came late (a link fault), not the observation's position
            pos, stamp = (self._pos, self._stamp) if js is None else self._position(js)
            cmds = self._filter_chunk(actions, pos, age)
            if cmds is not None:
                break
            self.hold(self.safety.estopped)
            if self.safety.estopped:
                raise EnvError("robot: e-stop engaged; no further commands (clear it on the robot, then restart)")
            if time.monotonic() > end:
                raise EnvError(f"robot: observations stale for {self.cfg.obs_timeout_s:.1f} s on "
                               f"{self._js.topic}; commanding stopped")
            self._js.wait_newer(js.seq if js else 0, 1.0 / self.cfg.control_hz)
        if self.safety.estopped:  # an e-stop that arrived while filtering
            self.hold(True)
            raise EnvError("robot: e-stop engaged; no further commands")
        self._acted_on = max(self._stamp, stamp)
        self._sent(cmds, pos)
        return len(cmds)

    def _filter_chunk(self, actions: list, pos: np.ndarray, age: float) -> np.ndarray | None:
        """Safe commands [K', A] (K' <= K: up to the first refused one), each filtered against the
        target of the one before, or None when the first is refused."""
        out, now = [], time.monotonic()
        for k, a in enumerate(actions):
            cmd = self.safety.filter(a, self.st.safety_position(pos, a), obs_age=age, now=now + k / self.cfg.control_hz)
            if cmd is None:
                break
            out.append(cmd)
            pos = self.out.targets(cmd[None], pos)[0] if self.out.ee else cmd[:self.st.n_pos]
        return np.stack(out) if out else None

    def _sent(self, cmds: np.ndarray, pos: np.ndarray) -> int:
        self._publish(cmds, pos)
        c = self.cfg
        if c.state_layout in ("tabletop", "ee_pose") and cmds.shape[1] > 3:
            self.st.grip = float(cmds[-1, 3])
        elif c.state_layout == "arm":
            self.st.grip = float(cmds[-1, -1])
        return len(cmds)

    def step(self, action: torch.Tensor) -> StepResult:
        if self._obs is None:
            raise EnvError("robot: call reset() before step()")
        act = action[0] if isinstance(action, torch.Tensor) and action.dim() == 2 and len(action) == 1 else action
        self._command(act)
        return self._finish(self.inputs.fresh_state(self._acted_on) if self.cfg.sync else self._js.latest(), 1)

    def _finish(self, js: Received, steps: int) -> StepResult:
        """The step's result after `steps` control periods, observed from js."""
        self._unanswered = False
        obs = self._observe(js)
        self.last_obs_time = js.recv_time
        self._elapsed += steps
        success = self._success(obs)
        truncated = self._elapsed >= self.cfg.max_episode_steps and not success
        if truncated and self.cfg.success == "operator":
            success = input("[robot] episode over: success? [y/N] ").strip().lower().startswith("y")
        done = success or truncated
        t = lambda v: torch.tensor([v])  # noqa: E731
        info = {"success": t(bool(success))}
        res = StepResult(obs=obs, reward=t(float(success)), terminated=t(bool(success)),
                         truncated=t(bool(truncated and not success)), info=info, final_obs=obs if done else None)
        if done and self.autoreset:
            res.obs, _ = self.reset()
        self._obs = res.obs
        return res

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        """actions [1, K, A]. Interface joint_trajectory: the commands (filtered one after another,
        up to the first refused, K') go as ONE trajectory; the state is observed once, after the
        K' / control_hz it takes (reward and success at its last point). Other interfaces: K steps
        (an episode that ends ends the chunk)."""
        if self._obs is None:
            raise EnvError("robot: call reset() before chunk_step()")
        K = actions.shape[1]
        reward = torch.zeros(1, K)
        term, trunc, valid, success = (torch.zeros(1, K, dtype=torch.bool) for _ in range(4))
        final = None
        if self.cfg.interface != "joint_trajectory":
            for k in range(K):
                res = self.step(actions[:, k])
                valid[:, k], reward[:, k], term[:, k], trunc[:, k] = True, res.reward, res.terminated, res.truncated
                success[:, k] = res.info["success"]
                if res.done.any():
                    final = res.final_obs
                    break
            return ChunkStepResult(obs=res.obs, reward=reward, terminated=term, truncated=trunc,
                                   info={"success": success}, valid=valid, final_obs=final)
        sent = self._command(list(actions[0]), chunk=True)
        period = 1.0 / self.cfg.control_hz
        self._next_tick += (sent - 1) * period
        done = self.last_command_time + sent * period  # when the controller has run the last point
        time.sleep(max(0.0, done - time.monotonic()))
        js = self._js.wait_after(done, self.cfg.obs_timeout_s) if self.cfg.sync else self._js.latest()
        if js is None:
            raise EnvError(f"robot: no new {self._js.topic} within {self.cfg.obs_timeout_s:.1f} s after "
                           f"the trajectory (is the robot driver running on this domain?)" + dropped(self._js))
        res = self._finish(js, sent)
        k = sent - 1
        valid[:, :sent], reward[:, k], term[:, k], trunc[:, k] = True, res.reward, res.terminated, res.truncated
        success[:, k] = res.info["success"]
        return ChunkStepResult(obs=res.obs, reward=reward, terminated=term, truncated=trunc,
                               info={"success": success}, valid=valid, final_obs=res.final_obs)

    def step_past_end(self, action: torch.Tensor) -> Obs:
        """One more command, through the safety filter, and the frame after it, once an episode
        has ended (autoreset False) and before the reset: no success check, no time limit (the
        frames past success that embodied/robot_rl records for a success classifier)."""
        act = action[0] if isinstance(action, torch.Tensor) and action.dim() == 2 and len(action) == 1 else action
        self._command(act)
        js = self.inputs.fresh_state(self._acted_on) if self.cfg.sync else self._js.latest()
        self._unanswered = False
        self._obs = self._observe(js)
        return self._obs

    def _success(self, obs: Obs) -> bool:
        if self.cfg.success == "topic":
            return self.inputs.success()
        if self.cfg.success == "classifier":
            return bool(self.success_fn(obs))
        return False

    def close(self) -> None:
        if self.cfg.interface == "twist":  # a zero twist: the servo stops now, not at its timeout
            self.out.hold()
        if self.safety is not None:
            self.safety.end_episode("last episode")
        if self._own_transport:
            self.tr.close()
