"""`embodied finetune-robot CONFIG [--role all|actor|learner|init] [key=value ...]`.

Roles: init writes the starting policy (behaviour cloning on the demos) and exits; learner
runs the learner alone (it connects to the actor of the same run_dir); actor runs the actor
alone; all (the default) prepares, starts the learner as a second process and runs the actor
in this one. Running the same command again resumes both from run_dir. The robot (or its twin,
`embodied robot-sim`) and the operator's teleop node run on their own."""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import sys

ROLES = ("all", "actor", "learner", "init")


def _learner_main(cfg) -> None:
    import signal

    from embodied.robot_rl.learner_process import run_learner

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the actor ends the run and tells it

    run_learner(cfg)


def cmd_finetune_robot(args: argparse.Namespace) -> int:
    import torch

    from embodied.robot_rl.config import FinetuneConfigError, load_finetune_config
    from embodied.robot_rl.learner_process import prepare
    from embodied.run.stop import Stopped, command_line, no_empty_dirs
    from sims.vecenv import EnvError

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    try:
        cfg = load_finetune_config(args.config, args.overrides)
        with no_empty_dirs(cfg.run_dir):  # a failed start leaves no empty run directory
            if args.role in ("all", "init"):
                prepare(cfg)
            if args.role in ("all", "actor") and cfg.robot.success == "classifier":
                from embodied.robot_rl.reward import classifier_for_robot

                classifier_for_robot(cfg.reward_classifier, cfg.robot)  # a mismatch: one line, before anything runs
    except (FinetuneConfigError, EnvError, ValueError) as e:
        print(f"embodied finetune-robot: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.role == "init":
        print(json.dumps({"policy": f"{cfg.run_dir}/policy.safetensors"}))
        return 0
    if args.role == "learner":
        try:
            why = _run_learner(cfg)
        except TimeoutError as e:
            print(f"embodied finetune-robot: error: {e}", file=sys.stderr)
            return 1
        print(json.dumps({"learner": why}))
        return 0
    from embodied.robot_rl.actor import Actor

    proc = None
    if args.role == "all":
        proc = mp.get_context("spawn").Process(target=_learner_main, args=(cfg,), name="learner")
        proc.start()
    try:
        actor = Actor(cfg)
    except (EnvError, FileNotFoundError) as e:
        print(f"embodied finetune-robot: error: {str(e).splitlines()[0]}", file=sys.stderr)
        if proc is not None:
            proc.terminate()
        return 1
    if proc is not None:
        actor.learner_alive = proc.is_alive  # lockstep: wait for its first connection while it lives
    try:
        summary = actor.run()
    finally:
        actor.close()
        if proc is not None:
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
    print(json.dumps(summary))
    if summary["exit_code"] > 128:  # a signal: the episodes so far and the learner's last policy stay
        raise Stopped(summary["exit_code"] - 128, f"{summary['episodes']} episodes and policy version "
                      f"{summary['version']} in {cfg.run_dir}", command_line())
    if summary["exit_code"]:
        print(f"embodied finetune-robot: error: {summary['ended']}", file=sys.stderr)
    return summary["exit_code"]


def _run_learner(cfg) -> str:
    from embodied.robot_rl.learner_process import run_learner

    return run_learner(cfg)


def finetune_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="a finetune config: a path, or a name in configs/ (finetune_reach_sim)")
    p.add_argument("overrides", nargs="*", help="key=value overrides (actor.episodes=50)")
    p.add_argument("--role", default="all", choices=ROLES, help="which process to run (default: all)")
