"""The off-policy learner's agent: SAC with an ensemble critic over a replay of online and
demonstration transitions (RLPD / HIL-SERL). `update` runs `utd` critic steps, each on its
own batch, then one actor and temperature step on the last batch (RLPD's update order).
With image observations each batch's frames are randomly shifted first (sac.image_shift, DrQ:
embodied/robot_rl/augment.py). With sac.chunk H > 1 an action is a chunk of H actions [H * A]
and a transition spans the steps it executed ("steps" h <= H): the critic bootstraps with
gamma^h (embodied/robot_rl/replay.py, chunk_transition)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from embodied.rl.algorithms import sac
from embodied.robot_rl.augment import random_shift
from embodied.robot_rl.networks import EnsembleCritic, TanhGaussianActor

Batch = dict[str, torch.Tensor]  # obs [N, D], action [N, A], reward [N], next_obs [N, D], terminated [N], steps [N]


@dataclass
class SACConfig:
    """Defaults and their sources: docs/robot_rl.md."""

    gamma: float = 0.97  # HIL-SERL's discount for tasks of tens of steps
    lr: float = 3e-4
    batch_size: int = 256  # RLPD, SERL
    utd: int = 2  # critic updates per transition received (HIL-SERL 2, RLPD up to 20)
    ensemble: int = 2  # HIL-SERL 2 critics; RLPD 10 with a subsample of 2
    subsample: int | None = None
    hidden: tuple[int, ...] = (256, 256)
    tau: float = 0.005
    init_temperature: float = 0.01  # HIL-SERL, SERL
    target_entropy: float | None = None  # None: -A / 2 (SERL)
    backup_entropy: bool = False  # HIL-SERL drops the entropy term from the critic's backup
    demo_fraction: float = 0.5  # RLPD's symmetric sampling: half of each batch from the demos
    bc_weight: float = 0.0  # > 0: add bc_weight * |mean action - a|^2 on demo/intervened rows to the actor loss
    obs_min_std: float = 0.0  # observation dims whose std over the demos is below this are not scaled (ObsNorm)
    image_shift: int = 4  # image observations: DrQ's random shift by up to this many pixels (0: off)
    chunk: int = 1  # actions per policy output, executed open loop (1: single actions)

    def __post_init__(self) -> None:
        bad = {k: v for k, v in (("gamma", self.gamma), ("tau", self.tau), ("demo_fraction", self.demo_fraction))
               if not 0.0 <= v <= 1.0}
        if bad:
            k, v = next(iter(bad.items()))
            raise ValueError(f"sac.{k}: must be in [0, 1], got {v}")
        for k in ("lr", "init_temperature"):
            if not getattr(self, k) > 0:
                raise ValueError(f"sac.{k}: must be > 0, got {getattr(self, k)}")
        if int(self.image_shift) < 0:
            raise ValueError(f"sac.image_shift: must be >= 0 (0: off), got {self.image_shift}")
        for k in ("batch_size", "utd", "ensemble", "chunk"):
            if int(getattr(self, k)) < 1:
                raise ValueError(f"sac.{k}: must be >= 1, got {getattr(self, k)}")
        if self.subsample is not None and not 1 <= self.subsample <= self.ensemble:
            raise ValueError(f"sac.subsample: must be in 1..{self.ensemble} (sac.ensemble) or null, got {self.subsample}")
        self.hidden = tuple(int(h) for h in self.hidden)


class SACAgent:
    """actor (TanhGaussianActor), critic and target critic (EnsembleCritic), log_alpha."""

    def __init__(self, obs_dim: int, action_dim: int, cfg: SACConfig, image: tuple[int, int] | None = None):
        self.cfg, self.image = cfg, image
        self.actor = TanhGaussianActor(obs_dim, action_dim, cfg.hidden, image)
        self.critic = EnsembleCritic(obs_dim, action_dim, cfg.ensemble, cfg.hidden, image)
        if image:  # one encoder: the critic's loss trains it, the actor reads it detached (DrQ)
            self.actor.encoder, self.actor.detach_encoder = self.critic.encoder, True
        self.target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(math.log(cfg.init_temperature), requires_grad=True)
        self.target_entropy = -action_dim / 2 if cfg.target_entropy is None else cfg.target_entropy
        self.opt_actor = torch.optim.Adam([p for n, p in self.actor.named_parameters() if not n.startswith("encoder.")],
                                          lr=cfg.lr)
        self.opt_critic = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr)
        self.opt_alpha = torch.optim.Adam([self.log_alpha], lr=cfg.lr)
        self.updates = 0

    def set_obs_stats(self, obs: torch.Tensor) -> None:
        """Normalise observations with the statistics of obs [N, D] (the demonstrations)."""
        for net in (self.actor, self.critic, self.target):
            net.norm.set(obs, self.cfg.obs_min_std)

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def augment(self, b: Batch) -> Batch:
        """The batch with its frames randomly shifted (obs and next_obs independently); as it is
        without images or with sac.image_shift 0."""
        if self.image is None or self.cfg.image_shift <= 0:
            return b
        pad = self.cfg.image_shift
        return {**b, "obs": random_shift(b["obs"], self.image, pad),
                "next_obs": random_shift(b["next_obs"], self.image, pad)}

    def critic_step(self, b: Batch) -> dict[str, float]:
        # chunks: gamma^h for a transition of h steps (single actions: gamma, as before)
        gamma = self.cfg.gamma if self.cfg.chunk == 1 else self.cfg.gamma ** b["steps"]
        with torch.no_grad():
            next_a, next_logp = self.actor.sample(b["next_obs"])
            y = sac.critic_target(b["reward"], b["terminated"], self.target(b["next_obs"], next_a), next_logp,
                                  gamma, self.alpha, self.cfg.backup_entropy, self.cfg.subsample)
        q = self.critic(b["obs"], b["action"])
        loss = sac.critic_loss(q, y)
        self.opt_critic.zero_grad(set_to_none=True)
        loss.backward()
        self.opt_critic.step()
        sac.polyak(self.target, self.critic, self.cfg.tau)
        return {"critic_loss": loss.item(), "q_mean": q.mean().item(), "target_mean": y.mean().item()}

    def actor_step(self, b: Batch) -> dict[str, float]:
        a, logp = self.actor.sample(b["obs"])
        self.critic.requires_grad_(False)
        loss = sac.actor_loss(self.critic(b["obs"], a), logp, self.alpha)
        if self.cfg.bc_weight > 0 and "demo" in b:
            mean, _ = self.actor.dist(b["obs"])
            loss = loss + self.cfg.bc_weight * sac.bc_loss(torch.tanh(mean), b["action"], b["demo"])
        self.critic.requires_grad_(True)
        self.opt_actor.zero_grad(set_to_none=True)
        loss.backward()
        self.opt_actor.step()
        t_loss = sac.temperature_loss(self.log_alpha, logp, self.target_entropy)
        self.opt_alpha.zero_grad(set_to_none=True)
        t_loss.backward()
        self.opt_alpha.step()
        return {"actor_loss": loss.item(), "entropy": -logp.mean().item(), "alpha": self.alpha.item()}

    def update(self, batches: list[Batch], actor: bool = True) -> dict[str, float]:
        """len(batches) critic steps (utd), then an actor and temperature step on the last batch
        (skipped with actor=False, e.g. during a critic warm-up); image batches shifted first."""
        batches = [self.augment(b) for b in batches]
        stats: dict[str, float] = {}
        for b in batches:
            stats = self.critic_step(b)
        if actor:
            stats.update(self.actor_step(batches[-1]))
        self.updates += 1
        return stats

    def state_dict(self) -> dict:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "target": self.target.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                "opt_actor": self.opt_actor.state_dict(), "opt_critic": self.opt_critic.state_dict(),
                "opt_alpha": self.opt_alpha.state_dict(), "updates": self.updates}

    def load_state_dict(self, sd: dict) -> None:
        self.actor.load_state_dict(sd["actor"])
        self.critic.load_state_dict(sd["critic"])
        self.target.load_state_dict(sd["target"])
        with torch.no_grad():
            self.log_alpha.copy_(sd["log_alpha"])
        self.opt_actor.load_state_dict(sd["opt_actor"])
        self.opt_critic.load_state_dict(sd["opt_critic"])
        self.opt_alpha.load_state_dict(sd["opt_alpha"])
        self.updates = int(sd["updates"])
