"""The world model's quality report (`embodied world-model eval`), on held-out episodes.

k-step error: from every frame t with a recorded frame t+k, the ensemble-mean rollout
(what WorldModelVecEnv steps) under the recorded actions predicts x_{t+k}; its relative
error is ||x_hat - x_{t+k}|| / ||x_{t+k}|| on the raw privileged vector (and on its state part),
averaged over starts; episodes shorter than k + 1 frames add no start.
The copy-last baseline predicts x_t. With cameras, the frames decoded from the same latent
at t+k (composited over frame t, the last real frame) are scored too: pixel MSE (pixels in [0, 1], mean over pixels, channels, cameras and
starts) and the PSNR of that mean MSE, 10 log10(1 / MSE), for the model and for copy-last
(frame t). Success head: per step, the probability against the recorded success flag: AUROC,
and at threshold 0.5 F1 and the false-positive rate. A model with member heads is scored with
their mean ("success_head") and their minimum ("success_head_min").
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from embodied.world_model.windows import Episode
from sims.world_model.model import WorldModel
from sims.world_model.rollout import encode_raw, mean_step


@torch.no_grad()
def kstep_errors(model: WorldModel, episodes: Sequence[Episode], k: int) -> dict[str, Any]:
    """{"model", "copy_last": mean relative error at k of the privileged vector; "model_state",
    "copy_last_state": of the state (its first state_dim entries); with cameras "image_mse",
    "image_psnr", "copy_last_image_mse", "copy_last_image_psnr"; "starts": n}."""
    from sims.world_model.vision import to_unit

    S = model.cfg.state_dim
    names = ["model", "copy_last", "model_state", "copy_last_state"]
    images = bool(model.cfg.cameras)
    names += ["image_mse", "copy_last_image_mse"] if images else []
    errs: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    for ep in episodes:
        L = len(ep.x)
        if L <= k:
            continue
        starts = torch.arange(L - k)
        z = encode_raw(model, ep.x[starts], ep.img[starts] if images else None)
        for j in range(k):
            out = mean_step(model, z, ep.a[starts + j])
            z = out["z"]
        target = ep.x[starts + k]
        for suffix, cut in (("", None), ("_state", S)):
            t = target[:, :cut]
            norm = t.norm(dim=-1).clamp(min=1e-6)
            errs["model" + suffix].append((out["x"][:, :cut] - t).norm(dim=-1) / norm)
            errs["copy_last" + suffix].append((ep.x[starts][:, :cut] - t).norm(dim=-1) / norm)
        if images:
            frame = to_unit(ep.img[starts + k])
            pred = model.decode_images(z, ep.img[starts])  # composited over frame t, the last real one
            errs["image_mse"].append(((pred - frame) ** 2).mean(dim=(1, 2, 3)))
            errs["copy_last_image_mse"].append(((to_unit(ep.img[starts]) - frame) ** 2).mean(dim=(1, 2, 3)))
    if not errs["model"]:
        out = {n: float("nan") for n in errs}
        if images:
            out.update(image_psnr=float("nan"), copy_last_image_psnr=float("nan"))
        return {**out, "starts": 0}
    res = {n: float(torch.cat(v).mean()) for n, v in errs.items()}
    for name in ("image", "copy_last_image") if images else ():
        res[f"{name}_psnr"] = psnr(res[f"{name}_mse"])
    return {**res, "starts": int(len(torch.cat(errs["model"])))}


def psnr(mse: float) -> float:
    """Peak signal-to-noise ratio in dB of a pixel MSE (pixels in [0, 1]); inf for 0."""
    return float("inf") if mse <= 0 else float(10.0 * np.log10(1.0 / mse))


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (rank statistic, ties counted half); nan with one class only."""
    from embodied.eval.stats import rankdata

    pos, neg = labels.astype(bool), ~labels.astype(bool)
    if pos.sum() == 0 or neg.sum() == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * neg.sum()))


