"""`embodied` command line: train, eval, collect, sft, pipeline, robot-sim, serve, report, sim2real,
finetune-robot, robot-operator, reward, world-model, list.

Building the parser, `--help` and `embodied list` import nothing heavy (no torch, MuJoCo,
transformers, ROS/DDS: tests/test_cli_startup.py); each handler imports what it needs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from embodied.config_loader import config_names, find_config  # noqa: E402  (imports nothing heavy)


def refuse_or_clear(run: Path, overwrite: bool) -> None:
    """A fresh `train` into a directory that already holds a run: a one-line error naming how to
    continue it, unless --overwrite, which removes the old run first (so two runs never mix their
    checkpoints, TensorBoard events and videos)."""
    if not run.is_dir() or not any(run.iterdir()):
        return
    if not overwrite:
        from embodied.config_loader import ConfigError

        raise ConfigError(f"train.run_dir: {run} already holds a run; continue it with `train --resume {run}`, "
                          f"choose another train.run_dir, or add --overwrite to replace it")
    import shutil

    shutil.rmtree(run)


def cmd_train(args: argparse.Namespace) -> int:
    from embodied.config import load_config
    from embodied.rl.train import train

    resume = None
    if args.resume:
        from embodied.run.load import resume_config

        cfg, resume = resume_config(args.resume, args.overrides)
    else:  # no CONFIG: the defaults of embodied/config.py
        cfg = load_config(find_config(args.config) if args.config else None, args.overrides)
        refuse_or_clear(Path(cfg.train.run_dir), args.overwrite)
    from embodied.run.stop import no_empty_dirs

    with no_empty_dirs(cfg.train.run_dir):
        summary = train(cfg, resume=resume)
    if resume is not None:
        print(f"resumed:     {args.resume} (success before its training: {summary['success_before']:.2f})")
    else:
        print(f"success rate before training: {summary['success_before']:.2f}")
    print(f"success rate after training:  {summary.get('success_after', float('nan')):.2f}")
    print(f"checkpoint:  {summary.get('checkpoint')}")
    print(f"tensorboard: {summary['tensorboard']}  (.venv/bin/tensorboard --logdir {summary['tensorboard']})")
    if summary.get("video"):
        print(f"video:       {summary['video']}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from embodied.eval.evaluate import evaluate
    from embodied.run.env import build_env, eval_seeds
    from embodied.run.load import load_trained
    from policies.base import check_fits
    from sims.registry import batch_for

    from embodied.run.device import resolve_device

    ckpt, cfg, policy = load_trained(args.checkpoint, args.overrides)
    device = resolve_device(cfg.train.device)  # train.device=... among the overrides; auto by default
    policy = policy.to(device)
    episodes = args.episodes or cfg.train.eval_episodes
    env = build_env(cfg.env, batch_for(cfg.env.task, episodes, 64), device=device)  # a multiple of the tasks
    try:
        check_fits(policy, env.spec, f"checkpoint {ckpt}")
    except Exception:
        env.close()
        raise
    video = Path(args.video) if args.video else None
    res = evaluate(policy, env, eval_seeds(episodes), video_path=video)
    env.close()
    print(json.dumps({"checkpoint": str(ckpt), "task": cfg.env.task, **res.as_dict(),
                      "video": str(res.video) if res.video else None}, indent=1))
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from embodied.data.collect import collect_demos

    cameras = [c.strip() for c in args.cameras.split(",")] if args.cameras is not None else None
    if args.policy:
        from embodied.data.collect_policy import collect_policy_rollouts
        from sims.vecenv import EnvError

        if args.noise:
            raise EnvError("--noise is DART noise on the expert's actions; with --policy the policy samples its own")
        if args.balanced:
            raise EnvError("--balanced shares the expert's demos out over tasks; with --policy every episode is kept")
        summary = collect_policy_rollouts(args.policy, args.episodes, args.out, task=args.task, seed=args.seed,
                                          deterministic=args.deterministic, num_envs=args.num_envs,
                                          # the checkpoint's env unless rgb is asked for here
                                          obs_mode="rgb" if args.obs_mode == "rgb" else None,
                                          image_size=args.image_size if args.obs_mode == "rgb" else None,
                                          cameras=cameras)
        print(json.dumps(summary, indent=1))
        return 0
    from embodied.run.stop import Stopped, command_line, no_empty_dirs

    try:
        with no_empty_dirs(args.out):
            summary = collect_demos(args.task, args.episodes, args.out, seed=args.seed, obs_mode=args.obs_mode,
                                    image_size=args.image_size, num_envs=args.num_envs, cameras=cameras,
                                    noise=args.noise, balanced=args.balanced)
    except Stopped as e:
        left = args.episodes - e.info.get("written", 0)
        e.resume = command_line(options={"--episodes": str(left), "--seed": str(e.info.get("next_seed", args.seed))})
        raise
    print(json.dumps(summary, indent=1))
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from embodied.imitation.sft import cmd_sft as run

    return run(args)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from embodied.pipeline import cmd_pipeline as run

    return run(args)


def cmd_robot_sim(args: argparse.Namespace) -> int:
    from robot_bridge.sim_node import run

    return run(args)


def cmd_serve(args: argparse.Namespace) -> int:
    from embodied.deploy.serve import run

    return run(args)


def cmd_report(args: argparse.Namespace) -> int:
    from embodied.eval.report import cmd_report as run  # numpy only; matplotlib for the plots

    return run(args)


def cmd_sim2real(args: argparse.Namespace) -> int:
    from embodied.eval.sim2real import cmd_sim2real as run

    return run(args)


def cmd_finetune_robot(args: argparse.Namespace) -> int:
    from embodied.robot_rl.run import cmd_finetune_robot as run

    args.config = str(find_config(args.config))
    return run(args)


def cmd_robot_operator(args: argparse.Namespace) -> int:
    from robot_bridge.operator_node import run

    return run(args)


def cmd_list(args: argparse.Namespace) -> int:
    """Every family's task names and the configs by folder, a short line each."""
    from sims.registry import families, list_tasks  # the family table: names only, no simulator, no torch

    print("tasks:   " + ", ".join(list_tasks()))
    print("  MuJoCo (docs/tasks.md); env.backend cpu (C MuJoCo) or warp (MuJoCo Warp, a GPU or warp's CPU device)")
    for fam in families():
        if fam.prefix:  # every other family (sims/<package>/family.py)
            where = ", ".join(w for w in (fam.setup, fam.doc) if w)
            print(f"{fam.name} ({where}): " + ", ".join(fam.names() or [fam.pattern]))
    print("configs:")
    by_folder: dict[str, list[str]] = {}
    for name in config_names():
        folder, _, leaf = name.rpartition("/")
        by_folder.setdefault(folder or ".", []).append(leaf)
    for folder, leaves in by_folder.items():
        print(f"  {folder}/: " + ", ".join(leaves))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="embodied", description="RL for robot policies")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a policy with PPO or GRPO")
    t.add_argument("config", nargs="?", help="YAML config (path or name in configs/)")
    t.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. ppo.lr=1e-3")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    t.add_argument("--overwrite", action="store_true",
                   help="replace what train.run_dir holds (a fresh run into a used directory is refused otherwise)")
    t.set_defaults(fn=cmd_train)
    e = sub.add_parser("eval", help="evaluate a checkpoint on fixed seeds")
    e.add_argument("checkpoint", help="checkpoint, checkpoints/ or run directory of `embodied train`, or "
                   "`embodied sft`'s final or run directory")
    e.add_argument("overrides", nargs="*", help="e.g. env.task=PushCube")
    e.add_argument("--episodes", type=int, default=0)
    e.add_argument("--video", help="write an mp4 of the first episodes here")
    e.set_defaults(fn=cmd_eval)
    c = sub.add_parser("collect", help="record scripted-expert demonstrations")
    c.add_argument("task")
    c.add_argument("--episodes", type=int, required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--obs-mode", default="state", choices=["state", "rgb"])
    c.add_argument("--image-size", type=int, default=64)
    c.add_argument("--num-envs", type=int, default=0)
    c.add_argument("--cameras", help="with --obs-mode rgb: cameras to record, e.g. front,wrist (default front)")
    c.add_argument("--noise", type=float, default=0.0, metavar="SIGMA",
                   help="DART noise: execute expert action + N(0, SIGMA^2) clipped to [-1, 1], "
                        "record the clean expert action")
    c.add_argument("--balanced", action="store_true",
                   help="as many demos of each task (metaworld:MT10, MT50: their rows hold fixed tasks)")
    c.add_argument("--policy", metavar="CHECKPOINT", help="record this trained policy's rollouts (all episodes, "
                   "with rewards and success) instead of the expert's demos")
    c.add_argument("--deterministic", action="store_true", help="with --policy: the policy's mean action, not samples")
    c.set_defaults(fn=cmd_collect)
    from robot_bridge.cli_args import robot_sim_arguments, serve_arguments

    rs = sub.add_parser("robot-sim", help="run a task as a ROS 2 robot (digital twin)")
    robot_sim_arguments(rs)
    rs.set_defaults(fn=cmd_robot_sim)
    sv = sub.add_parser("serve", help="serve a checkpoint as a ROS 2 policy node")
    serve_arguments(sv)
    sv.set_defaults(fn=cmd_serve)
    # sft and pipeline: their modules import torch, so their parsers live here.
    sf = sub.add_parser("sft", help="supervised fine-tuning of a VLA on a LeRobot dataset")
    sf.add_argument("config", nargs="?", help="SFT YAML config (fields of embodied.imitation.sft.SFTConfig)")
    sf.add_argument("overrides", nargs="*", help="key=value overrides, e.g. steps=500")
    sf.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run in RUN_DIR from its newest step "
                    "directory (weights, optimiser, schedule, step count, logs)")
    sf.set_defaults(fn=cmd_sft)
    pl = sub.add_parser("pipeline", help="collect demos, SFT a VLA, finetune it with RL, evaluate")
    pl.add_argument("config", help="pipeline YAML (path or name in configs/), e.g. demo")
    pl.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. rl.train.total_steps=20000")
    pl.set_defaults(fn=cmd_pipeline)
    rp = sub.add_parser("report", help="remake a sim-to-real report folder's report.md and report.html from its results.json")
    rp.add_argument("dir", help="report folder holding results.json (docs/sim2real.md)")
    rp.add_argument("--reps", type=int, default=2000, help="bootstrap resamples of the IQM intervals")
    rp.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    rp.set_defaults(fn=cmd_report)
    s2r = sub.add_parser("sim2real", help="evaluate checkpoints in simulation, under sweeps and on the robot/twin; "
                                          "write results.json and a report (docs/sim2real.md)")
    s2r.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                     help="checkpoint, checkpoints/ or run directory of `embodied train`, or `embodied sft`'s final "
                          "or run directory")
    s2r.add_argument("--task", required=True, help="task the checkpoints were trained on, e.g. PushCube")
    s2r_robot = s2r.add_mutually_exclusive_group()
    s2r_robot.add_argument("--twin", metavar="PRESET", help="the robot is the twin with this reality preset, over DDS")
    s2r_robot.add_argument("--robot", metavar="CONFIG", help="the robot: a YAML of RobotEnvConfig fields")
    s2r.add_argument("--sweep", metavar="FILE", help="YAML {knob: [v1, v2, ...]}: one condition per value")
    s2r.add_argument("--trials", type=int, default=100, help="episodes per checkpoint and condition")
    s2r.add_argument("--num-envs", type=int, default=64, help="simulated envs run at once")
    s2r.add_argument("--no-videos", action="store_true", help="skip the first-failure videos")
    s2r.add_argument("--out", required=True, help="report folder")
    s2r.add_argument("--device", default="auto", help="where the policies run: auto (CUDA when present), cpu, cuda, cuda:N")
    s2r.set_defaults(fn=cmd_sim2real)
    from embodied.robot_rl.run import finetune_arguments  # argparse only

    fr = sub.add_parser("finetune-robot", help="on-robot RL: actor and learner over ROS 2, with interventions "
                                               "(docs/robot_rl.md)")
    finetune_arguments(fr)
    fr.set_defaults(fn=cmd_finetune_robot)
    op = sub.add_parser("robot-operator", help="a scripted operator: the task's expert takes over on the teleop "
                                                "topic when the policy strays")
    op.add_argument("task", help="the MuJoCo task whose expert operates")
    op.add_argument("--namespace", default="")
    op.add_argument("--window", type=int, default=5, help="frames the policy's progress is judged over")
    op.add_argument("--min-progress", type=float, default=0.01, help="metres it must gain in --window frames")
    op.add_argument("--takeover", type=int, default=5, help="frames the operator keeps control")
    op.add_argument("--transport", default="auto", choices=("auto", "dds", "rclpy"))
    op.add_argument("--domain-id", type=int, default=None)
    op.set_defaults(fn=cmd_robot_operator)
    from embodied.robot_rl.reward_cli import reward_arguments  # argparse only

    rw = sub.add_parser("reward", help="train a success classifier for on-robot RL (docs/robot_rl.md)")
    reward_arguments(rw)
    from embodied.world_model.cli import world_model_arguments  # argparse only

    wm = sub.add_parser("world-model", help="train or evaluate a learned world model (docs/world_model.md)")
    world_model_arguments(wm)
    ls = sub.add_parser("list", help="list tasks and configs")
    ls.set_defaults(fn=cmd_list)
    return p


