"""What the small policy and its critic read (the config's `obs_key`): one robot observation, or
several joined by "+", flattened into one float vector per frame.

  obs_key: privileged            [P]                  the twin's privileged observation
  obs_key: state                 [S]                  the joint-state vector
  obs_key: rgb_front+state       [H * W * 3 + S]      a camera frame (uint8 values as floats, row-major
                                                      H, W, C) followed by the joint state; the networks
                                                      read the frame with a conv encoder (networks.py)

A camera (`rgb_<cam>`, named in robot.image_topics, at robot.image_size) may come first only, and
only one. The same function flattens the actor's live observation and the recorded episodes."""

from __future__ import annotations

from typing import Any

import torch

VECTORS = ("state", "privileged")


def obs_keys(obs_key: str) -> list[str]:
    return obs_key.split("+")


def check_obs_key(obs_key: str, cameras: tuple[str, ...]) -> None:
    """ValueError (one line) for an obs_key the robot cannot give or the networks cannot read."""
    keys = obs_keys(obs_key)
    allowed = ", ".join([*VECTORS, *(f"rgb_{c}" for c in cameras)])
    for i, k in enumerate(keys):
        if k.startswith("rgb_") and k[4:] in cameras and i == 0:
            continue
        if k in VECTORS and k not in keys[:i]:
            continue
        why = "a camera comes first, and once" if k.startswith("rgb_") and k[4:] in cameras else f"unknown {k!r}"
        raise ValueError(f"obs_key: {why}; allowed: {allowed} (robot.image_topics), joined by '+'")


def image_of(obs_key: str, image_size: tuple[int, ...]) -> tuple[int, int] | None:
    """(H, W) of the camera frame that leads the vector, or None."""
    return (int(image_size[0]), int(image_size[1])) if obs_keys(obs_key)[0].startswith("rgb_") else None


def obs_vector(obs: dict[str, Any], obs_key: str, prefix: str = "") -> torch.Tensor:
    """[B, D] float: obs[prefix + key] for each key, each flattened per frame, concatenated."""
    return torch.cat([torch.as_tensor(obs[prefix + k]).reshape(len(obs[prefix + k]), -1).float()
                      for k in obs_keys(obs_key)], -1)
