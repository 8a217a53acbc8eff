"""Policy node: serve a checkpoint over ROS 2 (`embodied serve CHECKPOINT`).

Subscribes to the robot's observations (through robot_bridge.RobotEnv: joint states, the
privileged Float64MultiArray of a digital twin when the policy was trained on it, camera
images of every camera an rgb policy reads, each frame through the camera transform the
policy's dataset recorded), checks before the first reset that the robot gives each of them
(robot_bridge/robot_check.py: one line naming what is missing and what the robot has), runs
`policy.act`, publishes each action chunk [K, A] on
/policy/action_chunk (std_msgs/Float64MultiArray, layout dims "chunk", "action") and executes
it one command per control period behind the safety layer. Episodes start from seeded
resets (the evaluation seeds of `embodied eval`), so results compare with simulation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from robot_bridge import ros_types as rt
from robot_bridge.cli_args import serve_arguments
from robot_bridge.recorder import RecordingEnv
from robot_bridge.robot_check import START_TIMEOUT_S, check_robot_gives
from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
from robot_bridge.safety import SafetyConfig
from robot_bridge.sim_node import camera_topic  # the twin's topic names
from robot_bridge.transport import COMMAND_QOS
from robot_bridge.transport_factory import make_transport


def policy_needs(cfg: Any, record: dict[str, Any] | None = None) -> list[str]:
    """The robot observations a checkpoint's policy reads (its record's obs_keys, else its
    config's), with the joint state RobotEnv's safety filter reads in any case: state,
    privileged, rgb_<cam>."""
    keys = list((record or {}).get("obs_keys") or [])
    if not keys:
        keys = [cfg.policy.obs_key] if cfg.policy.name == "mlp" else ["state"]
        keys += [f"rgb_{c}" for c in cfg.env.cameras] if cfg.env.obs_mode == "rgb" else []
    return list(dict.fromkeys(["state", *keys]))


def recorded_camera(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The camera transform (crop, interpolation, roi) the policy's training frames went through:
    the policy record's `camera_transform`, else the one its dataset's meta/info.json recorded
    (robot recordings and ingested bags carry one, robot_bridge/recorder.py); None when neither
    says (frames rendered at the policy's size: the default transform)."""
    from embodied.data.layout import DatasetError, read_info

    record = record or {}
    got = record.get("camera_transform")
    if got is None and record.get("dataset"):
        try:
            got = (read_info(record["dataset"]).get("embodied") or {}).get("spec", {}).get("camera_transform")
        except DatasetError:
            got = None  # the dataset is not on this machine: nothing recorded to apply
    if not got:
        return None
    return {k: got[k] for k in ("crop", "interpolation", "roi") if got.get(k) is not None}


