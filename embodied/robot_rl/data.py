"""What the finetuning run keeps on disk: the policy weights it acts with, and its episodes
(LeRobot v3, embodied/data/dataset.py) turned back into transitions.

  run_dir/policy.safetensors   the actor network's weights; metadata: version, obs_dim, action_dim, hidden,
                               image (the camera frame's H, W, or null)
  run_dir/online/              every training episode the actor ran (LeRobot v3), with the columns
                               complementary_info.is_intervention and complementary_info.weight_version
  run_dir/learner.pt           the learner's state (networks, optimisers, temperature, counters)
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from embodied.data.dataset import read_episodes, read_meta
from embodied.data.layout import DatasetError
from embodied.robot_rl.networks import TanhGaussianActor
from embodied.robot_rl.replay import chunk_transitions, episode_transitions
from embodied.robot_rl.residual import residual_of


def save_policy(path: str | Path, actor: TanhGaussianActor, version: int, hidden: tuple[int, ...]) -> None:
    """Atomically write the actor's weights with their version."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    sd = {k: v.detach().contiguous().clone() for k, v in actor.state_dict().items()}
    meta = {"version": str(version), "obs_dim": str(actor.norm.mean.numel()), "action_dim": str(actor.action_dim),
            "hidden": json.dumps(list(hidden)),
            "image": json.dumps(list(actor.encoder.image) if actor.encoder is not None else None)}
    save_file(sd, str(tmp), metadata=meta)
    os.replace(tmp, path)


def load_policy(path: str | Path) -> tuple[TanhGaussianActor, int]:
    """The actor network and its weight version."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    image = json.loads(meta.get("image", "null"))
    actor = TanhGaussianActor(int(meta["obs_dim"]), int(meta["action_dim"]), tuple(json.loads(meta["hidden"])),
                              tuple(image) if image else None)
    actor.load_state_dict(load_file(str(path)))
    return actor, int(meta["version"])


def dataset_transitions(root: str | Path, obs_key: str, episodes: list[int] | None = None,
                        skip: set[int] = frozenset(),
                        residual_scale: float | None = None, reward: str = "success", chunk: int = 1,
                        gamma: float = 1.0, stride: int | None = None) -> tuple[list[dict], list[int]]:
    """Transitions of a dataset's committed episodes (all, or `episodes`), leaving out the
    indices in `skip`; the reward is the success flag (the sparse reward the robot gives), or
    with reward="recorded" the dataset's reward column (a twin's dense reward; `embodied
    collect` records the task's).
    residual_scale: the run's episodes of a residual on a VLA (embodied/robot_rl/residual.py):
    obs is [obs_key, base_action] and the action the residual that explains the executed one.
    chunk > 1: transitions of action chunks (replay.chunk_transitions: from step 0 every `stride`
    steps, default chunk, as the actor executed them; reward discounted by gamma within a chunk).
    Returns (transitions, episode indices read)."""
    from embodied.robot_rl.obs import obs_keys, obs_vector

    out, read = [], []
    order = sorted(episodes) if episodes is not None else itertools.count()
    for index, ep in zip(order, read_episodes(root, episodes)):  # read_episodes yields in index order
        if index in skip:
            continue
        for key in (f"obs.{k}" for k in obs_keys(obs_key)):
            if key not in ep:
                raise DatasetError(f"{root}: episodes have no {key} (obs_key {obs_key!r}); "
                                   f"they have {sorted(k for k in ep if k.startswith('obs.'))}")
        success = ep["success"].bool()
        obs, action = obs_vector(ep, obs_key, "obs."), ep["action"].float()
        if residual_scale is not None:
            if "base_action" not in ep:
                raise DatasetError(f"{root}: episodes have no base_action (recorded without residual)")
            base = ep["base_action"].float()
            obs, action = torch.cat([obs, base], -1), residual_of(action, base, residual_scale)
        r = ep["reward"].float() if reward == "recorded" else success.float()
        ts = episode_transitions(obs, action, r, success, ep.get("intervened"), ep.get("weight_version"))
        if chunk > 1:
            ts = chunk_transitions(ts, chunk, gamma, stride)
        out += [{**t, "episode": index} for t in ts]
        read.append(index)
    return out, read


def committed_episodes(root: str | Path) -> int:
    try:
        return int(read_meta(root)["total_episodes"])
    except DatasetError:
        return 0
