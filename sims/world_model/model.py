"""The world model: encoder of the privileged vector (and, with `cameras`, of the camera
frames: sims/world_model/vision.py) into a latent, an ensemble of action-conditioned latent
dynamics members (residual MLPs), decoders back to the vector (and to the frames), and
reward / success / done heads on the next latent.

The heads score `head_input`: the next latent and the action ("latent_action", the default),
the next latent only ("latent"), or the decoded normalised vector only ("state"). With
`member_heads` every ensemble member has its own heads, which score that member's own next
latent (rollout.py aggregates them, and their spread joins the disagreement); otherwise one
set of heads scores whatever latent it is given (the env gives it the members' mean).

The privileged vector starts with the proprioceptive state (the simulators' contract), so
decoding it gives both observation keys. Vectors are normalised with the training set's
mean and std before encoding; the decoder predicts normalised vectors. With cameras, the
conv encoder's features join the normalised vector at the input of the latent MLP, and the
image decoder maps the same latent back to pixels.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn


HEAD_INPUTS = ("latent_action", "latent", "state")  # what the heads score: (z', a), z', decoded z'
STATE_LOSSES = ("state", "delta")  # the unit of the state error: the state's std, or a step's change
LATENT_SPACES = ("learned", "state")  # a learned latent, or the normalised privileged vector itself
DELTA_WEIGHT_CAP = 10.0  # state_loss "delta": a dimension's error counts at most 10x its state-unit error
NOISE_FACTOR_RANGE = 10.0  # the noise head scales residual_std by a factor in [1/10, 10]


@dataclass
class WorldModelConfig:
    """Fields of configs/world_model/*.yaml (and of the checkpoint's config.json)."""

    task: str = "PushCube"
    dataset: str = ""  # LeRobot v3 dataset(s) written by `embodied collect`, comma-separated
    members: int = 5  # ensemble size (>= 5: the disagreement needs several members)
    latent: int = 64
    hidden: int = 256
    member_layers: int = 2  # hidden layers of each ensemble member (MBPO / PETS use 4 of 200)
    horizon_k: int = 8  # steps of the autoregressive training loss
    epochs: int = 200
    batch_size: int = 256
    lr: float = 1e-3
    patience: int = 10  # epochs without a better held-out k-step error before stopping
    holdout: float = 0.2  # fraction of episodes held out (early stopping, eval)
    seed: int = 0
    keyframe_every: int = 0  # > 0: resets also start at every n-th frame of the training episodes
    uncertainty_lambda: float = 0.1  # reward = reward head - lambda * disagreement
    uncertainty_margin: float = 3.0  # truncate when disagreement > margin * held-out 99th percentile
    max_minutes: float = 60.0  # wall-clock cap on training
    init_from: str = ""  # a checkpoint to continue from (its weights and normalisation), e.g. with more data
    cameras: list[str] = field(default_factory=list)  # rgb cameras modelled (obs rgb_<cam>); [] = state only
    channels: int = 16  # width of the conv encoder / decoder (with cameras)
    image_weight: float = 1.0  # weight of the pixel MSE in the loss (with cameras)
    head_input: str = "latent_action"  # what the heads score: latent_action (z', a), latent (z'), state (decoded z')
    member_heads: bool = False  # one set of heads per ensemble member, on that member's own next latent
    heads_only: bool = False  # with init_from: keep its encoder, members and decoder fixed, train new heads only
    # the unit of the state error in the loss: "state" (each dimension's std), or "delta" (its
    # one-step change's std, at most DELTA_WEIGHT_CAP times finer), so that errors of a few mm
    # in positions that move a few mm a step count (MBPO / PETS normalise the predicted deltas)
    state_loss: str = "state"
    # "learned": encoder, latent dynamics, decoder; "state" (state-only models): the latent is the
    # normalised privileged vector itself (no encoder or decoder, latent = its size), and a member
    # predicts its one-step change in units of that change's std (MBPO / PETS's state-space ensembles)
    latent_space: str = "learned"
    # with latent_space "state": after every step, the fields the task declares as the difference
    # of two others (cube - tcp, goal - cube, ...) are recomputed from those two, and its unit
    # quaternions renormalised (sims/mujoco/tasks/base.py), so that a policy reading them sees the
    # cube where the model put it and the next step starts from a state the simulator can produce
    consistent: bool = False
    # filled by training (and stored in the checkpoint)
    obs_keys: list[str] = field(default_factory=lambda: ["state", "privileged", "instruction"])
    state_dim: int = 0
    privileged_dim: int = 0
    action_dim: int = 0
    max_episode_steps: int = 0
    control_hz: float = 20.0
    disagreement_threshold: float = float("inf")
    # the same for the env's "members" rollout (its spread accumulates): margin x the held-out
    # episodes' 99th percentile; 0 = not calibrated (a checkpoint written before it existed)
    member_disagreement_threshold: float = 0.0
    image_size: list[int] = field(default_factory=list)  # [H, W] of the dataset's frames (with cameras)
    # per latent dimension, the std of one step's error (the members' mean, from the held-out
    # episodes' own states under their own actions): the env's model_noise adds it back as
    # Gaussian noise (PETS's aleatoric sampling); [] = not calibrated (written before it existed)
    residual_std: list[float] = field(default_factory=list)
    # a learned, state-dependent noise (embodied/world_model/noise.py): an MLP of (latent, action)
    # scales residual_std per dimension, fit after training on the held-out episodes' one-step
    # errors, so that model_noise is small where the dynamics are sure (a cube at rest) and
    # large where they are not (contact); false: residual_std everywhere
    noise_head: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mlp(inp: int, hidden: int, out: int, layers: int = 2) -> nn.Sequential:
    """An MLP with `layers` hidden layers of width `hidden` (ELU)."""
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [nn.Linear(inp if i == 0 else hidden, hidden), nn.ELU()]
    return nn.Sequential(*mods, nn.Linear(hidden, out))


def derived_fields(task: str) -> tuple[torch.Tensor, list[slice]]:
    """The fields of a task's privileged vector that follow from others: rows [K, 3] (the index
    of an entry of a - b, of a's entry, of b's; one row per coordinate) and the slices of its
    unit quaternions."""
    from sims.mujoco.tasks.registry import task_class

    cls = task_class(task)
    L = cls.layout
    rows = [(o, a, b) for name, (fa, fb) in cls.differences.items()
            for o, a, b in zip(range(L[name].start, L[name].stop), range(L[fa].start, L[fa].stop),
                               range(L[fb].start, L[fb].stop))]
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, 3), [L[q] for q in cls.unit_quaternions]


class WorldModel(nn.Module):
    """x: normalised privileged vectors [.., P]; a: actions [.., A]; z: latents [.., Z]."""

    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        P, A, Z, H = cfg.privileged_dim, cfg.action_dim, cfg.latent, cfg.hidden
        self.cfg = cfg
        F = H if cfg.cameras else 0  # image features joined with the vector
        if cfg.cameras:
            from sims.world_model.vision import ImageDecoder, ImageEncoder

            size = (int(cfg.image_size[0]), int(cfg.image_size[1]))
            self.image_encoder = ImageEncoder(len(cfg.cameras), size, cfg.channels, F)
            self.image_decoder = ImageDecoder(len(cfg.cameras), size, cfg.channels, Z)
            self.register_buffer("pixel_var", torch.ones(()))  # training frames' pixel variance ([0, 1] units)
        state = cfg.latent_space == "state"
        if state and (cfg.cameras or Z != P):
            raise ValueError(f"latent_space 'state' models the privileged vector only: no cameras, latent = {P}")
        # built in this order (encoder, members, decoder), so that a seed gives the same weights as before
        self.encoder = nn.Identity() if state else _mlp(P + F, H, Z)
        self.members = nn.ModuleList(_mlp(Z + A, H, Z, cfg.member_layers) for _ in range(cfg.members))
        self.decoder = nn.Identity() if state else _mlp(Z, H, P)
        if state:  # a member's output is scaled per dimension by (one-step
            # change std / state std), so it predicts changes in their own units (0 for what never changes)
            self.register_buffer("delta_scale", torch.ones(Z))
        if cfg.consistent:
            rows, self.quaternions = derived_fields(cfg.task)
            self.register_buffer("derived_rows", rows, persistent=False)
        width = {"latent_action": Z + A, "latent": Z, "state": P}[cfg.head_input]
        # reward, success logit, done logit of the transition
        self.heads = (nn.ModuleList(_mlp(width, H, 3) for _ in range(cfg.members)) if cfg.member_heads
                      else _mlp(width, H, 3))
        if cfg.noise_head:  # built last, so that a seed gives the other modules the same weights
            self.noise_net = _mlp(Z + A, H, Z)
            nn.init.zeros_(self.noise_net[-1].weight)  # it starts at factor 1: residual_std everywhere
            nn.init.zeros_(self.noise_net[-1].bias)
        self.register_buffer("mean", torch.zeros(P))
        self.register_buffer("std", torch.ones(P))
        if cfg.state_loss == "delta":  # per-dimension weights of the squared normalised error, mean 1
            self.register_buffer("loss_weight", torch.ones(P))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.std + self.mean

    def encode(self, x: torch.Tensor, img: torch.Tensor | None = None) -> torch.Tensor:
        """x: normalised vectors [N, P]; img: uint8 frames [N, 3C, H, W] (required with cameras)."""
        if self.cfg.cameras:
            if img is None:
                raise ValueError("a world model with cameras encodes frames too: img is required")
            x = torch.cat([x, self.image_encoder(img)], dim=-1)
        return self.encoder(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z)

    def state_error(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Normalised vectors [..., P] -> [...]: the mean squared error over dimensions, each
        weighted by loss_weight with state_loss "delta"."""
        se = (pred - target) ** 2
        return (se * self.loss_weight).mean(dim=-1) if self.cfg.state_loss == "delta" else se.mean(dim=-1)

    def decode_images(self, z: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """latents [N, Z] and the last real frames uint8 [N, 3C, H, W] -> pixels float32
        [N, 3C, H, W] in [0, 1] (composited over the context: sims/world_model/vision.py)."""
        return self.image_decoder(z, context)

    def step_members(self, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """z [M, N, Z] (one latent per member) or [N, Z] (shared) -> next latents [M, N, Z]."""
        if z.dim() == 2:
            z = z.unsqueeze(0).expand(len(self.members), -1, -1)
        scale = self.delta_scale if self.cfg.latent_space == "state" else 1.0
        z_next = torch.stack([z[i] + scale * f(torch.cat([z[i], a], dim=-1)) for i, f in enumerate(self.members)])
        return self.make_consistent(z_next) if self.cfg.consistent else z_next

    def make_consistent(self, z: torch.Tensor) -> torch.Tensor:
        """Normalised state latents [..., P] -> the same with the derived fields recomputed
        (WorldModelConfig.consistent)."""
        x = self.denormalize(z)
        r = self.derived_rows
        x = x.index_copy(-1, r[:, 0], x[..., r[:, 1]] - x[..., r[:, 2]])
        for q in self.quaternions:
            x = torch.cat([x[..., :q.start], nn.functional.normalize(x[..., q], dim=-1), x[..., q.stop:]], dim=-1)
        return self.normalize(x)

    def head(self, z_next: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(reward, success logit, done logit) of the transition into z_next under a (a is
        broadcast over z_next's leading dims). With member_heads, z_next is [M, N, Z], one latent
        per member, and member i's heads score z_next[i]: each output is [M, N]."""
        if self.cfg.head_input == "latent_action":
            h = torch.cat([z_next, a.expand(*z_next.shape[:-1], a.shape[-1])], dim=-1)
        elif self.cfg.head_input == "latent":
            h = z_next
        else:
            h = self.decode(z_next)
        if self.cfg.member_heads:
            if h.dim() != 3 or len(h) != len(self.heads):
                raise ValueError(f"member heads score one latent per member: expected [{len(self.heads)}, N, Z], "
                                 f"got {list(z_next.shape)}")
            out = torch.stack([f(h[i]) for i, f in enumerate(self.heads)])
        else:
            out = self.heads(h)
        return out[..., 0], out[..., 1], out[..., 2]

    def noise_std(self, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """The std of one step's error from latents z [N, Z] under actions a [N, A] -> [N, Z]:
        residual_std, scaled by the noise head's factor where the model has one."""
        base = torch.tensor(self.cfg.residual_std, dtype=z.dtype)
        if not self.cfg.noise_head:
            return base.expand_as(z)
        log_range = math.log(NOISE_FACTOR_RANGE)
        out = self.noise_net(torch.cat([z, a], dim=-1))
        return base * torch.exp(log_range * torch.tanh(out / log_range))

    def disagreement(self, z_members: torch.Tensor) -> torch.Tensor:
        """[M, N, Z] -> [N]: the members' std of the decoded (normalised) vectors, mean over dims."""
        return self.decode(z_members).std(dim=0).mean(dim=-1)
