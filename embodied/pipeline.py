"""The full pipeline (`embodied pipeline CONFIG`): collect expert demonstrations, SFT a VLA on
a few of them, finetune it with RL, evaluate, and report success before and after RL with
a video and a PNG of the success curve.

A pipeline YAML has four sections:
    run_dir: runs/demo
    collect: {task, episodes, seed, image_size, cameras, noise, expert_speed}   (embodied.data.collect)
    sft:     fields of embodied.imitation.sft.SFTConfig
    rl:      an ExperimentConfig (env / policy / ppo / grpo / train sections)
The pipeline owns the paths that connect the stages: the dataset is written to
<run_dir>/data, SFT runs in <run_dir>/sft, RL starts from <run_dir>/sft/final and runs in
<run_dir>/rl; setting sft.dataset, sft.run_dir, rl.policy.init_from or rl.train.run_dir
is an error. SFT's periodic evaluation is off: the RL stage's own evaluation before its
first update (same seeds as after) is the "before RL" number.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from embodied.config import config_from_dict
from embodied.config_loader import ConfigError, find_config, from_dict, load_mapping


@dataclass
class CollectStage:
    task: str = "PushCube"
    episodes: int = 50
    seed: int = 0
    image_size: int = 64
    cameras: list[str] = field(default_factory=lambda: ["front"])
    noise: float = 0.0  # DART noise on the executed expert actions
    expert_speed: float = 1.0  # < 1: a slower demonstrator (its motion scaled; embodied.data.collect)


OWNED = {"sft": ("dataset", "run_dir"), "rl.policy": ("init_from",), "rl.train": ("run_dir",)}


def load_pipeline(path: str | Path, overrides: list[str] = ()) -> tuple[Path, CollectStage, Any, Any]:
    """(run_dir, collect, SFTConfig, ExperimentConfig) from a pipeline YAML; one-line errors."""
    from embodied.imitation.sft import SFTConfig

    raw = load_mapping(path, overrides, example="rl.train.total_steps=20000")
    unknown = sorted(set(raw) - {"run_dir", "collect", "sft", "rl"})
    if unknown:
        raise ConfigError(f"unknown pipeline section '{unknown[0]}'; allowed: run_dir, collect, sft, rl")
    for where, keys in OWNED.items():
        node = raw
        for part in where.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        for key in keys:
            if isinstance(node, dict) and key in node:
                raise ConfigError(f"{where}.{key}: set by the pipeline from run_dir; remove it")
    run_dir = Path(raw.get("run_dir", "runs/pipeline"))
    collect = from_dict(CollectStage, raw.get("collect", {}), "collect.")
    sft_raw = {**raw.get("sft", {}), "dataset": str(run_dir / "data"), "run_dir": str(run_dir / "sft"),
               "task": collect.task, "cameras": collect.cameras, "image_size": collect.image_size}
    sft = from_dict(SFTConfig, sft_raw, "sft.")
    rl_raw = raw.get("rl", {})
    rl_raw.setdefault("policy", {})["init_from"] = str(run_dir / "sft" / "final")
    rl_raw.setdefault("train", {})["run_dir"] = str(run_dir / "rl")
    rl = config_from_dict(rl_raw)
    if rl.env.task != collect.task:
        raise ConfigError(f"rl.env.task: {rl.env.task!r} differs from collect.task {collect.task!r}")
    return run_dir, collect, sft, rl


def plot_success(curve: list[tuple[int, float]], sft_success: float, out: Path, title: str) -> Path:
    """PNG of eval success against RL env steps (step 0: the SFT policy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, rates = zip(*curve)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(steps, rates, marker="o", label="RL (deterministic eval)")
    ax.axhline(sft_success, color="gray", ls="--", label=f"SFT only ({sft_success:.2f})")
    ax.set(xlabel="RL env steps", ylabel="success rate", ylim=(-0.02, 1.02), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def run_pipeline(run_dir: Path, collect: CollectStage, sft_cfg: Any, rl_cfg: Any) -> dict[str, Any]:
    from embodied.data.collect import collect_demos
    from embodied.data.lerobot import LeRobotDataset
    from embodied.imitation.sft import build_policy, train_sft
    from embodied.rl.train import train

    t0 = time.time()
    run_dir.mkdir(parents=True, exist_ok=True)
    data = run_dir / "data"
    if not (data / "meta" / "info.json").is_file():
        print(f"[1/3] collecting {collect.episodes} expert episodes of {collect.task} -> {data}", flush=True)
        collect_demos(collect.task, collect.episodes, data, seed=collect.seed, obs_mode="rgb",
                      image_size=collect.image_size, cameras=collect.cameras, noise=collect.noise,
                      expert_speed=collect.expert_speed)
    else:
        print(f"[1/3] reusing the dataset in {data}", flush=True)
    print(f"[2/3] SFT of a {sft_cfg.preset} {sft_cfg.policy} for {sft_cfg.steps} steps", flush=True)
    dataset = LeRobotDataset(data, chunk_size=sft_cfg.chunk_size, cameras=sft_cfg.cameras)
    sft_cfg.eval_every = 0
    torch.manual_seed(sft_cfg.seed)  # seeds the initial weights too
    sft_summary = train_sft(build_policy(sft_cfg, dataset.stats), dataset, sft_cfg, None,
                            log=lambda m: print(m, flush=True))
    print(f"[3/3] RL: {rl_cfg.train.algorithm} for {rl_cfg.train.total_steps} env steps", flush=True)
    rl = train(rl_cfg)
    png = plot_success(rl["eval_curve"], rl["success_before"], run_dir / "success_curve.png",
                       f"{collect.task}: SFT on {collect.episodes} demos, then {rl_cfg.train.algorithm.upper()}")
    summary = {"success_sft": rl["success_before"], "success_rl": rl.get("success_after"),
               "eval_episodes": rl_cfg.train.eval_episodes, "sft_checkpoint": sft_summary["final"],
               "rl_checkpoint": rl.get("checkpoint"), "video": rl.get("video"), "plot": str(png),
               "tensorboard": [str(Path(sft_cfg.run_dir) / "tb"), rl["tensorboard"]],
               "eval_curve": rl["eval_curve"], "wall_seconds": round(time.time() - t0, 1)}
    if "eval_per_task" in rl:  # a multi-task run: each task's success at every evaluation
        summary["eval_per_task"] = rl["eval_per_task"]
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def cmd_pipeline(args: argparse.Namespace) -> int:
    summary = run_pipeline(*load_pipeline(find_config(args.config), args.overrides))
    print(f"success after SFT (before RL): {summary['success_sft']:.2f}")
    print(f"success after RL:              {summary['success_rl']:.2f}   "
          f"({summary['eval_episodes']} fixed seeds, deterministic)")
    for key in ("video", "plot", "rl_checkpoint"):
        print(f"{key + ':':15s}{summary[key]}")
    print(f"tensorboard:   {' '.join(summary['tensorboard'])}")
    print(f"wall time:     {summary['wall_seconds'] / 60:.1f} min")
    return 0
