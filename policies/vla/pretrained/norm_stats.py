"""Normalisation statistics of released checkpoints, as an exact centre and scale.

Every mode the formats use is an affine map per dimension, x_norm = (x - centre) / scale,
so the policy's Stats buffers (named mean / std) hold centre and scale and saving /
reloading keeps them bit for bit:
  LeRobot MEAN_STD:   (x - mean) / (std + eps)               centre mean, scale std + eps
  LeRobot QUANTILES:  2 (x - q01) / (q99 - q01) - 1          centre (q01 + q99) / 2, scale (q99 - q01) / 2
  openpi z-score:     (x - mean) / (std + 1e-6)              centre mean, scale std + 1e-6
  openpi quantile:    2 (x - q01) / (q99 - q01 + 1e-6) - 1   centre q01 + d / 2, scale d / 2, d = q99 - q01 + 1e-6
(LeRobot replaces a zero span by eps; LeRobot unnormalises MEAN_STD with std, not std + eps:
a relative difference of eps = 1e-8, below float32 resolution.) A missing statistic, a
missing stats file or an unknown mode is a one-line error: wrong statistics show up only as
bad actions, so nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from policies.vla.pretrained.files import PretrainedError, read_json, read_safetensors

MODES = ("mean_std", "quantile")
_LEROBOT_MODES = {"MEAN_STD": "mean_std", "QUANTILES": "quantile"}


@dataclass
class Affine:
    """centre, scale float32 [D] and where they came from."""

    centre: torch.Tensor
    scale: torch.Tensor
    mode: str
    source: str


def affine(stats: dict[str, Any], mode: str, eps: float, zero_span: str, where: str) -> Affine:
    """stats {"mean","std"} or {"q01","q99"} -> Affine. zero_span: "add" (eps added to the
    span, openpi) or "replace" (a zero span becomes eps, LeRobot)."""
    if mode not in MODES:
        raise PretrainedError(f"{where}: normalisation mode {mode!r} is not supported; allowed: {', '.join(MODES)}")
    need = ("mean", "std") if mode == "mean_std" else ("q01", "q99")
    missing = [n for n in need if n not in stats]
    if missing:
        raise PretrainedError(f"{where}: {mode} normalisation needs {list(need)}; missing {missing}")
    a, b = (torch.as_tensor(stats[n], dtype=torch.float64).flatten() for n in need)
    if a.shape != b.shape:
        raise PretrainedError(f"{where}: {need[0]} has {a.numel()} values, {need[1]} {b.numel()}")
    if mode == "mean_std":
        centre, scale = a, b + eps
    else:
        span = b - a + eps if zero_span == "add" else torch.where(b - a == 0, torch.full_like(a, eps), b - a)
        centre, scale = a + span / 2, span / 2
    if not bool((scale > 0).all()):
        raise PretrainedError(f"{where}: the {mode} scale is not positive in dims "
                              f"{torch.nonzero(scale <= 0).flatten().tolist()[:5]}")
    return Affine(centre.float(), scale.float(), mode, where)


def _step(pipeline: dict[str, Any], name: str, where: Path) -> dict[str, Any]:
    for step in pipeline.get("steps", []):
        if step.get("registry_name") == name:
            return step
    raise PretrainedError(f"{where}: no {name!r} step; the checkpoint has no normalisation statistics")


def lerobot(directory: Path, config: dict[str, Any], state_key: str = "observation.state",
            action_key: str = "action") -> tuple[Affine, Affine]:
    """State (from the preprocessor's normalizer) and action (from the postprocessor's
    unnormalizer) statistics of a LeRobot policy directory."""
    out = []
    for pipe, step_name, key, kind in (("policy_preprocessor.json", "normalizer_processor", state_key, "STATE"),
                                       ("policy_postprocessor.json", "unnormalizer_processor", action_key, "ACTION")):
        pipeline = read_json(directory / pipe, "LeRobot processor pipeline")
        step = _step(pipeline, step_name, directory / pipe)
        cfg = step.get("config", {})
        norm_map = cfg.get("norm_map") or config.get("normalization_mapping") or {}
        lerobot_mode = norm_map.get(kind)
        if lerobot_mode not in _LEROBOT_MODES:
            raise PretrainedError(f"{directory / pipe}: {kind} normalisation {lerobot_mode!r} is not supported; "
                                  f"allowed: {', '.join(_LEROBOT_MODES)}")
        state_file = step.get("state_file")
        if not state_file:
            raise PretrainedError(f"{directory / pipe}: the {step_name} step names no state_file")
        tensors = read_safetensors(directory / state_file, "normalisation statistics")
        stats = {k[len(key) + 1:]: v for k, v in tensors.items() if k.startswith(key + ".")}
        out.append(affine(stats, _LEROBOT_MODES[lerobot_mode], float(cfg.get("eps", 1e-8)), "replace",
                          f"{directory / state_file}:{key}"))
    return out[0], out[1]


def openpi(directory: Path, asset_id: str | None, mode: str | None) -> tuple[Affine, Affine]:
    """State and action statistics from assets/<asset_id>/norm_stats.json of an openpi export.
    mode: "mean_std" (openpi's z-score, pi0's default) or "quantile" (pi0.5, pi0-FAST); the
    export does not record it, so the input map must say."""
    assets = directory / "assets"
    ids = sorted(str(p.parent.relative_to(assets)) for p in assets.rglob("norm_stats.json")) if assets.is_dir() else []
    if asset_id is None:
        if len(ids) != 1:
            raise PretrainedError(f"{assets}: {len(ids)} asset dirs with norm_stats.json ({ids}); "
                                  "set asset_id in the input map")
        asset_id = ids[0]
    path = assets / asset_id / "norm_stats.json"
    data = read_json(path, "openpi normalisation statistics")
    norm = data.get("norm_stats", data)
    if mode is None:
        raise PretrainedError(f"{path}: openpi exports do not record the normalisation; set normalization "
                              f"({' or '.join(MODES)}) in the input map")
    out = []
    for key in ("state", "actions"):
        if key not in norm:
            raise PretrainedError(f"{path}: no {key!r} statistics (has {sorted(norm)})")
        out.append(affine(norm[key], mode, 1e-6, "add", f"{path}:{key}"))
    return out[0], out[1]


def apply(policy: Any, state: Affine, action: Affine) -> None:
    """Set the policy's state / action buffers (their widths must match the checkpoint's)."""
    for stats, aff, name in ((policy.state_stats, state, "state"), (policy.action_stats, action, "action")):
        if aff.centre.numel() != stats.mean.numel():
            raise PretrainedError(f"{aff.source}: {aff.centre.numel()} {name} dims in the statistics, "
                                  f"{stats.mean.numel()} in the model")
        stats.set(aff.centre, aff.scale, min_std=0.0)
