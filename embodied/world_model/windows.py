"""LeRobot v3 episodes (as `embodied collect` writes them) into k-step training windows.

An episode of L frames holds obs_t, the action a_t taken there, and the reward r_t and
success s_t of that step; obs_{t+1} is the next frame, and the step after the last frame
has no recorded next observation (its state loss is masked, its heads are trained).

The action of a step is the one the env executed: the `executed_action` column where the
dataset has it (`embodied collect` writes it; under DART noise `action` is the expert's clean
label, not what moved the env), else `action`. A dataset recorded with DART noise but
without `executed_action` (written before that column existed) is refused.

With cameras, every episode also holds its frames, the cameras stacked along channels
(uint8 [L, 3C, H, W], sims/world_model/vision.py); a dataset without one of the cameras, or
with another frame size than the others, is refused. Windows then index the frames instead of
copying them: `frames(episodes)` is the flat tensor their "frame" column points into.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sims.vecenv import EnvError

NEEDED = {"obs.privileged": "observation.environment_state", "action": "action", "reward": "next.reward",
          "success": "next.success"}


@dataclass
class Episode:
    x: torch.Tensor  # float32 [L, P] privileged vectors
    a: torch.Tensor  # float32 [L, A]
    r: torch.Tensor  # float32 [L]
    s: torch.Tensor  # float32 [L] success of each step
    d: torch.Tensor  # float32 [L] the episode ended (terminated) at this step
    instruction: str
    img: torch.Tensor | None = None  # uint8 [L, 3C, H, W] camera frames (models with cameras)


def load_episodes(root: str | Path, task: str, cameras: list[str] | tuple[str, ...] = ()) -> tuple[list[Episode], dict]:
    """The dataset's episodes and its env spec; EnvError (one line) for a missing or empty
    dataset, another task's dataset, or a dataset without the needed columns or `cameras`.
    `root` may name several datasets, comma-separated (e.g. expert demos and policy rollouts):
    their episodes in that order, and the first one's spec (all must share the horizon and,
    with cameras, the frame size)."""
    roots = [r.strip() for r in str(root).split(",") if r.strip()] if isinstance(root, str) else [root]
    if len(roots) > 1:
        parts = [_load_one(r, task, cameras) for r in roots]
        horizons = {int(spec.get("max_episode_steps", 0)) for _, spec in parts}
        if len(horizons) > 1:
            raise EnvError(f"dataset: {root} mixes episode horizons {sorted(horizons)}; use datasets of one task setup")
        sizes = {tuple(eps[0].img.shape[2:]) for eps, _ in parts if eps[0].img is not None}
        if len(sizes) > 1:
            raise EnvError(f"dataset: {root} mixes frame sizes {sorted(sizes)}; record all at one --image-size")
        return [e for eps, _ in parts for e in eps], parts[0][1]
    return _load_one(roots[0] if roots else "", task, cameras)


def _check_cameras(root: Path, meta: dict, cameras: list[str] | tuple[str, ...]) -> None:
    from embodied.data.layout import VIDEO_PREFIX

    have = sorted(k[len(VIDEO_PREFIX):] for k in meta["features"] if k.startswith(VIDEO_PREFIX))
    for cam in cameras:
        if cam not in have:
            raise EnvError(f"dataset: {root} has no camera {cam!r} ({VIDEO_PREFIX}{cam}); it records "
                           f"{', '.join(have) if have else 'no cameras'}; record it with `embodied collect "
                           f"--obs-mode rgb --cameras {','.join(cameras)}` or set cameras=[{','.join(have)}]")


def _load_one(root: str | Path, task: str, cameras: list[str] | tuple[str, ...] = ()) -> tuple[list[Episode], dict]:
    from embodied.data.read import read_episodes, read_meta

    root = Path(root)
    if not (root / "meta" / "info.json").is_file():
        raise EnvError(f"dataset: {root} is not a LeRobot v3 dataset (no meta/info.json)")
    meta = read_meta(root)
    if meta["total_episodes"] == 0:
        raise EnvError(f"dataset: {root} holds no episodes; collect some with `embodied collect`")
    emb = meta.get("embodied", {})
    if emb.get("task") not in (None, task):
        raise EnvError(f"dataset: {root} was recorded on task {emb.get('task')!r}, the config says {task!r}")
    _check_cameras(root, meta, cameras)
    spec = emb.get("spec", {})
    horizon = int(spec.get("max_episode_steps", 0))
    noisy = float(spec.get("expert_noise_std", 0.0) or 0.0) > 0
    episodes = []
    for ep in read_episodes(root):
        missing = [k for k in NEEDED if k not in ep]
        if missing:
            raise EnvError(f"dataset: {root} has no {NEEDED[missing[0]]!r} column ({missing[0]}); "
                           f"a world model needs {', '.join(NEEDED.values())}")
        if noisy and "executed_action" not in ep:
            raise EnvError(f"dataset: {root} was collected with DART noise but has no 'executed_action' column, "
                           "so its actions are not the executed ones; collect it again")
        x = ep["obs.privileged"].float()
        L = len(x)
        s = ep["success"].float().reshape(L)
        d = torch.zeros(L)
        if bool(s[-1]) or (horizon and L < horizon):
            d[-1] = 1.0
        a = ep.get("executed_action", ep["action"]).float()
        img = None
        if cameras:
            from sims.world_model.vision import stack_cameras

            img = stack_cameras({c: ep[f"obs.rgb_{c}"] for c in cameras}, list(cameras))
            if len(img) != L:
                raise EnvError(f"dataset: {root} holds {len(img)} frames of camera {cameras[0]!r} for an "
                               f"episode of {L} steps")
            if episodes and episodes[0].img is not None and img.shape[1:] != episodes[0].img.shape[1:]:
                raise EnvError(f"dataset: {root} mixes frame sizes {list(episodes[0].img.shape[2:])} and "
                               f"{list(img.shape[2:])}")
        episodes.append(Episode(x, a, ep["reward"].float().reshape(L), s, d,
                                str(ep.get("instruction", "")), img))
    return episodes, spec


def split(episodes: list[Episode], holdout: float, seed: int) -> tuple[list[Episode], list[Episode]]:
    """(train, held-out) by episode; at least one of each when there are two or more."""
    order = np.random.default_rng(seed).permutation(len(episodes))
    n_hold = min(max(int(round(holdout * len(episodes))), 1), len(episodes) - 1) if len(episodes) > 1 else 0
    return [episodes[i] for i in order[n_hold:]], [episodes[i] for i in order[:n_hold]]


def frames(episodes: list[Episode]) -> torch.Tensor | None:
    """The episodes' frames, concatenated: uint8 [F, 3C, H, W] (None without cameras); the
    "frame" column of windows() indexes it."""
    return torch.cat([ep.img for ep in episodes]) if episodes and episodes[0].img is not None else None


def windows(episodes: list[Episode], k: int) -> dict[str, torch.Tensor]:
    """Every start t of every episode: x [N, k+1, P], a [N, k, A], r/s/d [N, k], masks
    step_mask [N, k] (the step exists) and obs_mask [N, k] (its next observation exists);
    with frames, also frame [N, k+1]: indices into frames(episodes) (the last frame repeated
    beyond the episode, where obs_mask masks it)."""
    names = ("x", "a", "r", "s", "d", "step_mask", "obs_mask")
    with_img = bool(episodes) and episodes[0].img is not None
    out: dict[str, list[torch.Tensor]] = {n: [] for n in names + (("frame",) if with_img else ())}
    offset = 0
    for ep in episodes:
        L = len(ep.x)
        if with_img:
            idx = offset + torch.arange(L + k + 1).clamp(max=L - 1)
            out["frame"] += [idx[t:t + k + 1] for t in range(L)]
            offset += L
        xs = torch.cat([ep.x, ep.x[-1:].expand(k + 1, -1)])  # padded; masked beyond the episode
        pad = lambda v: torch.cat([v, torch.zeros(k, *v.shape[1:])])  # noqa: E731
        a, r, s, d = pad(ep.a), pad(ep.r), pad(ep.s), pad(ep.d)
        steps = torch.arange(k)
        for t in range(L):
            out["x"].append(xs[t:t + k + 1])
            out["a"].append(a[t:t + k])
            out["r"].append(r[t:t + k])
            out["s"].append(s[t:t + k])
            out["d"].append(d[t:t + k])
            out["step_mask"].append((t + steps < L).float())
            out["obs_mask"].append((t + steps + 1 < L).float())
    return {n: torch.stack(v) for n, v in out.items()}