def recorded_spec(cfg: Any, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec of the env the policy ran in, as its checkpoint recorded it (the policy record's
    `env_spec`: action_dim, privileged_dim, max_episode_steps, ...; embodied/rl/loop_parts.py
    writes it). A checkpoint written before records held one: the spec of the task's simulator,
    made once with one env and closed."""
    spec = (record or {}).get("env_spec")
    if spec:
        return dict(spec)
    from sims.registry import make_env

    env = make_env(cfg.env.task, 1, num_threads=1)
    try:
        return {k: getattr(env.spec, k) for k in ("task", "action_dim", "state_dim", "privileged_dim",
                                                  "max_episode_steps", "control_hz")}
    finally:
        env.close()


def robot_config_for(cfg: Any, namespace: str = "", control_hz: float = 20.0, transport: str = "auto",
                     domain_id: int | None = None, record: dict[str, Any] | None = None) -> RobotEnvConfig:
    """The RobotEnv topics a checkpoint's policy needs (the sim robot node's topic names), every
    camera it reads, each frame through the camera transform its dataset recorded, the action
    width, privileged width and time limit of the env it was trained in (`record`: the policy's
    record, with the env spec it recorded: recorded_spec)."""
    spec = recorded_spec(cfg, record)
    needs = policy_needs(cfg, record)
    rgb = cfg.env.obs_mode == "rgb"
    priv = "privileged" in needs
    return RobotEnvConfig(task=cfg.env.task, namespace=namespace, control_hz=control_hz,
                          max_episode_steps=int(spec["max_episode_steps"]), action_dim=int(spec["action_dim"]),
                          privileged_topic="/privileged" if priv else None,
                          privileged_dim=int(spec["privileged_dim"]) if priv else 0,
                          image_topics={c: camera_topic(c) for c in cfg.env.cameras} if rgb else {},
                          image_size=(cfg.env.image_size, cfg.env.image_size),
                          camera=recorded_camera(record) if rgb else None,
                          instruction_topic="/instruction", transport=transport, domain_id=domain_id,
                          safety=SafetyConfig(action_dim=int(spec["action_dim"]), control_hz=control_hz))


@torch.no_grad()
def serve(checkpoint: str | Path, episodes: int = 10, namespace: str = "", control_hz: float = 20.0,
          transport: str = "auto", domain_id: int | None = None, record: str | Path | None = None,
          deterministic: bool = True, device: str = "auto") -> dict[str, Any]:
    """Run `episodes` episodes (0: until interrupted) of the checkpoint's policy on the robot."""
    from embodied.run.env import eval_seeds
    from embodied.run.load import load_trained
    from embodied.run.device import policy_act, resolve_device

    dev = resolve_device(device, "--device")  # before anything reaches the robot
    ckpt, cfg, policy = load_trained(checkpoint)
    policy = policy.to(dev)
    tr = make_transport(transport, domain_id, "policy_node")
    rcfg = robot_config_for(cfg, namespace, control_hz, transport, domain_id, record=policy.record)
    try:
        env: Any = RobotEnv(rcfg, transport=tr)
    except Exception:
        tr.close()
        raise
    try:  # before the first reset: the robot gives every observation the policy reads
        check_robot_gives(env, policy_needs(cfg, policy.record), max(START_TIMEOUT_S, rcfg.reset_timeout_s),
                          who=f"checkpoint {ckpt}")
    except Exception:
        env.close()
        tr.close()
        raise
    if record:
        env = RecordingEnv(env, record)
    chunk_pub = tr.publisher(rcfg.topic("/policy/action_chunk"), "std_msgs/msg/Float64MultiArray", COMMAND_QOS)
    successes: list[bool] = []
    lengths: list[int] = []
    seeds = eval_seeds(episodes) if episodes > 0 else None
    try:
        k = 0
        while seeds is None or k < len(seeds):
            seed = seeds[k] if seeds is not None else eval_seeds(k + 1)[-1]
            obs, _ = env.reset(seed=seed)
            done, success, length = False, False, 0
            while not done:
                out = policy_act(policy, obs, deterministic=deterministic)
                chunk = out.actions[0].float().cpu()  # [K, A]
                chunk_pub.publish(rt.float64_array(chunk.double().numpy(), labels=["chunk", "action"]))
                for a in chunk:
                    res = env.step(a[None])
                    length += 1
                    if bool(res.done[0]):
                        done, success = True, bool(res.info["success"][0])
                        break
                    obs = res.obs
            successes.append(success)
            lengths.append(length)
            k += 1
    finally:
        counts = dict(getattr(env, "env", env).safety.counts)
        env.close()
        tr.close()
    n = max(len(successes), 1)
    return {"checkpoint": str(ckpt), "task": cfg.env.task, "episodes": len(successes),
            "success_rate": sum(successes) / n, "episode_length": sum(lengths) / n,
            "safety_interventions": counts, "recorded": str(record) if record else None}


def run(args: argparse.Namespace) -> int:
    if args.episodes < 0 or args.rate <= 0:
        raise SystemExit("embodied serve: error: --episodes must be >= 0 and --rate > 0")
    from robot_bridge.ros_types import MessageError
    from robot_bridge.transport import TransportError
    from sims.vecenv import EnvError

    try:
        summary = serve(args.checkpoint, args.episodes, args.namespace, args.rate, args.transport, args.domain_id,
                        args.record, deterministic=not args.stochastic, device=args.device)
    except (TransportError, MessageError) as e:
        raise EnvError(str(e)) from None
    print(json.dumps(summary, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    import os

    os.environ.setdefault("MUJOCO_GL", "egl")
    from embodied.run.checkpoint import CheckpointError
    from embodied.config_loader import ConfigError
    from policies.base import PolicyLoadError
    from sims.vecenv import EnvError

    p = argparse.ArgumentParser(prog="embodied serve", description="serve a checkpoint over ROS 2")
    serve_arguments(p)
    try:
        sys.exit(run(p.parse_args()))
    except (EnvError, CheckpointError, ConfigError, PolicyLoadError) as e:
        print(f"embodied serve: error: {e}", file=sys.stderr)
        sys.exit(2)
