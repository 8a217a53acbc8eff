"""Replay buffers of transitions and the 50/50 online/demo batch (RLPD's symmetric sampling).

A transition: obs [D], action [A], reward, next_obs [D], terminated (no bootstrap), and the
actor's bookkeeping: intervened (the operator's action was executed), version (the weight
version the actor acted with), episode, step; steps: how many robot steps it spans (1, or with
action chunks up to the chunk's length: `chunk_transition`). Intervened transitions go into
both buffers (HIL-SERL). The buffers hold everything they are given (the runs here are short; a bound
would be a ring)."""

from __future__ import annotations

from typing import Any

import torch

FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "intervened", "version", "steps")


class Replay:
    """Rows kept in tensors that double their capacity when full, so that adding a transition
    costs the same however many there are (a stack of every row per update did not)."""

    def __init__(self) -> None:
        self._data: dict[str, torch.Tensor] = {}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, t: dict[str, Any]) -> None:
        row = {k: torch.as_tensor(t.get(k, 1.0) if k == "steps" else t[k], dtype=torch.float32) for k in FIELDS}
        if not self._data:
            self._data = {k: torch.empty((64, *v.shape)) for k, v in row.items()}
        elif self._n == len(self._data["reward"]):
            self._data = {k: torch.cat([v, torch.empty_like(v)]) for k, v in self._data.items()}
        for k, v in row.items():
            self._data[k][self._n] = v
        self._n += 1

    def tensors(self) -> dict[str, torch.Tensor]:
        return {k: v[:self._n] for k, v in self._data.items()}

    def sample(self, n: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """n transitions drawn uniformly with replacement."""
        idx = torch.randint(len(self), (n,), generator=generator)
        return {k: v[idx] for k, v in self._data.items()}


def mixed_batch(online: Replay, demo: Replay, n: int, demo_fraction: float,
                generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """n transitions: round(n * demo_fraction) from demo, the rest from online (all from the one
    that is not empty when the other is); "demo" [n] is 1 for the rows drawn from demo."""
    k = round(n * demo_fraction) if len(online) and len(demo) else (n if len(demo) else 0)
    parts = [(b.sample(m, generator), flag) for b, m, flag in ((demo, k, 1.0), (online, n - k, 0.0)) if m > 0]
    out = {f: torch.cat([p[f] for p, _ in parts]) for f in FIELDS}
    out["demo"] = torch.cat([torch.full((len(p["reward"]),), flag) for p, flag in parts])
    return out


def episode_transitions(obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, success: torch.Tensor,
                        intervened: torch.Tensor | None = None, version: torch.Tensor | None = None,
                        final_obs: torch.Tensor | None = None) -> list[dict[str, torch.Tensor]]:
    """The transitions of one recorded episode: obs [L, D] (the observations acted from),
    action [L, A], reward [L], success [L] (the step that succeeded terminates). The last
    transition needs final_obs [D] unless it terminated; without it, a truncated episode's last
    step is left out (nothing to bootstrap from)."""
    L = len(action)
    out = []
    for i in range(L):
        terminated = bool(success[i])
        if i + 1 < L:
            nxt = obs[i + 1]
        elif terminated:
            nxt = obs[i]  # not used: terminated transitions do not bootstrap
        elif final_obs is not None:
            nxt = final_obs
        else:
            continue
        out.append({"obs": obs[i], "action": action[i], "reward": reward[i], "next_obs": nxt,
                    "terminated": float(terminated),
                    "intervened": float(intervened[i]) if intervened is not None else 0.0,
                    "version": float(version[i]) if version is not None else -1.0})
        if terminated:
            break
    return out


def chunk_transition(steps: list[dict], chunk: int, gamma: float) -> dict:
    """One transition of an action chunk from the h = len(steps) <= chunk one-step transitions
    it executed, in order (fewer than chunk when the episode ended inside it): the first one's
    obs and version; action [chunk * A], the actions executed (the operator's where it was in
    control), zeros past the episode's end; reward sum_k gamma^k r_k; the last one's next_obs and
    terminated; steps h (the critic bootstraps with gamma^h); intervened if the operator acted
    in any of them. A single action (chunk 1) is its one transition as it is."""
    h = len(steps)
    if not 1 <= h <= chunk:
        raise ValueError(f"chunk_transition: {h} steps for a chunk of {chunk}")
    if chunk == 1:
        return {**steps[0], "steps": 1.0}
    first, last = steps[0], steps[-1]
    action = torch.cat([torch.as_tensor(s["action"]).float() for s in steps])
    action = torch.cat([action, action.new_zeros((chunk - h) * (len(action) // h))])
    reward = sum(gamma ** k * float(s["reward"]) for k, s in enumerate(steps))
    return {**first, "action": action, "reward": torch.tensor(reward, dtype=torch.float32),
            "next_obs": last["next_obs"], "terminated": float(last["terminated"]), "steps": float(h),
            "intervened": float(max(float(s["intervened"]) for s in steps))}


def chunk_transitions(ts: list[dict], chunk: int, gamma: float, stride: int | None = None) -> list[dict]:
    """One episode's one-step transitions (in order, from its first step) as chunk transitions
    starting every `stride` steps (default chunk: the chunks the actor executed; 1: a window at
    every step, each as valid an h-step transition, for demonstrations)."""
    stride = chunk if stride is None else stride
    return [chunk_transition(ts[i:i + chunk], chunk, gamma) for i in range(0, len(ts), stride)]
