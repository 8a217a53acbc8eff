"""A learned success classifier (`embodied reward train DATASET`): is this frame a success state?

Labels come from recorded episodes (LeRobot v3): a frame is a success state when an earlier step
of its episode reached success (`next.success` of the row before). The actor keeps the state a
success was seen in as one more row (actor.keep_success_frame), and with
actor.frames_after_success N frames past it, so its recordings hold positive frames;
demonstrations from `embodied collect` end at the success step and hold none.

  input   obs_key "state" / "privileged": float [N, D] -> MLP (normalised by the training frames)
          obs_key "rgb_<cam>": uint8 [N, H, W, 3] -> small CNN (3 strided convs, global pooling)
  split   by episode: train, validation (picks the threshold), test (reported); seeded
  output  safetensors: the weights; metadata: obs_key, shape, threshold, the test report

The threshold is the lowest score whose false-positive rate on the validation frames is at most
`fpr_target`: a false positive ends an episode wrongly and teaches the policy a lie. The test
report (AUROC, FPR, precision, recall, F1 at that threshold) is what to read before using the
classifier for RL (robot.success: classifier, reward_classifier: PATH in a finetune config).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from embodied.data.dataset import read_episodes
from embodied.data.layout import DatasetError


class RewardError(ValueError):
    """A classifier that does not fit its data or its robot; one line naming the field."""


# ---------------------------------------------------------------------------- data
def episode_frames(root: str | Path, obs_key: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per committed episode: (frames [L, ...], labels bool [L]); label j = success reached at a
    step before frame j."""
    out = []
    for ep in read_episodes(root):
        key = f"obs.{obs_key}"
        if key not in ep:
            raise DatasetError(f"{root}: episodes have no {key} (obs_key {obs_key!r}); "
                               f"they have {sorted(k[4:] for k in ep if k.startswith('obs.'))}")
        s = ep["success"].bool().reshape(-1)
        labels = torch.zeros_like(s)
        labels[1:] = torch.cummax(s.int(), 0).values[:-1].bool()
        out.append((ep[key], labels))
    return out


def split_episodes(n: int, fractions: tuple[float, float], seed: int) -> tuple[list[int], list[int], list[int]]:
    """Episode indices for train, validation and test (validation and test fractions given)."""
    perm = np.random.default_rng(seed).permutation(n).tolist()
    n_val, n_test = max(1, round(n * fractions[0])), max(1, round(n * fractions[1]))
    return perm[n_val + n_test:], perm[:n_val], perm[n_val:n_val + n_test]


