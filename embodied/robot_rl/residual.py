"""The VLA path of on-robot RL: a bounded residual on top of a frozen SFT'd VLA (config section
`residual`), in the style of residual RL and Policy Decorator.

The base policy is a VLA checkpoint written by `embodied sft` (a save_pretrained directory). It
never trains: each step it gives a base action b [A] (the next action of its current chunk; a
new chunk is planned, deterministically, when the last one's `execute_steps` actions are used
up). SAC learns a residual r in (-1, 1)^A from the observation and b; the robot is sent

    a = clamp(b + scale * r, -1, 1)          |a - b| <= scale in every dimension,

and the safety layer still filters a. The residual actor starts with its output layer at zero,
so its deterministic residual is exactly 0: at version 0 evaluation is the VLA's own behaviour,
and RL can move the actions at most `scale` away from what the VLA would do.

What SAC sees: obs = [obs_key (the residual's observation), b] [D + A] and action = r [A]. When
the operator takes over with action m, the transition's residual is clamp((m - b) / scale, -1, 1)
(what the residual would have had to be; the operator's action itself is what the robot did).
The recordings keep b per frame (column `complementary_info.base_action`), so a learner
rebuilds its buffer from disk: r = clamp((action - b) / scale, -1, 1) (where the clamp to
[-1, 1] cut the action, that is not quite the r that was sampled).

Chunks and the next observation: b_{t+1} is already fixed at step t when it is the next action
of the same chunk, so the critic's next observation carries the b the actor will really use
(computed right after the step); at a time limit, b of the final frame is a fresh plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sims.vecenv import EnvError


@dataclass
class ResidualConfig:
    """`residual:` in a finetune config."""

    base: str = ""  # the frozen VLA: a save_pretrained directory (embodied sft's run_dir/final)
    scale: float = 0.3  # the bound: each executed action is within scale of the base action
    num_steps: int = 0  # the base's Euler steps per chunk (0: its own config's num_steps)

    def __post_init__(self) -> None:
        if not self.base:
            raise ValueError("residual.base: a VLA checkpoint directory is needed (embodied sft's run_dir/final)")
        if not 0.0 < self.scale <= 2.0:
            raise ValueError(f"residual.scale: must be in (0, 2], got {self.scale}")
        if self.num_steps < 0:
            raise ValueError(f"residual.num_steps: must be >= 0, got {self.num_steps}")


def compose(base: torch.Tensor, residual: torch.Tensor, scale: float) -> torch.Tensor:
    """The executed action [.., A]: clamp(base + scale * residual, -1, 1)."""
    return (base + scale * residual).clamp(-1.0, 1.0)


def residual_of(action: torch.Tensor, base: torch.Tensor, scale: float) -> torch.Tensor:
    """The residual [.., A] that explains an executed action: clamp((action - base) / scale, -1, 1)."""
    return ((action - base) / scale).clamp(-1.0, 1.0)


class BasePolicy:
    """The frozen VLA: `next(obs)` is the base action [1, A] for obs, from the current chunk or a
    new plan; `plan(obs)` the first action of a fresh chunk without touching the current one;
    `reset()` drops the chunk (a new episode)."""

    def __init__(self, cfg: ResidualConfig, action_dim: int):
        from policies.base import Policy, PolicyLoadError

        try:
            self.vla = Policy.from_pretrained(cfg.base)
        except (PolicyLoadError, FileNotFoundError) as e:
            raise EnvError(f"residual.base: {str(e).splitlines()[0]}") from None
        self.vla.eval().requires_grad_(False)
        if self.vla.config.action_dim != action_dim:
            raise EnvError(f"residual.base: the VLA acts in {self.vla.config.action_dim} dimensions; "
                           f"the robot's action has {action_dim}")
        self.kw = {"num_steps": cfg.num_steps} if cfg.num_steps and self.vla.name == "flow_vla" else {}
        self.chunk: list[torch.Tensor] = []

    def check(self, obs: dict[str, Any]) -> None:
        """One line if the robot's observation lacks what the VLA reads (a camera, its size)."""
        size = int(self.vla.config.vision.get("image_size", 0))
        for cam in self.vla.config.cameras:
            key = f"rgb_{cam}"
            if key not in obs:
                raise EnvError(f"residual.base: the VLA reads {key!r}; the robot gives "
                               f"{sorted(k for k in obs if k.startswith('rgb_'))} (robot.image_topics)")
            if size and tuple(obs[key].shape[1:3]) != (size, size):
                raise EnvError(f"residual.base: the VLA reads {key!r} at {size} x {size}; the robot's is "
                               f"{tuple(obs[key].shape[1:3])} (robot.image_size)")

    @torch.no_grad()
    def _chunk(self, obs: dict[str, Any]) -> list[torch.Tensor]:
        out = self.vla.act(obs, deterministic=True, **self.kw).actions  # [1, n, A]
        return list(out[0].float().unbind(0))

    def next(self, obs: dict[str, Any]) -> torch.Tensor:
        if not self.chunk:
            self.chunk = self._chunk(obs)
        return self.chunk.pop(0)[None]

    def plan(self, obs: dict[str, Any]) -> torch.Tensor:
        return self._chunk(obs)[0][None]

    def reset(self) -> None:
        self.chunk = []


def zero_residual_actor(obs: torch.Tensor | None, obs_dim: int, action_dim: int, hidden: tuple[int, ...],
                        min_std: float = 0.0):
    """The starting residual actor over [obs (D), base action (A)]: output layer zero, so its
    deterministic residual is exactly 0 (pre-squash log std -1.5 for exploration). obs [N, D]
    (e.g. the demonstrations' frames) sets the normalisation of the first D inputs as ObsNorm
    does (a dim whose std is below min_std, sac.obs_min_std, is centred but not scaled); the
    base action, already in [-1, 1], is left as it is."""
    from embodied.robot_rl.networks import ObsNorm, TanhGaussianActor

    actor = TanhGaussianActor(obs_dim + action_dim, action_dim, hidden)
    with torch.no_grad():
        actor.body[-1].weight.zero_()
        actor.body[-1].bias.zero_()
        if obs is not None and len(obs) > 1:
            stats = ObsNorm(obs_dim)
            stats.set(obs.float(), min_std)
            actor.norm.mean[:obs_dim] = stats.mean
            actor.norm.std[:obs_dim] = stats.std
    return actor