# Errors a handler reports as "embodied CMD: error: ..." with exit status 2 (module, class).
USER_ERRORS = (("embodied.config_loader", "ConfigError"), ("sims.vecenv", "EnvError"),
               ("policies.base", "PolicyLoadError"), ("embodied.run.checkpoint", "CheckpointError"),
               ("embodied.data.dataset", "DatasetError"), ("embodied.eval.results_file", "ReportError"),
               ("embodied.eval.stats", "StatsError"),
               ("embodied.eval.sim2real_robot", "Sim2RealError"), ("embodied.run.device", "DeviceError"))


def _user_errors() -> tuple[type, ...]:
    """The USER_ERRORS classes of the modules imported so far: a handler can only have raised
    one of those, and importing the others (torch, pyarrow, ...) would slow every command."""
    found = (getattr(sys.modules.get(mod), cls, None) for mod, cls in USER_ERRORS)
    return tuple(c for c in found if c is not None)


def main(argv: list[str] | None = None) -> int:
    import signal

    from embodied.run import stop

    p = parser()
    args, extra = p.parse_known_args(argv)
    stray = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
    if stray:
        p.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:  # key=value after an option (`eval CKPT --episodes 10 env.task=X`): argparse leaves them over
        args.overrides += extra
    stop.ARGV = list(sys.argv[1:] if argv is None else argv)
    if getattr(args, "config", None) and "=" in args.config:  # `train --resume X key=value`
        args.overrides.insert(0, args.config)
        args.config = None
    nothing = "nothing new (stopped before the first step)"

    def on_term(signum: int, frame) -> None:  # until a command's loop installs its own (embodied/stop.py)
        raise stop.Stopped(signum, nothing)

    import threading

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if main_thread else None
    try:
        return args.fn(args)
    except stop.Stopped as e:
        print(f"embodied {args.command}: {e.line()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"embodied {args.command}: {stop.Stopped(signal.SIGINT, nothing).line()}", file=sys.stderr)
        return 128 + signal.SIGINT
    except Exception as e:
        if not isinstance(e, _user_errors()):
            raise
        print(f"embodied {args.command}: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              file=sys.stderr)
        return 2
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: every thread's stack to stderr
    sys.exit(main())