# ---------------------------------------------------------------------------- the model
class SuccessNet(nn.Module):
    """frames -> logit [N]: an MLP for vectors [N, D], a small CNN for images uint8 [N, H, W, 3]."""

    def __init__(self, shape: Sequence[int], hidden: int = 64):
        super().__init__()
        self.shape = tuple(int(s) for s in shape)
        self.image = len(self.shape) == 3
        self.register_buffer("mean", torch.zeros(1 if self.image else self.shape[0]))
        self.register_buffer("std", torch.ones(1 if self.image else self.shape[0]))
        if self.image:
            self.body = nn.Sequential(
                nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        else:
            self.body = nn.Sequential(nn.Linear(self.shape[0], hidden), nn.LayerNorm(hidden), nn.ReLU(),
                                      nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.image:
            x = x.permute(0, 3, 1, 2).float() / 255.0
        x = (x.float() - self.mean) / self.std
        return self.body(x).squeeze(-1)


# ---------------------------------------------------------------------------- metrics
def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (rank statistic, ties counted half); nan with one class only."""
    from embodied.eval.stats import rankdata

    pos = labels.astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def threshold_for_fpr(scores: np.ndarray, labels: np.ndarray, fpr_target: float) -> float:
    """The lowest threshold t (success: score > t) whose false-positive rate on these frames is
    at most fpr_target."""
    neg = np.sort(scores[~labels.astype(bool)])[::-1]
    if len(neg) == 0:
        return 0.5
    allowed = int(np.floor(fpr_target * len(neg)))  # negatives that may score above t
    return float(neg[allowed]) if allowed < len(neg) else float(neg[-1]) - 1e-6


def report(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    y, pred = labels.astype(bool), scores > threshold
    tp, fp, fn = int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum())
    nan = lambda v: None if v != v else round(v, 4)  # noqa: E731
    return {"auroc": nan(auroc(scores, y)), "fpr": nan(fp / (~y).sum() if (~y).sum() else float("nan")),
            "precision": nan(tp / (tp + fp) if tp + fp else float("nan")),
            "recall": nan(tp / (tp + fn) if tp + fn else float("nan")),
            "f1": nan(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan")),
            "positives": int(y.sum()), "frames": int(len(y))}


# ---------------------------------------------------------------------------- training
@dataclass
class RewardTrainConfig:
    obs_key: str = "privileged"
    steps: int = 1500
    batch_size: int = 256
    lr: float = 1e-3
    hidden: int = 64
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    fpr_target: float = 0.01
    seed: int = 0


def _scores(net: SuccessNet, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return torch.cat([torch.sigmoid(net(x[i:i + 1024])) for i in range(0, len(x), 1024)]).numpy()


def train_classifier(root: str | Path, out: str | Path, cfg: RewardTrainConfig) -> dict[str, Any]:
    """Train on the train episodes, pick the threshold on validation, report on test; save to out."""
    torch.manual_seed(cfg.seed)
    eps = episode_frames(root, cfg.obs_key)
    if len(eps) < 3:
        raise DatasetError(f"{root}: {len(eps)} episodes; the train/validation/test split needs at least 3")
    tr, va, te = split_episodes(len(eps), (cfg.val_fraction, cfg.test_fraction), cfg.seed)
    cat = lambda ids: (torch.cat([eps[i][0] for i in ids]), torch.cat([eps[i][1] for i in ids]))  # noqa: E731
    (x, y), (xv, yv), (xt, yt) = cat(tr), cat(va), cat(te)
    if not y.any() or y.all():
        raise DatasetError(f"{root}: the training episodes hold {int(y.sum())} success frames of {len(y)}; "
                           "both kinds are needed (record with actor.keep_success_frame)")
    net = SuccessNet(x.shape[1:], cfg.hidden)
    if not net.image:
        net.mean.copy_(x.float().mean(0))
        net.std.copy_(x.float().std(0).clamp_min(1e-3))
    pos_weight = torch.tensor(float((~y).sum()) / float(y.sum()))  # classes weighted equally
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    g = torch.Generator().manual_seed(cfg.seed)
    for _ in range(cfg.steps):
        idx = torch.randint(len(x), (cfg.batch_size,), generator=g)
        loss = nn.functional.binary_cross_entropy_with_logits(net(x[idx]), y[idx].float(), pos_weight=pos_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    net.eval()
    threshold = threshold_for_fpr(_scores(net, xv), yv.numpy(), cfg.fpr_target)
    result = {"obs_key": cfg.obs_key, "shape": list(net.shape), "threshold": threshold, "fpr_target": cfg.fpr_target,
              "episodes": {"train": len(tr), "validation": len(va), "test": len(te)},
              "validation": report(_scores(net, xv), yv.numpy(), threshold),
              "test": report(_scores(net, xt), yt.numpy(), threshold),
              "dataset": str(root)}
    from safetensors.torch import save_file

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(out),
              metadata={"reward_classifier": json.dumps({**result, "hidden": cfg.hidden})})
    return {"out": str(out), **result}


# ---------------------------------------------------------------------------- use
class SuccessClassifier:
    """A trained classifier: `(obs) -> bool` on one robot observation (B = 1), as RobotEnv's
    success_fn; `check(...)` says in one line when it does not match the robot's observations."""

    def __init__(self, path: str | Path):
        from safetensors import safe_open
        from safetensors.torch import load_file

        try:
            with safe_open(str(path), "pt") as f:
                meta = json.loads((f.metadata() or {})["reward_classifier"])
        except (FileNotFoundError, KeyError, OSError, ValueError) as e:
            raise RewardError(f"reward_classifier: {path} is not a classifier from `embodied reward train` "
                              f"({type(e).__name__})") from None
        self.meta, self.obs_key, self.threshold = meta, meta["obs_key"], float(meta["threshold"])
        self.net = SuccessNet(meta["shape"], int(meta["hidden"]))
        self.net.load_state_dict(load_file(str(path)))
        self.net.eval()

    def check(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """shapes: the robot's observation keys -> per-frame shape (state (9,), rgb_front (64, 64, 3))."""
        want = tuple(self.meta["shape"])
        if self.obs_key not in shapes:
            raise RewardError(f"reward_classifier: reads {self.obs_key!r} {list(want)}; the robot's observations are "
                              + ", ".join(f"{k} {list(v)}" for k, v in sorted(shapes.items())))
        if tuple(shapes[self.obs_key]) != want:
            raise RewardError(f"reward_classifier: reads {self.obs_key!r} of shape {list(want)}; the robot's is "
                              f"{list(shapes[self.obs_key])}")

    def score(self, obs: dict[str, Any]) -> float:
        return float(_scores(self.net, obs[self.obs_key])[0])

    def __call__(self, obs: dict[str, Any]) -> bool:
        return self.score(obs) > self.threshold


def robot_obs_shapes(robot: Any) -> dict[str, tuple[int, ...]]:
    """The per-frame observation shapes a RobotEnvConfig gives (robot_bridge/robot_env.py)."""
    shapes: dict[str, tuple[int, ...]] = {"state": (9,) if robot.state_layout == "tabletop" else (2 * len(robot.joint_names),)}
    if robot.privileged_topic:
        shapes["privileged"] = (int(robot.privileged_dim),)
    if robot.ee_pose_topic:
        shapes["ee_pose"] = (7,)
    for cam in robot.image_topics:
        shapes[f"rgb_{cam}"] = (*(int(v) for v in robot.image_size), 3)
    return shapes


def classifier_for_robot(path: str | Path, robot: Any) -> SuccessClassifier:
    """The classifier at path, checked against the robot's observations (RewardError, one line)."""
    clf = SuccessClassifier(path)
    clf.check(robot_obs_shapes(robot))
    return clf
