"""Test helper: an in-memory demo dataset with the LeRobotDataset item layout, made by
running a task's scripted expert in the simulator; plus a test of that layout.

Items: "rgb_front" uint8 [H, W, 3] (and "rgb_<cam>" per extra camera), "state" float32 [9],
"instruction" str, "actions" float32 [K, 4] (the next K expert actions, the last one
repeated past the episode's end), "action_valid" bool [K]. `.stats` holds per-dimension
mean / std of state and actions.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pytest
import torch

from sims.registry import expert_for, make_env


class ExpertDemos(torch.utils.data.Dataset):
    def __init__(self, items: list[dict[str, Any]], stats: dict[str, dict[str, list[float]]]):
        self.items, self.stats = items, stats
        self.info = {"episodes": len({it["episode"] for it in items})}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {k: v for k, v in self.items[i].items() if k != "episode"}


def build_expert_demos(task: str, episodes: int, chunk_size: int, seed: int = 0, num_envs: int = 16,
                       image_size: int = 64, cameras: Sequence[str] = ("front",),
                       noise_std: float = 0.0,
                       state_fn: Callable[[dict[str, Any]], torch.Tensor] | None = None) -> ExpertDemos:
    """Run the expert on `episodes` seeded episodes (seed, seed + 1, ...); keep successful ones.

    With noise_std > 0 the executed action is the expert's plus Gaussian noise while the
    label stays the clean expert action (DART-style), so the data covers recoveries.
    state_fn (diagnostics only): obs -> the float [B, S'] stored as "state" instead of obs["state"].
    """
    expert = expert_for(task)
    rng = np.random.default_rng(seed)
    env = make_env(task, num_envs, obs_mode="rgb", image_size=image_size, cameras=tuple(cameras))
    items: list[dict[str, Any]] = []
    for start in range(seed, seed + episodes, num_envs):
        seeds = list(range(start, min(start + num_envs, seed + episodes)))
        seeds += [seeds[-1]] * (num_envs - len(seeds))
        obs, _ = env.reset(seed=seeds)
        steps: list[list[dict[str, Any]]] = [[] for _ in range(num_envs)]
        active, ok = np.ones(num_envs, bool), np.zeros(num_envs, bool)
        while active.any():
            clean = expert(obs["privileged"].numpy()).astype(np.float32)
            noisy = np.clip(clean + rng.normal(0.0, noise_std, clean.shape) * (noise_std > 0), -1, 1)
            state = obs["state"] if state_fn is None else state_fn(obs)
            for i in np.flatnonzero(active):
                steps[i].append({**{f"rgb_{c}": obs[f"rgb_{c}"][i].clone() for c in cameras},
                                 "state": state[i].clone(), "instruction": obs["instruction"][i],
                                 "action": torch.from_numpy(clean[i])})
            res = env.step(torch.from_numpy(noisy.astype(np.float32)))
            done = res.done.numpy()
            ok |= active & done & res.info["success"].numpy()
            active &= ~done
            obs = res.obs
        for i in range(len(set(seeds))):
            if ok[i]:
                items += _windows(steps[i], chunk_size, episode=seeds[i])
    env.close()
    states = torch.stack([it["state"] for it in items])
    acts = torch.stack([it["actions"][0] for it in items])
    stats = {"state": {"mean": states.mean(0).tolist(), "std": states.std(0).tolist()},
             "action": {"mean": acts.mean(0).tolist(), "std": acts.std(0).tolist()}}
    return ExpertDemos(items, stats)


def _windows(steps: list[dict[str, Any]], K: int, episode: int) -> list[dict[str, Any]]:
    actions = torch.stack([s["action"] for s in steps])  # [T, A]
    T = len(steps)
    out = []
    for t, s in enumerate(steps):
        idx = torch.arange(t, t + K).clamp(max=T - 1)
        item = {k: v for k, v in s.items() if k != "action"}
        item.update(actions=actions[idx], action_valid=torch.arange(t, t + K) < T, episode=episode)
        out.append(item)
    return out


def test_expert_demos_layout():
    ds = build_expert_demos("Reach", episodes=4, chunk_size=4, num_envs=4)
    assert len(ds) > 4 * 5
    it = ds[0]
    assert it["rgb_front"].dtype == torch.uint8 and it["rgb_front"].shape == (64, 64, 3)
    assert it["state"].shape == (9,) and it["actions"].shape == (4, 4)
    assert it["action_valid"].dtype == torch.bool and isinstance(it["instruction"], str)
    last = ds[len(ds) - 1]  # the final step of an episode: only its first action is real
    assert last["action_valid"].tolist() == [True, False, False, False]
    assert torch.equal(last["actions"][1], last["actions"][0])
    assert len(ds.stats["state"]["mean"]) == 9 and len(ds.stats["action"]["std"]) == 4


def test_sft_time_budget_stops_training_and_ends_the_cosine(tmp_path):
    from embodied.imitation.sft import SFTConfig, build_policy, lr_lambda, train_sft

    ds = build_expert_demos("Reach", episodes=2, chunk_size=4, num_envs=2, image_size=32)
    cfg = SFTConfig(steps=10**6, max_minutes=0.05, warmup_steps=2, eval_every=0, save_every=0, image_size=32,
                    batch_size=4, run_dir=str(tmp_path))
    summary = train_sft(build_policy(cfg, ds.stats), ds, cfg, log=lambda _: None)
    assert 3 <= summary["steps"] < 10**6  # stopped by the clock, after some steps
    f = lr_lambda(cfg, lambda: 1.0)
    assert f(5) == pytest.approx(cfg.min_lr_ratio)  # the clock's end is the cosine's end
    assert lr_lambda(cfg, lambda: 0.0)(2) == pytest.approx(1.0)
    from embodied.config import ConfigError
    from embodied.imitation.sft import load_sft_config

    src = tmp_path / "sft.yaml"
    src.write_text("policy: flow_vla\n")
    for bad, match in (("max_minutes=-1", "max_minutes: -1.0 must be >= 0"),
                       ("label_sigma=2", "label_sigma applies to ar_vla only")):
        with pytest.raises(ConfigError, match=match):
            load_sft_config(src, [bad])
    with pytest.raises(ConfigError, match="batch_size: 4096 is larger than the dataset"):
        train_sft(build_policy(cfg, ds.stats), ds, SFTConfig(batch_size=4096, run_dir=str(tmp_path)))


def test_sft_evaluation_reports_each_task(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from embodied.imitation.sft import SFTConfig, build_policy, train_sft

    task = "multi:Reach+ReachColor"
    ds = build_expert_demos(task, episodes=2, chunk_size=4, num_envs=2, image_size=32)
    cfg = SFTConfig(task=task, steps=2, warmup_steps=1, eval_every=2, eval_episodes=2, save_every=0, image_size=32,
                    batch_size=4, run_dir=str(tmp_path))
    env = make_env(task, 2, obs_mode="rgb", image_size=(32, 32), cameras=("front",), max_episode_steps=5)
    lines: list[str] = []
    try:
        summary = train_sft(build_policy(cfg, ds.stats), ds, cfg, env, log=lines.append)
    finally:
        env.close()
    assert [(step, set(per)) for step, per in summary["eval_per_task"]] == [(2, {"Reach", "ReachColor"})]
    assert any(line.startswith("  per task: Reach") for line in lines)
    tags = EventAccumulator(str(tmp_path / "tb")).Reload().Tags()["scalars"]
    assert {"eval/success_rate", "eval/success/Reach", "eval/success/ReachColor"} <= set(tags)
