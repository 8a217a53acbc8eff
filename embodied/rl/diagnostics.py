"""What an RL update tells about its own signal, per task where the batch holds several.

Every learner logs these (TensorBoard train/..., and a line of the console log per iteration,
embodied/rl/train.py); docs/rl.md, "Diagnostics", says what each one means:

    groups_any_success   share of GRPO groups (PPO: of env rows) whose episodes hold a success
    groups_mixed         share of GRPO groups whose members' success differs (a group with
                         a learning signal under binary rewards)
    adv_std              std of the advantages over the batch's samples
    adv_zero_frac        share of samples whose |advantage| < 1e-6 (no signal)
    clip_fraction, ratio, ratio_max, ratio_abs_dev   the clipped objective's ratios r
    kl_ref_rollout       KL(pi_behaviour || pi_ref) to the reference (the SFT policy), k3 on the
                         sampled actions, before the update
    noise_std            the exploration noise: the geometric mean std of the flow policy's
                         stochastic transitions, or of the Gaussian policy's actions (exp of the
                         per-element entropy minus its constant); entropy_per_element for any
                         policy with log_prob_parts

A key "name/<task>" is the same quantity over that task's samples only.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

ZERO_ADV = 1e-6
_GAUSS_ENT = 0.5 * (1.0 + math.log(2.0 * math.pi))  # entropy of N(0, 1) per element


def task_index(tasks: Sequence[str] | None, B: int) -> tuple[list[str], torch.Tensor] | None:
    """(sorted task names, int64 [B] index of each env's task) when the B envs run more than one
    task, else None (also when the labels are not the B envs': a shard of a trajectory)."""
    if tasks is None or len(set(tasks)) < 2 or len(tasks) != B:
        return None
    names = sorted(set(tasks))
    pos = {t: i for i, t in enumerate(names)}
    return names, torch.tensor([pos[t] for t in tasks], dtype=torch.long)


def per_task_mean(values: torch.Tensor, weights: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """values, weights float [N], index int64 [N] in [0, n) -> float [n] weighted mean per task
    (NaN where a task has no weight)."""
    w = weights.double()
    num = torch.zeros(n, dtype=torch.float64, device=values.device).index_add_(0, index, values.double() * w)
    den = torch.zeros(n, dtype=torch.float64, device=values.device).index_add_(0, index, w)
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.full_like(num, float("nan")))


def advantage_spread(adv: torch.Tensor, weight: torch.Tensor) -> dict[str, float]:
    """adv float [N], weight bool/float [N] (samples that count) -> adv_std (unbiased, over the
    counted samples) and adv_zero_frac."""
    a = adv[weight.bool()].double()
    if a.numel() == 0:
        return {"adv_std": float("nan"), "adv_zero_frac": float("nan")}
    std = a.std() if a.numel() > 1 else torch.zeros((), dtype=torch.float64)
    return {"adv_std": float(std), "adv_zero_frac": float((a.abs() < ZERO_ADV).double().mean())}


def group_signal(success: torch.Tensor, adv: torch.Tensor, group_ids: torch.Tensor,
                 tasks: Sequence[str] | None = None) -> dict[str, float]:
    """GRPO: success bool [B] (the episode succeeded), adv float [B] (its advantage), group_ids
    int64 [B], tasks B labels or None -> groups_any_success, groups_mixed, adv_std, adv_zero_frac,
    each also per task ("groups_any_success/<task>", ...) when the envs run several tasks."""
    success, group_ids = success.cpu().bool(), group_ids.cpu().long()
    adv = adv.detach().cpu()

    def one(sel: torch.Tensor) -> dict[str, float]:
        gids = group_ids[sel].unique()
        anys = torch.stack([success[sel & (group_ids == g)].any() for g in gids]).float()
        mixed = torch.stack([success[sel & (group_ids == g)].float().std() > 0 for g in gids]).float()
        return {"groups_any_success": float(anys.mean()), "groups_mixed": float(mixed.mean()),
                **advantage_spread(adv, sel)}

    out = one(torch.ones_like(success))
    ti = task_index(tasks, len(success))
    if ti is not None:
        for i, name in enumerate(ti[0]):
            out.update({f"{k}/{name}": v for k, v in one(ti[1] == i).items()})
    return out


def rollout_signal(success: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                   tasks: Sequence[str] | None = None) -> dict[str, float]:
    """PPO: success bool [T, B], adv float [T, B] or [T, B, n], mask bool of adv's shape (the
    samples that count) -> groups_any_success (the share of env rows with a success in this
    rollout), adv_std, adv_zero_frac; per task as in group_signal."""
    success, adv, mask = success.cpu().bool(), adv.detach().cpu(), mask.cpu().bool()
    rows = success.any(0).float()  # [B]
    B = rows.shape[0]
    flat_t = torch.arange(B)[None, :].expand(success.shape).reshape(-1)  # [T * B] env of each step
    if adv.dim() == 3:
        flat_t = flat_t[:, None].expand(-1, adv.shape[2]).reshape(-1)
    a, m = adv.reshape(-1), mask.reshape(-1)

    def one(env_sel: torch.Tensor) -> dict[str, float]:
        return {"groups_any_success": float(rows[env_sel].mean()), **advantage_spread(a, m & env_sel[flat_t])}

    out = one(torch.ones(B, dtype=torch.bool))
    ti = task_index(tasks, B)
    if ti is not None:
        for i, name in enumerate(ti[0]):
            out.update({f"{k}/{name}": v for k, v in one(ti[1] == i).items()})
    return out


def elements_per_sample(replay: dict[str, torch.Tensor], parts: torch.Tensor | None) -> torch.Tensor | None:
    """float [N]: how many Gaussian elements a sample's entropy sums (None when unknown): the flow
    policy's stochastic steps x K x A (replay["stochastic"] bool [N, S], parts [N, K, A]), else the
    parts' P x A for a Gaussian policy."""
    if parts is None:
        return None
    per = float(parts.shape[1] * parts.shape[2])
    if "stochastic" in replay:
        return replay["stochastic"].float().sum(1).to(parts.device) * per
    return torch.full(parts.shape[:1], per, device=parts.device)


def noise_stats(entropy: torch.Tensor, elements: torch.Tensor | None, gaussian: bool) -> dict[str, torch.Tensor]:
    """entropy float [N] (summed over a sample's elements), elements float [N] or None ->
    {"entropy_per_element", and "noise_std" where every element is a Gaussian (the flow VLA's
    transitions, the MLP / CNN policy's actions): exp(mean per-element entropy - 0.5 log(2 pi e)),
    the geometric mean of the stds}, detached scalars."""
    if elements is None:
        return {}
    keep = elements > 0
    if not keep.any():
        return {}
    per = (entropy.detach().float()[keep] / elements[keep]).mean()
    out = {"entropy_per_element": per}
    if gaussian:
        out["noise_std"] = torch.exp(per - _GAUSS_ENT)
    return out


class TaskTally:
    """Sums of per-sample quantities by task over an update's minibatches: add(name, values [M],
    weights [M], task index [M]) -> means() {"name/<task>": mean}."""

    def __init__(self, names: list[str]):
        self.names = names
        self.num: dict[str, torch.Tensor] = {}
        self.den: dict[str, torch.Tensor] = {}

    def add(self, key: str, values: torch.Tensor, weights: torch.Tensor, index: torch.Tensor) -> None:
        n = len(self.names)
        w = weights.detach().double().cpu()
        idx = index.cpu()
        num = torch.zeros(n, dtype=torch.float64).index_add_(0, idx, values.detach().double().cpu() * w)
        den = torch.zeros(n, dtype=torch.float64).index_add_(0, idx, w)
        self.num[key] = self.num.get(key, 0) + num
        self.den[key] = self.den.get(key, 0) + den

    def means(self) -> dict[str, float]:
        out = {}
        for key, num in self.num.items():
            den = self.den[key]
            for i, name in enumerate(self.names):
                if den[i] > 0:
                    out[f"{key}/{name}"] = float(num[i] / den[i])
        return out


def row_means(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x float [M, L], mask bool/float [M, L] -> (per-row masked mean [M], per-row weight [M])."""
    m = mask.to(x.dtype)
    w = m.sum(1)
    return (x * m).sum(1) / w.clamp_min(1e-12), w


def summary_line(it: int, stats: dict[str, Any]) -> str:
    """One console line of an iteration's diagnostics (the keys that are present)."""
    keys = (("groups_any_success", "any-success"), ("groups_mixed", "mixed"), ("kept_groups", "kept"),
            ("adv_std", "adv std"), ("adv_zero_frac", "adv~0"), ("clip_fraction", "clip"),
            ("ratio_max", "ratio max"), ("ratio_abs_dev", "|r-1|"), ("approx_kl", "kl"),
            ("kl_ref_rollout", "kl ref"), ("noise_std", "noise"), ("bc_loss", "bc"),
            ("collects", "collects"))
    parts = [f"{label} {stats[k]:.3g}" for k, label in keys if k in stats]
    return f"iter {it} diag: " + ", ".join(parts)


def per_task_line(stats: dict[str, Any], keys: Sequence[str] = ("groups_any_success", "adv_std", "clip_fraction",
                                                                "kl_ref_rollout")) -> str | None:
    """'  task: any-success 0.5 adv std 0.1 ...' per task (None without per-task keys)."""
    tasks = sorted({k.split("/", 1)[1] for k in stats if "/" in k and k.split("/", 1)[0] in keys})
    if not tasks:
        return None
    rows = []
    for t in tasks:
        vals = " ".join(f"{k}={stats[f'{k}/{t}']:.3g}" for k in keys if f"{k}/{t}" in stats)
        rows.append(f"  {t}: {vals}")
    return "per task:\n" + "\n".join(rows)
