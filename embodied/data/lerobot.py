"""A torch Dataset over a LeRobot v3 dataset, with windows of the next K actions.

Item i is frame i of the concatenated episodes:
  "rgb_<cam>"     uint8   [H, W, 3]   for each camera in the dataset, or in `cameras` where
                                      given (the others are not decoded)
  "state"         float32 [S]         observation.state
  "privileged"    float32 [P]         observation.environment_state (if recorded)
  "instruction"   str                 the frame's task text (LeRobot's "task")
  "actions"       float32 [K, A]      actions t .. t+K-1; past the episode end the last
                                      action is repeated
  "action_valid"  bool    [K]         False for the repeated padding
Everything is decoded into memory once (the datasets here are small). Any v3.0 dataset
with observation.state and action loads, LeRobot's too (embodied/data/read.py);
`episodes` selects a subset by episode index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from embodied.data.dataset import DatasetError, read_episodes, read_meta


class LeRobotDataset(Dataset):
    def __init__(self, root: str | Path, chunk_size: int = 1, episodes: list[int] | None = None,
                 cameras: list[str] | None = None):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.root, self.chunk_size = Path(root), chunk_size
        self.info = read_meta(self.root)
        if episodes is not None and not episodes:
            raise ValueError(f"episodes: an empty selection of {self.root}'s episodes")
        eps = list(read_episodes(self.root, episodes, cameras))
        for name, key in (("observation.state", "obs.state"), ("action", "action")):
            if key not in eps[0]:
                raise DatasetError(f"{self.root}: no {name!r} feature (features: {', '.join(self.info['features'])})")
        self.cameras = sorted(k[len("obs.rgb_"):] for k in eps[0] if k.startswith("obs.rgb_"))
        cat = lambda key: torch.cat([e[key] for e in eps])  # noqa: E731
        self.state = cat("obs.state").float()
        self.privileged = cat("obs.privileged").float() if "obs.privileged" in eps[0] else None
        self.images = {cam: cat(f"obs.rgb_{cam}") for cam in self.cameras}
        self.actions = cat("action").float()
        self.instructions = [t for e in eps for t in e["frame_tasks"]]
        # Frame t's episode ends at ends[t] (exclusive).
        lengths = torch.tensor([len(e["action"]) for e in eps])
        ends = torch.cumsum(lengths, 0)
        self.episode_end = torch.repeat_interleave(ends, lengths)
        self.num_episodes = len(eps)

    @property
    def stats(self) -> dict[str, dict[str, torch.Tensor]]:
        """Mean / std / min / max and the q01 / q99 quantiles (pi0.5's normalisation) of state and
        action over the selected frames, exact; each [D]."""
        def summary(x: torch.Tensor) -> dict[str, torch.Tensor]:
            q01, q99 = torch.from_numpy(np.quantile(x.double().numpy(), [0.01, 0.99], axis=0)).float()
            return {"mean": x.mean(0), "std": x.std(0), "min": x.min(0).values, "max": x.max(0).values,
                    "q01": q01, "q99": q99}
        return {"state": summary(self.state), "action": summary(self.actions)}

    def __len__(self) -> int:
        return self.actions.shape[0]

    def __getitem__(self, i: int) -> dict[str, Any]:
        idx = torch.arange(i, i + self.chunk_size)
        valid = idx < self.episode_end[i]
        idx = torch.minimum(idx, self.episode_end[i] - 1)
        item: dict[str, Any] = {"state": self.state[i], "instruction": self.instructions[i],
                                "actions": self.actions[idx], "action_valid": valid}
        if self.privileged is not None:
            item["privileged"] = self.privileged[i]
        for cam, frames in self.images.items():
            item[f"rgb_{cam}"] = frames[i]
        return item
