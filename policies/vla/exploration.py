"""Stochastic denoising steps for RL on the flow VLA: Flow-Noise and Flow-SDE.

Conventions (policies/vla/flow.py): t runs from 1 (noise) to 0 (actions) in N Euler steps
of size dt = 1 / N; the expert predicts v = noise - actions; the ODE step is
x_{t-dt} = x_t - dt * v.

Flow-Noise (pi_RL, ReinFlow): every step is Gaussian around the ODE step, with a std that
a small learned head outputs per action element, bounded to [std_min, std_max]:
    x_{t-dt} ~ N(x_t - dt * v, std(h)^2)

Flow-SDE (pi_RL): the ODE step becomes the Euler-Maruyama step of the reverse-time SDE
with the same marginals, diffusion g_t = a * sqrt(t / (1 - t)). For x_t = t * noise +
(1 - t) * actions the score is -noise_hat / t with noise_hat = x_t + (1 - t) * v, so
    x_{t-dt} ~ N(x_t - dt * v - dt * g_t^2 / (2 t) * noise_hat,  g_t^2 * dt)
g_t is infinite at t = 1; it is evaluated at min(t, 1 - dt). One step per chunk,
drawn uniformly, is stochastic; the others are ODE steps.
"""

from __future__ import annotations

import math

import torch
from torch import nn

METHODS = ("ode", "flow_noise", "flow_sde")
_LOG_2PI = math.log(2.0 * math.pi)


def gaussian_log_density(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(x; mean, std^2), computed in float64, returned float32 (broadcasting)."""
    x, mean, std = x.double(), mean.double(), std.double()
    return (-0.5 * ((x - mean) / std) ** 2 - torch.log(std) - 0.5 * _LOG_2PI).float()


def gaussian_entropy(std: torch.Tensor) -> torch.Tensor:
    """Elementwise entropy 0.5 * log(2 pi e) + log std."""
    return 0.5 * (1.0 + _LOG_2PI) + torch.log(std.float())


class NoiseHead(nn.Module):
    """Expert hidden states [..., K, H] -> std [..., K, A_pad] in [std_min, std_max]."""

    def __init__(self, hidden: int, action_width: int):
        super().__init__()
        self.proj = nn.Linear(hidden, action_width)
        nn.init.zeros_(self.proj.weight)  # starts at the middle of the bounds
        nn.init.zeros_(self.proj.bias)

    def forward(self, h: torch.Tensor, std_min: float, std_max: float) -> torch.Tensor:
        return std_min + (std_max - std_min) * torch.sigmoid(self.proj(h.to(self.proj.weight.dtype)).float())


def sde_step(x: torch.Tensor, v: torch.Tensor, t: torch.Tensor, dt: float,
             level: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean [..., K, A] and std [..., 1, 1] of the Flow-SDE step from x_t [..., K, A]; t float [...]."""
    t = t.float()[..., None, None]
    g2 = level ** 2 * torch.clamp(t, max=1.0 - dt) / (1.0 - torch.clamp(t, max=1.0 - dt))
    noise_hat = x + (1.0 - t) * v
    mean = x - dt * v - dt * g2 / (2.0 * t) * noise_hat
    return mean, torch.sqrt(g2 * dt)