@torch.no_grad()
def success_head_report(model: WorldModel, episodes: Sequence[Episode], aggregate: str = "mean") -> dict[str, float]:
    """AUROC, F1 and false-positive rate of the success head, one-step from recorded frames
    (the last step of an episode included: its next latent comes from the model); aggregate:
    how member heads combine (rollout.mean_step)."""
    probs, labels = [], []
    for ep in episodes:
        out = mean_step(model, encode_raw(model, ep.x, ep.img if model.cfg.cameras else None), ep.a, aggregate)
        probs.append(out["success_p"])
        labels.append(ep.s > 0.5)
    p, y = torch.cat(probs).numpy(), torch.cat(labels).numpy()
    pred = p > 0.5
    tp, fp, fn = int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum())
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan")
    return {"auroc": auroc(p, y), "f1": f1, "fpr": fp / max(int((~y).sum()), 1),
            "positives": int(y.sum()), "steps": int(len(y))}


def _null_nan(d: dict[str, Any]) -> dict[str, Any]:
    return {k: None if isinstance(v, float) and v != v else v for k, v in d.items()}


def report(model: WorldModel, episodes: Sequence[Episode], ks: Sequence[int] = (1, 8, 32)) -> dict[str, Any]:
    """The quality report; a metric that has no data (k longer than every episode, one class
    only) is None."""
    out = {"episodes": len(episodes), "kstep": {str(k): _null_nan(kstep_errors(model, episodes, k)) for k in ks},
           "success_head": _null_nan(success_head_report(model, episodes))}
    if model.cfg.member_heads:
        out["success_head_min"] = _null_nan(success_head_report(model, episodes, "min"))
    return out


GATE_MIN_AUROC = 0.8  # the success head must separate success from failure steps at least this well
GATE_MAX_FPR = 0.1  # and call at most this share of failure steps a success (a policy inside it would "succeed")


def quality_gate(rep: dict[str, Any]) -> tuple[bool, str]:
    """(passed, why) of a quality report: the model's k-step error must be below copy-last's at
    every k that has data, and its success head must reach GATE_MIN_AUROC with a false-positive
    rate <= GATE_MAX_FPR where the episodes hold both classes. A model that fails it is refused
    as an env (sims/world_model/env.py) unless env.allow_failed_model=true."""
    for k, row in rep.get("kstep", {}).items():
        m, c = row.get("model"), row.get("copy_last")
        if m is not None and c is not None and not m < c:
            return False, f"its {k}-step error {m:.3f} is not below copy-last's {c:.3f}"
    head = rep.get("success_head") or {}
    if head.get("auroc") is not None and head["auroc"] < GATE_MIN_AUROC:
        return False, f"its success head's AUROC {head['auroc']:.2f} is below {GATE_MIN_AUROC}"
    if head.get("fpr") is not None and head.get("auroc") is not None and head["fpr"] > GATE_MAX_FPR:
        return False, (f"its success head calls {head['fpr']:.0%} of failure steps a success "
                       f"(allowed: <= {GATE_MAX_FPR:.0%})")
    return True, "k-step error below copy-last at every k, success head AUROC and false-positive rate within bounds"


def verdict(rep: dict[str, Any]) -> str:
    """One line: better or worse than copy-last at the largest k with data, and the gate."""
    rows = [(int(k), r) for k, r in rep.get("kstep", {}).items() if r.get("model") is not None]
    passed, why = quality_gate(rep)
    gate = f"quality gate {'passed' if passed else 'FAILED'}: {why}"
    if not rows:
        return f"verdict: no k-step error (episodes too short); {gate}"
    k, r = max(rows, key=lambda kr: kr[0])
    better = r["model"] < r["copy_last"]
    return (f"verdict: {'better' if better else 'worse'} than copy-last at k={k} ({r['model']:.3f} vs "
            f"{r['copy_last']:.3f}); {gate}")
