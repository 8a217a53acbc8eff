"""GymSideVecEnv: a gymnasium env whose dependencies conflict with ours, in worker processes of
its own venv (mapping.python; sims/gym/worker.py), through the side-venv base
(sims/sidevenv/env.py): the same observations, actions, rewards and success as GymVecEnv
(sims/gym/env.py), seeds to each env's reset, W worker processes holding contiguous blocks of
envs. The mapping's vector and autoreset do not apply (each worker steps its own envs); it is
not checkpointed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from sims.gym.mapping import GymMapping, columns
from sims.sidevenv.env import SideVenvVecEnv
from sims.sidevenv.proc import REPO, SideVenv
from sims.vecenv import EnvError, EnvSpec


class GymSideVecEnv(SideVenvVecEnv):
    """B copies of mapping.env_id in W = num_workers (default min(B, 2)) processes of the
    interpreter mapping.python; obs_mode, cameras, image_size, seed, max_episode_steps as GymVecEnv."""

    script, label = Path(__file__).with_name("worker.py"), "gymnasium"

    def __init__(self, task: str, num_envs: int, mapping: GymMapping, *, obs_mode: str = "state",
                 image_size: Sequence[int] | int = (64, 64), cameras: Sequence[str] | None = None,
                 seed: int | None = None, max_episode_steps: int | None = None, num_workers: int | None = None,
                 start_timeout: float = 300.0, reward_mode: str | None = None, num_threads: int | None = None,
                 device: Any = None):
        python = Path(mapping.python)
        python = python if python.is_absolute() else REPO / python
        self.side = SideVenv(key="gym", label=f"{mapping.env_id}'s", variable="", venv="", interpreter=str(python),
                             setup=f"build the venv that mapping.python names ({mapping.python})")
        self.camera_names = {c: c for c in mapping.cameras}
        B, cams, (h, w) = self._check(num_envs, obs_mode, "dense", ("dense",), cameras or tuple(mapping.cameras), image_size)
        steps = int(max_episode_steps or 0)
        if steps < 1:
            steps = _spec_steps(python, mapping.env_id)
        W = int(num_workers or min(B, 2))
        if not 1 <= W <= B:
            raise EnvError(f"num_workers: {num_workers!r}; allowed: 1..{B} (the number of envs)")
        if any(mapping.cameras[c] != "render" for c in cams):
            raise EnvError("cameras: in a side venv a camera is the env's render(); allowed: {name: render}")
        self.m, self.device = mapping, torch.device("cpu")
        blocks = [b.tolist() for b in np.array_split(np.arange(B), W)]
        spec_m = json.dumps(dataclasses.asdict(mapping))
        infos = self._start(blocks, [f"{k} ({mapping.env_id} x {len(b)})" for k, b in enumerate(blocks)],
                            [["--mapping", spec_m, "--envs", len(b), "--max-steps", steps, "--height", h, "--width", w,
                              "--cameras", len(cams)] for b in blocks], start_timeout)
        info = infos[0]
        width = info["arrays"]["obs"][1][1]
        spans = {k: tuple(v) for k, v in info["spans"].items()} if info["spans"] else None
        state, priv = columns(mapping, width, spans)
        self._columns, self._n_state = priv, len(state)
        hz = 1.0 / info["dt"] if info["dt"] else info["render_fps"]
        spec = EnvSpec(task=task, num_envs=B, action_dim=int(np.prod(info["action_shape"])), state_dim=len(state),
                       privileged_dim=len(priv), max_episode_steps=steps, control_hz=hz, cameras=cams, image_size=(h, w))
        self._finish(spec, [mapping.instruction or mapping.env_id] * B, torch.zeros(B, len(priv)), seed)

    def _state(self, priv: torch.Tensor) -> torch.Tensor:
        return priv[:, :self._n_state]

    def state_dict(self) -> dict[str, Any]:
        raise EnvError(f"state_dict: a gymnasium env in a side venv ({self.m.env_id}) is not checkpointed; "
                       f"allowed: mapping.python empty (in this process)")


def _spec_steps(python: Path, env_id: str) -> int:
    """The env's registered time limit, read with the side venv's gymnasium."""
    import subprocess

    code = f"import gymnasium as g; print(g.spec({env_id!r}).max_episode_steps or 0)"
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=True)
        steps = int(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        steps = 0
    if steps < 1:
        raise EnvError(f"max_episode_steps: {env_id} has no time limit in {python}; allowed: a positive int")
    return steps
