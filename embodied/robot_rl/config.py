"""`embodied finetune-robot` configuration: one YAML file (configs/finetune/finetune_*.yaml), sections
robot (RobotEnvConfig, with safety: SafetyConfig), sac (SACConfig), teleop (TeleopConfig or
null), labels (LabelConfig or null: success / failure from the operator), sim (SimConfig or null: the twin in the actor's process instead of ROS 2),
residual (ResidualConfig or null: a bounded residual on a frozen SFT'd VLA), actor,
learner, and the top-level run fields. Unknown keys and bad values are one-line
errors naming the field."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied.config_loader import ConfigError, load_mapping
from embodied.robot_rl.agent import SACConfig
from embodied.robot_rl.labels import LabelConfig
from embodied.robot_rl.obs import check_obs_key, obs_keys
from embodied.robot_rl.residual import ResidualConfig
from embodied.robot_rl.sim_robot import SimConfig
from robot_bridge.robot_env import RobotEnvConfig
from robot_bridge.safety import SafetyConfig
from robot_bridge.teleop import TeleopConfig

ON_LEARNER_LOSS = ("continue", "hold")


class FinetuneConfigError(ConfigError):
    """A bad finetune config; the message is one line naming the field."""


@dataclass
class ActorConfig:
    episodes: int = 100  # training episodes (robot time budget)
    on_learner_loss: str = "continue"  # keep acting on the last weights, or hold (send nothing)
    learner_timeout_s: float = 10.0  # no weights for this long: the learner is lost (stalled or dead)
    eval_every: int = 10  # training episodes between held-out evaluations (0: none)
    eval_episodes: int = 10
    eval_seed: int = 1_000_000  # held-out seeds eval_seed + i (the twin's training stream is its own)
    nominal_hz: float | None = None  # the robot's real control rate for robot time (None: robot.control_hz)
    port: int = 0  # the link's local port (0: any free port, written to run_dir/actor.port)
    seed: int = 0
    lockstep: bool = False  # wait after each training step until the learner has done its updates (twins)
    progress: bool = True  # a progress bar: episodes, success over the last 20, policy version
    keep_success_frame: bool = True  # record the state a success was seen in as one more row (reward classifier data)
    frames_after_success: int = 0  # then act this many steps more and record their frames too (positives; not RL)

    def __post_init__(self) -> None:
        if self.on_learner_loss not in ON_LEARNER_LOSS:
            raise FinetuneConfigError(f"actor.on_learner_loss: unknown {self.on_learner_loss!r}; "
                                      f"allowed: {', '.join(ON_LEARNER_LOSS)}")
        if self.episodes < 0 or self.eval_every < 0 or self.eval_episodes < 0 or not self.learner_timeout_s > 0:
            raise FinetuneConfigError("actor.episodes, eval_every, eval_episodes, learner_timeout_s: must be >= 0 (> 0)")
        if self.frames_after_success < 0 or (self.frames_after_success and not self.keep_success_frame):
            raise FinetuneConfigError(f"actor.frames_after_success: {self.frames_after_success}; allowed: >= 0, "
                                      "and 0 with actor.keep_success_frame: false")


@dataclass
class LearnerConfig:
    warmup_transitions: int = 100  # online transitions before the first update
    critic_warmup_updates: int = 500  # updates that train the critic only (the actor keeps its start)
    push_every_s: float = 2.0  # weights to the actor (HIL-SERL: 1-4 s)
    checkpoint_every_s: float = 10.0
    max_updates_per_transition: float = 1.0  # updates never outrun the data by more than this
    successes_as_demos: bool = False  # an episode that succeeded also goes into the demo buffer (self-imitation)
    seed: int = 0
    # where the SAC learner's networks and batches live: auto (CUDA when present), cpu, cuda, cuda:N
    # (embodied/run/device.py); the actor on the robot side stays on the CPU, weights travel as numpy
    device: str = "auto"

    def __post_init__(self) -> None:
        from embodied.run.device import DeviceError, check_device

        try:
            check_device(self.device, "learner.device")
        except DeviceError as e:
            raise FinetuneConfigError(str(e)) from None


@dataclass
class InitConfig:
    """The starting policy: behaviour cloning on the first `bc_episodes` demo episodes (the weak,
    SFT'd policy), or a weights file."""

    bc_episodes: int = 5
    demo_episodes: int | None = None  # demos in the demo buffer (None: bc_episodes; 0: all)
    bc_steps: int = 1000
    bc_lr: float = 1e-3
    weights: str | None = None  # a policy.safetensors to start from instead


@dataclass
class FinetuneConfig:
    run_dir: str = "runs/finetune"
    demos: str | None = None  # a LeRobot v3 dataset of demonstrations (embodied collect)
    obs_key: str = "privileged"  # what the policy reads: state, privileged, rgb_<cam>+state (embodied/robot_rl/obs.py)
    reward_classifier: str | None = None  # with robot.success: classifier (embodied reward train)
    robot: RobotEnvConfig = field(default_factory=RobotEnvConfig)
    sac: SACConfig = field(default_factory=SACConfig)
    teleop: TeleopConfig | None = None
    sim: SimConfig | None = None
    labels: LabelConfig | None = None
    residual: ResidualConfig | None = None  # SAC learns a bounded residual on this VLA's actions
    actor: ActorConfig = field(default_factory=ActorConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    init: InitConfig = field(default_factory=InitConfig)

    def __post_init__(self) -> None:
        try:
            check_obs_key(self.obs_key, tuple(self.robot.image_topics))
        except ValueError as e:
            raise FinetuneConfigError(str(e)) from None
        if self.residual is not None and self.obs_key.startswith("rgb_"):
            raise FinetuneConfigError("obs_key: a camera with residual (the VLA reads the images); allowed with "
                                      "residual: state, privileged")
        if "privileged" in obs_keys(self.obs_key) and not self.robot.privileged_topic:
            raise FinetuneConfigError("obs_key: 'privileged' needs robot.privileged_topic")
        if self.robot.success == "classifier" and not self.reward_classifier:
            raise FinetuneConfigError("reward_classifier: robot.success 'classifier' needs one (embodied reward train)")
        if self.sim is not None and self.robot.success not in ("topic", "classifier"):
            raise FinetuneConfigError(f"robot.success: {self.robot.success!r} with the in-process twin (sim), which "
                                      "ends episodes at its own success; allowed with sim: topic, classifier")
        if self.sim is not None and self.robot.success == "classifier" and self.sim.reward != "sparse":
            raise FinetuneConfigError(f"sim.reward: {self.sim.reward!r} with robot.success 'classifier' (the "
                                      "classifier gives the reward); allowed: sparse")
        if self.sim is not None and self.labels is not None and self.labels.topic is not None:
            raise FinetuneConfigError("labels.topic: the in-process twin (sim) has no ROS 2 topics; allowed with sim: "
                                      "null (labels.terminal: true)")
        if self.residual is not None and self.sac.chunk != 1:
            raise FinetuneConfigError(f"sac.chunk: {self.sac.chunk} with residual (a residual per step on the VLA's "
                                      "chunk); allowed with residual: 1")
        if self.residual is not None and self.init.weights:
            raise FinetuneConfigError("init.weights: with residual the starting residual is zero (the VLA's own "
                                      "actions); allowed with residual: null")
        if self.sim is not None and self.teleop is not None:
            raise FinetuneConfigError("teleop: the in-process twin (sim) has no ROS 2 topics; allowed with sim: "
                                      "null (sim.operator: true for the scripted operator)")


def _build(cls: type, data: Any, where: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FinetuneConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise FinetuneConfigError(f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(sorted(names))}")
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()}
    try:
        return cls(**kw)
    except FinetuneConfigError:
        raise
    except (ValueError, TypeError) as e:  # EnvError is a ValueError: one line naming the field
        msg = str(e).splitlines()[0]
        head = msg.split(":")[0]
        if head.split(",")[0] in names:  # "command_type: unknown ..." -> "robot.command_type: ..."
            msg = f"{where}.{msg}"
        elif head.startswith("safety."):
            msg = f"robot.{msg}"
        elif not head.startswith((f"{where}.", "sac.", "teleop.", "sim.", "labels", "residual.")):
            msg = f"{where}: {msg}"
        raise FinetuneConfigError(msg) from None


def config_from_dict(data: dict[str, Any]) -> FinetuneConfig:
    data = dict(data or {})
    robot = dict(data.pop("robot", None) or {})
    if "safety" in robot:
        robot["safety"] = None if robot["safety"] is None else _build(SafetyConfig, robot["safety"], "robot.safety")
    if "image_topics" in robot:
        robot["image_topics"] = dict(robot["image_topics"] or {})
    sections = {"robot": _build(RobotEnvConfig, robot, "robot"), "sac": _build(SACConfig, data.pop("sac", None), "sac"),
                "actor": _build(ActorConfig, data.pop("actor", None), "actor"),
                "learner": _build(LearnerConfig, data.pop("learner", None), "learner"),
                "init": _build(InitConfig, data.pop("init", None), "init")}
    teleop = data.pop("teleop", None)
    sections["teleop"] = None if teleop is None else _build(TeleopConfig, teleop, "teleop")
    sim = data.pop("sim", None)
    labels = data.pop("labels", None)
    sections["labels"] = None if labels is None else _build(LabelConfig, labels, "labels")
    sections["sim"] = None if sim is None else _build(SimConfig, sim, "sim")
    residual = data.pop("residual", None)
    sections["residual"] = None if residual is None else _build(ResidualConfig, residual, "residual")
    names = {f.name for f in dataclasses.fields(FinetuneConfig)} - set(sections)
    unknown = sorted(set(data) - names)
    if unknown:
        raise FinetuneConfigError(f"{unknown[0]}: unknown key; allowed: {', '.join(sorted(names | set(sections)))}")
    return FinetuneConfig(**data, **sections)


def load_finetune_config(path: str | Path, overrides: list[str] = ()) -> FinetuneConfig:
    """The YAML file plus dotted key=value overrides (embodied/config_loader.py), typed and checked."""
    try:
        data = load_mapping(path, overrides, example="learner.utd=2")
    except ConfigError as e:
        raise FinetuneConfigError(str(e)) from None
    return config_from_dict(data)
