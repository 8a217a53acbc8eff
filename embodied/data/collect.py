"""Scripted-expert demonstrations into an episode dataset (`embodied collect`).

DART-style noise (`noise` > 0): at every step the env executes the expert's action plus
Gaussian noise N(0, noise^2) per dimension, clipped to the action bounds [-1, 1], while the
dataset records the clean expert action (computed from the state the noise led to) as the
label. The demonstrations then cover small deviations from the expert's path and show how
to recover from them. Rewards and success are those of the executed (noisy) actions.

Two action columns: `action` is the clean expert label, which SFT reads; `executed_action`
(complementary_info.executed_action) is what the env executed, which the world model reads
(the dynamics of a step are those of the executed action). Without noise they are equal.

`expert_speed` < 1 scales the expert's motion (not its gripper command): a slower
demonstrator. On Reach its imitation is steadier (few-shot SFT at 0.2x speed started at
0.30-0.56 where the full-speed expert's started at 0.20-0.27; docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from tqdm import tqdm

from embodied.data.dataset import EpisodeWriter
from embodied.data.layout import DatasetError, read_episode_rows, read_info
from embodied.run.stop import stoppable
from sims.registry import expert_for, family_of, make_env, task_cycle
from sims.vecenv import EnvError



def _check(episodes: int, obs_mode: str, cameras: Sequence[str] | None, noise: float,
           task: str = "") -> tuple[str, ...]:
    """Validated camera tuple; EnvError (one line, naming the option) on bad input. A family has
    its own camera names and default (LIBERO: both of agentview, wrist, as LIBERO checkpoints
    read them; MetaWorld: corner2; the MuJoCo tasks: front)."""
    if not isinstance(episodes, int) or episodes <= 0:
        raise EnvError(f"--episodes must be a positive integer, got {episodes}")
    if not isinstance(noise, (int, float)) or not math.isfinite(noise) or noise < 0:
        raise EnvError(f"--noise must be a finite standard deviation >= 0, got {noise}")
    family = family_of(task)  # each family's own camera names (sims/<family>/family.py)
    allowed = family.cameras
    if cameras is None:
        return family.default_cameras
    cams = tuple(cameras)
    bad = [c for c in cams if c not in allowed]
    if not cams or bad or len(set(cams)) != len(cams):
        raise EnvError(f"--cameras: expected distinct names from {', '.join(allowed)}, got {','.join(cams)!r}")
    if obs_mode != "rgb":
        raise EnvError("--cameras records images: use it with --obs-mode rgb")
    return cams


def collect_demos(task: str, episodes: int, out: str | Path, seed: int = 0, obs_mode: str = "state",
                  image_size: int = 64, num_envs: int = 0, only_success: bool = True,
                  cameras: Sequence[str] | None = None, noise: float = 0.0,
                  expert_speed: float = 1.0, balanced: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run the task's expert until `episodes` episodes are written to `out`.

    Env k of batch j starts from seed + j * num_envs + k, so a dataset is
    reproducible. num_envs 0: min(episodes, 32), and at least one env per task where rows hold
    fixed tasks (sims.registry.task_cycle: 50 for metaworld:MT50). With only_success, failed
    expert episodes are skipped.
    cameras: with obs_mode "rgb", the cameras recorded (default ("front",)); one mp4 per
    camera and episode (LIBERO tasks: "agentview" and "wrist", both by default). noise: std of
    the DART noise added to the executed actions (`action` stays the expert's,
    `executed_action` is the noisy one; see the module doc); drawn from a generator seeded
    with `seed`. balanced: where rows hold fixed tasks (MetaWorld's MT10 and MT50), each task
    gets episodes // n of the episodes (the first episodes % n tasks one more); a task that has
    its share goes on running and its episodes are dropped. Without it a task's share follows
    its envs and episode lengths (MT10, 500 demos on 32 envs: reach 106, peg-insert-side 25).
    """
    cams = _check(episodes, obs_mode, cameras, noise, task)
    if not isinstance(expert_speed, (int, float)) or not 0.0 < expert_speed <= 1.0:
        raise EnvError(f"expert_speed must be in (0, 1], got {expert_speed}")
    _check_seed(out, seed)
    n_tasks = task_cycle(task)
    if balanced and n_tasks < 2:
        raise EnvError(f"--balanced: {task} runs one task on every row; allowed: a benchmark whose rows hold "
                       f"fixed tasks (metaworld:MT10, metaworld:MT50)")
    expert = expert_for(task)
    rng = np.random.default_rng(seed)
    B = num_envs or max(min(episodes, 32), n_tasks)  # metaworld:MT50: 50, one env per task
    env = make_env(task, B, obs_mode=obs_mode, image_size=(image_size, image_size), cameras=cams)
    spec = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(env.spec).items()}
    spec["expert_noise_std"] = float(noise)
    spec["expert_speed"] = float(expert_speed)
    writer = EpisodeWriter(out, task, spec)
    next_seed = seed
    obs, _ = env.reset(seed=list(range(next_seed, next_seed + B)))
    # Experts that plan per episode (the mplib expert) have reset(env_ids, privileged [n, P]).
    expert_reset = getattr(expert, "reset", None)
    if expert_reset is not None:
        expert_reset(np.arange(B), obs["privileged"].numpy())
    seeds = np.arange(next_seed, next_seed + B)
    next_seed += B
    quota = _shares(obs["instruction"], episodes, writer.episodes) if balanced else None
    bar = tqdm(total=episodes, unit="episode", dynamic_ncols=True, disable=not progress, desc=f"collect {task}")
    with stoppable("this step") as stop:
        try:
            written, attempted, succeeded = _run(env, expert, expert_reset, writer, bar, stop, episodes, B, obs,
                                                 seeds, next_seed, rng, noise, expert_speed, only_success, quota)
        finally:
            bar.close()
            env.close()
            if hasattr(expert, "close"):
                expert.close()
    return {"out": str(out), "task": task, "episodes": written, "attempted": attempted,
            "cameras": list(cams) if obs_mode == "rgb" else [], "noise": float(noise),
            "expert_success_rate": succeeded / max(attempted, 1) if only_success else None}


