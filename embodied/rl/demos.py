"""Demonstrations kept in the RL update (ppo.bc_coef > 0, ppo.bc_dataset): every minibatch of
the clipped objective adds bc_coef times the policy's own imitation loss (Policy.sft_loss, the
loss `embodied sft` trained it with) on a batch of demonstrations, as RLPD keeps demos in its
replay and VLA RL recipes keep an SFT term beside the RL one: the demonstrated behaviour of
tasks whose sampled groups carry no success keeps a gradient that holds it in place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader


class DemoSampler:
    """An endless stream of shuffled demonstration batches: sample() -> (obs dict of [M, ...]
    on the device, actions float [M, K, A]). dataset: any map-style dataset of the LeRobot
    layout (embodied.data.lerobot.LeRobotDataset items)."""

    def __init__(self, dataset: Any, batch_size: int, device: torch.device, seed: int = 0):
        if len(dataset) < batch_size:
            raise ValueError(f"ppo.bc_batch_size: {batch_size} is larger than the demonstrations ({len(dataset)} items)")
        self.device = device
        self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,
                                 generator=torch.Generator().manual_seed(seed))
        self._it = iter(self.loader)

    def sample(self) -> tuple[dict[str, Any], torch.Tensor]:
        try:
            batch = next(self._it)
        except StopIteration:
            self._it = iter(self.loader)
            batch = next(self._it)
        obs = {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in batch.items() if k != "actions"}
        return obs, batch["actions"].to(self.device)


def demo_sampler(cfg: Any, policy: Any) -> DemoSampler | None:
    """The sampler of cfg.ppo.bc_dataset for `policy` (its chunk size and cameras), or None with
    ppo.bc_coef = 0. ConfigError (one line) for a missing dataset or a policy without sft_loss."""
    from embodied.config_loader import ConfigError

    pc = cfg.ppo
    if pc.bc_coef <= 0:
        return None
    if not pc.bc_dataset or not (Path(pc.bc_dataset) / "meta" / "info.json").is_file():
        raise ConfigError(f"ppo.bc_dataset: {pc.bc_dataset!r} is not a dataset of `embodied collect` "
                          f"(no meta/info.json); ppo.bc_coef={pc.bc_coef} needs the demonstrations")
    if not hasattr(policy, "sft_loss"):
        raise ConfigError(f"ppo.bc_coef: policy.name={cfg.policy.name} has no imitation loss; allowed: "
                          "flow_vla or ar_vla with ppo.bc_coef > 0, else 0")
    from embodied.data.lerobot import LeRobotDataset
    from embodied.run.device import module_device

    conf = policy.config
    dataset = LeRobotDataset(pc.bc_dataset, chunk_size=getattr(conf, "chunk_size", 1),
                             cameras=list(getattr(conf, "cameras", None) or []))
    return DemoSampler(dataset, pc.bc_batch_size, module_device(policy), seed=cfg.train.seed)
