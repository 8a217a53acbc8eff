"""meta/stats.json: per-feature statistics, accumulated episode by episode.

For every feature: min, max, mean, std, count and the quantiles q01, q10, q50, q90, q99
(what LeRobot's compute_stats writes; pi0.5 normalises with q01 / q99). count is frames, also
for images. Images are per channel, in [0, 1], shaped [3, 1, 1]; their statistics run over
every pixel of every frame.

min, max, mean and std are exact over the whole dataset. The quantiles are exact per episode
and averaged over episodes weighted by frame count, as LeRobot aggregates them: an
approximation, but one that an appended episode updates without reading the others again.
A dataset written before quantiles existed keeps none until it is written anew.
"""

from __future__ import annotations

from typing import Any

import numpy as np

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


class RunningStats:
    """Per feature: frame count, count-weighted sums of mean, mean square and quantiles; min, max."""

    def __init__(self) -> None:
        self.acc: dict[str, dict[str, Any]] = {}

    def update(self, name: str, x: np.ndarray, frames: int, image: bool = False) -> None:
        """x: float64 [n, D], the episode's values of `name` (images: all pixels, [L*H*W, 3]);
        frames: the episode's frame count L (= n for non-images)."""
        q = np.quantile(x, list(QUANTILES.values()), axis=0)  # [5, D]
        a = self.acc.setdefault(name, {"count": 0, "sum": 0.0, "sumsq": 0.0, "min": None, "max": None,
                                       "image": image, "q": 0.0})
        a["count"] += frames
        a["sum"] = a["sum"] + x.mean(0) * frames
        a["sumsq"] = a["sumsq"] + (x * x).mean(0) * frames
        a["min"] = x.min(0) if a["min"] is None else np.minimum(a["min"], x.min(0))
        a["max"] = x.max(0) if a["max"] is None else np.maximum(a["max"], x.max(0))
        a["q"] = None if a["q"] is None else a["q"] + q * frames

    def to_json(self) -> dict[str, Any]:
        out = {}
        for name, a in self.acc.items():
            n = a["count"]
            mean = a["sum"] / n
            std = np.sqrt(np.maximum(a["sumsq"] / n - mean**2, 0.0))
            shape = (-1, 1, 1) if a["image"] else (-1,)  # LeRobot keeps image stats as [3, 1, 1]
            values = [("mean", mean), ("std", std), ("min", a["min"]), ("max", a["max"])]
            if a["q"] is not None:
                values += [(k, a["q"][i] / n) for i, k in enumerate(QUANTILES)]
            out[name] = {k: np.asarray(v, dtype=np.float64).reshape(shape).tolist() for k, v in values}
            out[name]["count"] = [int(n)]
        return out

    @classmethod
    def from_json(cls, stats: dict[str, Any]) -> "RunningStats":
        self = cls()
        for name, s in stats.items():
            flat = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in s.items() if k != "count"}
            n = int(s["count"][0])
            has_q = all(k in flat for k in QUANTILES)
            self.acc[name] = {"count": n, "sum": flat["mean"] * n, "sumsq": (flat["std"]**2 + flat["mean"]**2) * n,
                              "min": flat["min"], "max": flat["max"], "image": np.asarray(s["mean"]).ndim == 3,
                              "q": np.stack([flat[k] for k in QUANTILES]) * n if has_q else None}
        return self