def _check_seed(out: str | Path, seed: int) -> None:
    """DatasetError (one line) unless `seed` starts past every seed of the episodes `out` already
    holds: a collection appended from the same seeds would replay those episodes (the same
    layouts and, seeded by the same `seed`, the same DART noise)."""
    if not (Path(out) / "meta" / "info.json").is_file():
        return
    held = [r["seed"] for r in read_episode_rows(Path(out), read_info(out)["total_episodes"]) if r.get("seed", -1) >= 0]
    if held and max(held) >= seed:
        raise DatasetError(f"--seed: {seed}, but {out} already holds episodes of seeds up to {max(held)}, which "
                           f"the same seeds would repeat; allowed: --seed {max(held) + 1} or more to add to it")


def _shares(row_tasks: Sequence[str], episodes: int, written: list[dict]) -> dict[str, Any]:
    """The balanced quota: {"rows": each row's task, "left": {task: episodes still wanted}}. The
    episodes already in the dataset (a resumed collection) count: the shares split their total
    and `episodes` more."""
    names = list(dict.fromkeys(row_tasks))
    have = Counter(r["tasks"][0] for r in written if r.get("tasks"))
    total = episodes + sum(have[t] for t in names)
    left = {t: max(total // len(names) + (k < total % len(names)) - have[t], 0) for k, t in enumerate(names)}
    return {"rows": list(row_tasks), "left": left}


def _run(env: Any, expert: Any, expert_reset: Any, writer: EpisodeWriter, bar: Any, stop: Any, episodes: int,
         B: int, obs: dict, seeds: np.ndarray, next_seed: int, rng: np.random.Generator, noise: float,
         expert_speed: float, only_success: bool, quota: dict | None = None) -> tuple[int, int, int]:
    """collect_demos' loop: (episodes written, attempted, succeeded); on a signal, Stopped after the last
    whole episode (each one is committed to the dataset as it is written). quota: {"rows": each
    row's task, "left": episodes still wanted per task} (balanced), counted down here."""
    written, attempted, succeeded = 0, 0, 0
    buffers: list[list[dict[str, torch.Tensor]]] = [[] for _ in range(B)]
    while written < episodes:
        stop.check(f"{written} of {episodes} episodes in {writer.root} (each committed as written)",
                   written=written, next_seed=next_seed)
        clean = expert(obs["privileged"].numpy()).astype(np.float32)  # [B, A], the label
        if expert_speed != 1.0:  # a slower demonstrator: motion scaled, the gripper command kept
            clean[:, :-1] *= expert_speed
        action = torch.from_numpy(clean)
        executed = action
        if noise > 0:
            noisy = np.clip(clean + rng.normal(0.0, noise, clean.shape), -1.0, 1.0)
            executed = torch.from_numpy(noisy.astype(np.float32))
        res = env.step(executed)
        for i in range(B):
            buffers[i].append({**{f"obs.{k}": v[i] for k, v in obs.items() if torch.is_tensor(v)},
                               "action": action[i], "executed_action": executed[i], "reward": res.reward[i],
                               "success": res.info["success"][i]})
        for i in res.done.nonzero().flatten().tolist():
            steps, buffers[i] = buffers[i], []
            attempted += 1
            ok = bool(res.info["success"][i])
            succeeded += ok
            wanted = quota is None or quota["left"][quota["rows"][i]] > 0
            if written < episodes and wanted and (ok or not only_success):
                if quota is not None:
                    quota["left"][quota["rows"][i]] -= 1
                episode = {k: torch.stack([s[k] for s in steps]) for k in steps[0]}
                writer.add(episode, obs["instruction"][i], int(seeds[i]))
                written += 1
                bar.update(1)
                bar.set_postfix(expert_success=f"{succeeded / attempted:.2f}", refresh=False)
            # The env auto-reset from its own stream; re-seed it so every episode has a known seed.
            seeds[i] = next_seed
            next_seed += 1
        if res.done.any():
            ids = res.done.nonzero().flatten()
            fresh, _ = env.reset(seed=seeds[ids.numpy()].tolist(), env_ids=ids)
            res.obs = fresh
            if expert_reset is not None:
                expert_reset(ids.numpy(), fresh["privileged"][ids].numpy())
        obs = res.obs
    return written, attempted, succeeded
