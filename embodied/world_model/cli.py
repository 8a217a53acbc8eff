"""`embodied world-model train CONFIG key=value...`, `embodied world-model eval CHECKPOINT` and
`embodied world-model fit-noise CHECKPOINT --out DIR`.
The parser imports nothing heavy (tests/test_cli_startup.py); the handlers import torch."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def world_model_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="wm_command", required=True)
    t = sub.add_parser("train", help="train a world model on a LeRobot v3 dataset (docs/world_model.md)")
    t.add_argument("config", help="YAML of WorldModelConfig fields (path or name in configs/), "
                                  "e.g. world_model/pushcube")
    t.add_argument("overrides", nargs="*", help="key=value overrides, e.g. dataset=data/push epochs=50")
    t.add_argument("--out", default=None, help="checkpoint folder (default runs/world_model/<task>)")
    t.set_defaults(fn=cmd_world_model_train)
    e = sub.add_parser("eval", help="quality report: k-step error vs copy-last, success-head AUROC/F1/FPR")
    e.add_argument("checkpoint", help="a folder written by `embodied world-model train`")
    e.add_argument("--dataset", default=None, help="evaluate on all episodes of this dataset "
                                                   "(default: the episodes training held out)")
    e.add_argument("--ks", default="1,8,32", help="comma-separated k of the k-step errors")
    e.set_defaults(fn=cmd_world_model_eval)
    n = sub.add_parser("fit-noise", help="give a trained model a learned noise head (for env.model_noise), its "
                                         "dynamics and heads unchanged (embodied/world_model/noise.py)")
    n.add_argument("checkpoint", help="a folder written by `embodied world-model train`")
    n.add_argument("--out", required=True, help="the new checkpoint's folder (not the input's)")
    n.set_defaults(fn=cmd_world_model_fit_noise)


def load_config(path: Path, overrides: list[str]):
    """WorldModelConfig from YAML plus key=value overrides (embodied/config_loader.py); EnvError
    (one line) on bad input."""
    from dataclasses import fields

    from embodied.config_loader import ConfigError, load_mapping
    from embodied.run.device import DeviceError, check_device, flat_device_key
    from sims.vecenv import EnvError
    from sims.world_model.model import WorldModelConfig

    try:
        raw = flat_device_key(load_mapping(path, overrides, what="WorldModelConfig fields", example="epochs=50"))
    except ConfigError as e:
        raise EnvError(f"config: {e}") from None
    known = {f.name for f in fields(WorldModelConfig)}
    bad = sorted(set(raw) - known)
    if bad:
        raise EnvError(f"world_model.{bad[0]}: unknown field; allowed: {', '.join(sorted(known))}")
    try:
        check_device(raw.get("device", "auto"), "world_model.device")
    except DeviceError as e:
        raise EnvError(str(e)) from None
    if "dataset" in raw and raw["dataset"] is not None:
        raw["dataset"] = str(raw["dataset"])
    return WorldModelConfig(**raw)


def cmd_world_model_train(args: argparse.Namespace) -> int:
    from embodied.config_loader import find_config
    from sims.world_model.checkpoint import save_world_model
    from embodied.world_model.quality import report
    from embodied.world_model.train import heldout_episodes, train_world_model

    from embodied.run.stop import Stopped, command_line, no_empty_dirs, stoppable
    from embodied.world_model.quality import quality_gate, verdict

    cfg = load_config(find_config(args.config), args.overrides)
    out = Path(args.out or Path("runs") / "world_model" / cfg.task)
    with no_empty_dirs(out), stoppable("this epoch") as stop:
        model, resets, summary = train_world_model(cfg, stop=lambda: bool(stop))
        if model is None:  # a signal in the first epoch: nothing worth keeping
            stop.check("nothing (stopped in the first epoch)", command_line())
        out = save_world_model(out, model, resets)
        rep = report(model, heldout_episodes(model.cfg))
        passed, why = quality_gate(rep)
        (out / "report.json").write_text(json.dumps({"train": summary, "eval": rep,
                                                     "gate": {"passed": passed, "why": why}}, indent=1))
    if stop:
        left = cfg.epochs - summary["epochs"]
        raise Stopped(stop.signum, f"the model of its best epoch of {summary['epochs']} in {out}",
                      command_line(drop=("init_from=", "epochs="), add=[f"init_from={out}", f"epochs={left}"]))
    print(json.dumps({"checkpoint": str(out), "epochs": summary["epochs"], "seconds": round(summary["seconds"], 1),
                      "best_heldout_error": summary["best_heldout_error"], "eval": rep}, indent=1))
    print(verdict(rep))
    print(f"use it as a task: env.task=wm:{out}" if passed else
          f"as a task (env.task=wm:{out}) it is refused unless env.allow_failed_model=true: {why}")
    return 0


def cmd_world_model_eval(args: argparse.Namespace) -> int:
    from sims.vecenv import EnvError
    from sims.world_model.checkpoint import load_world_model
    from embodied.world_model.windows import load_episodes
    from embodied.world_model.quality import report, verdict
    from embodied.world_model.train import heldout_episodes

    try:
        ks = [int(k) for k in args.ks.split(",")]
    except ValueError:
        raise EnvError(f"--ks: expected comma-separated positive integers, got {args.ks!r}") from None
    if not ks or min(ks) < 1:
        raise EnvError(f"--ks: expected comma-separated positive integers, got {args.ks!r}")
    model, _ = load_world_model(args.checkpoint)
    episodes = (load_episodes(args.dataset, model.cfg.task, model.cfg.cameras)[0] if args.dataset
                else heldout_episodes(model.cfg))
    rep = report(model, episodes, ks)
    print(json.dumps({"checkpoint": args.checkpoint, "task": model.cfg.task,
                      "dataset": args.dataset or f"{model.cfg.dataset} (held-out episodes)", **rep}, indent=1))
    print(verdict(rep), file=sys.stderr)  # stdout stays one JSON document
    return 0


def cmd_world_model_fit_noise(args: argparse.Namespace) -> int:
    """The same noise head that training with noise_head=true fits (same held-out split and seed)."""
    from dataclasses import replace

    from sims.vecenv import EnvError
    from sims.world_model.checkpoint import load_world_model, save_world_model
    from sims.world_model.model import WorldModel
    from embodied.world_model.noise import fit_noise_head
    from embodied.world_model.train import heldout_episodes

    if Path(args.out).resolve() == Path(args.checkpoint).resolve():
        raise EnvError(f"--out: {args.out} is the input checkpoint; allowed: another folder (the input stays as it is)")
    prev, resets = load_world_model(args.checkpoint)
    if len(prev.cfg.residual_std) != prev.cfg.latent:
        raise EnvError(f"checkpoint: {args.checkpoint} has no residual_std (trained before it existed); "
                       "train it again")
    import torch

    torch.manual_seed(prev.cfg.seed)  # as training seeds the model it builds: the same initial noise head
    model = WorldModel(replace(prev.cfg, noise_head=True))
    state = model.state_dict()
    state.update({k: v for k, v in prev.state_dict().items() if not k.startswith("noise_net.")})
    model.load_state_dict(state)
    model.eval()
    fit = fit_noise_head(model, heldout_episodes(model.cfg), model.cfg.seed, log=lambda m: print(m, file=sys.stderr))
    out = save_world_model(args.out, model, resets)
    print(json.dumps({"checkpoint": str(out), "noise_head": fit}, indent=1))
    return 0
