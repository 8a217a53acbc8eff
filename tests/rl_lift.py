"""Shared pieces of the suite's small RL learning checks (tests/rl/test_rl_lift_*.py), also run
over several seeds by benchmarks/bench_learning_tests.py to set their thresholds.

Each check is a pipeline config, configs/lift/lift_*.yaml: expert demos, a short SFT of a tiny
VLA, then RL, evaluated on fixed held-out seeds (deterministic policy) before the first
update and every few iterations. The demos and the SFT checkpoint depend only on the
collect and sft sections and the seed, so checks that share them (the flow recipes) build
them once per test session (conftest.build_once; shared between pytest-xdist workers).

A lift is the mean of the last two evaluations minus the SFT policy's success.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import torch

from embodied.data.collect import collect_demos
from embodied.data.lerobot import LeRobotDataset
from embodied.pipeline import load_pipeline
from embodied.imitation.sft import build_policy, train_sft
from embodied.rl.train import train

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _build_sft(collect, sft, seed: int) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        data = path / "data"
        collect_demos(collect.task, collect.episodes, data, seed=100_000 * (seed + 1), obs_mode="rgb",
                      image_size=collect.image_size, cameras=collect.cameras, noise=collect.noise,
                      expert_speed=collect.expert_speed)
        sft.dataset, sft.run_dir, sft.seed, sft.eval_every = str(data), str(path / "sft"), seed, 0
        dataset = LeRobotDataset(data, chunk_size=sft.chunk_size)
        torch.manual_seed(seed)  # the initial weights too
        train_sft(build_policy(sft, dataset.stats), dataset, sft, None, log=lambda _: None)
    return build


def sparse_eval(every: int) -> list[str]:
    """The override that evaluates every `every` iterations and at the last. A test picks the
    multiple of its config's eval_every at which the config's last two evaluations fall, so its
    lift is the benchmark's (evaluation touches neither the training envs nor training's random
    stream) while the other evaluations stop costing suite time."""
    return [f"rl.train.eval_every={every}"]


def lift(name: str, seed: int, run_dir: Path, build_once: Callable | None = None,
         overrides: list[str] = ()) -> dict:
    """Run configs/lift/<name>.yaml with `seed` (demos, SFT and RL): {"before", "curve", "late",
    "lift"}. build_once(key, build) -> Path shares demos and SFT between checks (default: build
    them under run_dir)."""
    _, collect, sft, rl = load_pipeline(CONFIGS / "lift" / f"{name}.yaml", list(overrides))
    key = hashlib.sha1(json.dumps([vars(collect), vars(sft), seed], sort_keys=True, default=str).encode()).hexdigest()
    build = _build_sft(collect, sft, seed)
    if build_once is None:
        base = run_dir / "sft_shared"
        if not (base / "sft" / "final" / "config.json").is_file():
            build(base)
    else:
        base = build_once(f"lift_sft_{key[:12]}", build)
    rl.policy.init_from = str(base / "sft" / "final")
    rl.train.run_dir, rl.train.seed, rl.train.progress = str(run_dir / "rl"), seed, False
    summary = train(rl)
    curve = [rate for _, rate in summary["eval_curve"]]
    late = sum(curve[-2:]) / 2
    out = {"before": summary["success_before"], "curve": curve, "late": late,
           "lift": late - summary["success_before"]}
    per = summary.get("eval_per_task")  # a multi-task run: [(env_steps, {task: rate})]
    if per:
        out["per_task"] = {t: {"before": per[0][1][t], "late": sum(p[t] for _, p in per[-2:]) / len(per[-2:])}
                           for t in per[0][1]}
        for r in out["per_task"].values():
            r["lift"] = r["late"] - r["before"]
    print(f"{name} seed {seed}: success {out['before']:.2f} after SFT; curve {curve} (last two {late:.2f}, "
          f"lift {out['lift']:+.2f})")
    return out
