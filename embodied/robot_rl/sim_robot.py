"""The twin in the actor's own process (config section `sim`): the robot's task as a MuJoCo env
(num_envs = 1) behind the same safety layer, with what the actor needs of RobotEnv, and the
scripted operator's takeover rule (robot_bridge/operator_node.py) read from the same frames.
No ROS 2, no DDS: with `actor.lockstep` a run goes as fast as the learner updates, so a run of
the finetuning loop fits in a test (tests/robot_rl/test_robot_rl_learning.py).

What matches `embodied robot-sim TASK` behind RobotEnv: observations "state" [1, 9],
"privileged" [1, P] and, for each camera named in robot.image_topics, "rgb_<cam>" uint8
[1, H, W, 3] at robot.image_size; reward = success (sparse; with sim.reward: dense the task's
shaped reward, which no robot gives), terminated = success, truncated at
robot.max_episode_steps (a task's failure: truncated at once); the final observation of a finished episode is its last frame and
the next episode starts inside `step` (auto-reset); `reset(seed)` for held-out seeds. With
`autoreset = False` a finished episode's last frame stays the newest (`step` returns it as obs)
and `step_past_end` returns it again, as robot-sim holds a finished episode until a reset;
`reset()` (no seed) then starts the episode the env had already begun.
Commands pass robot.safety (SafeVecEnv: a refused command becomes a hold, as the simulator must
step); an e-stop makes every later step an EnvError, as on the robot.

With a success_fn (robot.success: classifier) and `judging` set (the actor sets it for training
episodes) the classifier's verdict on each new frame is the success: it ends the episode and
gives the reward, as RobotEnv's success_fn on a robot. The twin's own success only ends its
physics: as robot-sim, the twin then holds its last frame until the classifier says success or
robot.max_episode_steps pass (a missed success). A twin's failure ends the episode as truncated.
info["twin_success"] says whether the twin was in success at each frame (the truth the
classifier is measured against). Without `judging` (held-out evaluation) success is the twin's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from robot_bridge.robot_env import RobotEnvConfig
from robot_bridge.safety import SafetyConfig, SafeVecEnv
from sims.vecenv import EnvError, Obs, Seed, StepResult


@dataclass
class SimConfig:
    """`sim:` in a finetune config: run robot.task in process instead of over ROS 2."""

    seed: int = 0  # the twin's episode stream (training episodes)
    operator: bool = False  # the scripted operator takes over when the policy strays
    window: int = 5  # frames over which the distance to go must shrink by min_progress (m)
    min_progress: float = 0.01
    takeover: int = 5  # frames of one takeover
    reward: str = "sparse"  # sparse: success (what a robot gives); dense: the task's shaped reward

    def __post_init__(self) -> None:
        if self.reward not in ("sparse", "dense"):
            raise ValueError(f"sim.reward: unknown {self.reward!r}; allowed: sparse, dense")
        if self.window < 1 or self.takeover < 1 or not self.min_progress >= 0:
            raise ValueError(f"sim.window, sim.takeover: must be >= 1, sim.min_progress >= 0; "
                             f"got {self.window}, {self.takeover}, {self.min_progress}")


class SimRobot:
    """robot.task in process, with RobotEnv's surface for the actor: spec, reset, step, safety,
    close. `obs` is the newest frame (the one the next action acts on)."""

    def __init__(self, robot: RobotEnvConfig, sim: SimConfig, success_fn: Callable[[Obs], bool] | None = None):
        from sims.registry import make_env

        cams = tuple(robot.image_topics)  # camera names of the task (front, wrist), rendered at robot.image_size
        env = make_env(robot.task, 1, obs_mode="rgb" if cams else "state", reward_mode=sim.reward, num_threads=1,
                       seed=sim.seed, max_episode_steps=robot.max_episode_steps, cameras=cams or ("front",),
                       image_size=tuple(robot.image_size))
        if robot.privileged_topic and env.spec.privileged_dim != robot.privileged_dim:
            raise EnvError(f"robot.privileged_dim: {robot.privileged_dim}, but {robot.task}'s privileged "
                           f"observation has {env.spec.privileged_dim} values")
        self.env = SafeVecEnv(env, robot.safety or SafetyConfig(action_dim=robot.action_dim))
        self.spec = env.spec
        self.sparse = sim.reward == "sparse"
        self.safety = self.env.filters[0]
        self.obs: Obs | None = None
        self.new_episode = True  # the newest frame starts an episode
        self.autoreset = True  # False: a finished episode holds its last frame until reset()
        self._next: Obs | None = None  # autoreset False: the next episode's first frame, already begun
        self.success_fn, self.judging = success_fn, False  # judging: the classifier says success
        self.max_steps = robot.max_episode_steps
        self._elapsed = 0  # steps of the current episode
        self._held: Obs | None = None  # judging: the twin's finished episode's last frame, held
        self._begun: Obs | None = None  # judging: the twin's next episode's first frame (it reset in step)

    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        if self._next is not None and seed is None:
            self.obs, info = self._next, {}
        else:
            self.obs, info = self.env.reset(seed=seed)
        self._next, self.new_episode = None, True
        self._held, self._begun, self._elapsed = None, None, 0
        return self.obs, info

    def step(self, action: torch.Tensor) -> StepResult:
        if self.safety.estopped:
            raise EnvError("robot: e-stop engaged; no further commands (clear it on the robot, then restart)")
        if self.success_fn is not None and self.judging:
            return self._judged_step(action)
        res = self.env.step(action)
        self._elapsed = 0 if bool(res.done[0]) else self._elapsed + 1
        # as RobotEnv: reward and termination from success only; a task's own failure ends the
        # episode as truncated (the twin would hold until the time limit)
        success = res.info["success"].bool()
        res.truncated = (res.truncated | res.terminated) & ~success
        res.reward = success.float() if self.sparse else res.reward.float()
        res.terminated = success
        if bool(res.done[0]) and not self.autoreset:
            self._next, res.obs = res.obs, res.final_obs
        self.obs, self.new_episode = res.obs, bool(res.done[0]) and self.autoreset
        return res

    def _judged_step(self, action: torch.Tensor) -> StepResult:
        """One step with the classifier's verdict as success (judging; class docstring)."""
        if self._held is None:
            res = self.env.step(action)
            twin_done, twin_success = bool(res.done[0]), bool(res.info["success"][0])
            frame = res.final_obs if twin_done else res.obs
            if twin_done:  # the env began its next episode inside step; the twin holds this one's end
                self._held, self._begun = frame, res.obs
        else:
            frame, twin_done, twin_success = self._held, True, True  # held only after the twin's success
        self._elapsed += 1
        success = bool(self.success_fn(frame))
        truncated = not success and (self._elapsed >= self.max_steps or (twin_done and not twin_success))
        done = success or truncated
        t = lambda v: torch.tensor([v])  # noqa: E731
        res = StepResult(obs=frame, reward=t(float(success)), terminated=t(success), truncated=t(truncated),
                         info={"success": t(success), "twin_success": t(twin_success)},
                         final_obs=frame if done else None)
        if done and self.autoreset:
            res.obs = self._begun if self._begun is not None else self.env.reset()[0]
            self._held, self._begun, self._elapsed = None, None, 0
        elif done:  # the actor resets after the frames past success; reset() starts the next episode
            self._next = self._begun
        self.obs, self.new_episode = res.obs, done and self.autoreset
        return res

    def step_past_end(self, action: torch.Tensor) -> Obs:
        """After a finished episode (autoreset False): the twin holds its last frame until reset
        (judging, after a success the twin had not reached: the twin moves on until its own end)."""
        if self.safety.estopped:
            raise EnvError("robot: e-stop engaged; no further commands (clear it on the robot, then restart)")
        if self.success_fn is not None and self.judging and self._held is None:
            res = self.env.step(action)
            self.obs = res.obs
            if bool(res.done[0]):
                self._held, self._begun = res.final_obs, res.obs
                self._next, self.obs = res.obs, res.final_obs
        elif self._held is not None:
            self.obs = self._held
        return self.obs

    def close(self) -> None:
        self.env.close()


class SimOperator:
    """The scripted operator in process: `action()` before each step is the expert's action while
    it is in control (robot_bridge.operator_node.TakeoverRule on the newest frame), else None."""

    def __init__(self, robot: SimRobot, task: str, sim: SimConfig):
        from robot_bridge.operator_node import TakeoverRule

        self.robot = robot
        self.rule = TakeoverRule(task, sim.window, sim.min_progress, sim.takeover)

    def action(self) -> np.ndarray | None:
        if self.robot.new_episode:
            self.rule.reset()
            self.robot.new_episode = False
        return self.rule.frame(self.robot.obs["privileged"][0].double().numpy())
