"""Training: a multi-step (autoregressive) loss over k-step windows, every member rolling its
own latent from the encoded first frame; early stopping on the held-out k-step error.

Every member trains on its own bootstrap resample of the windows. With init_from, training
continues from a checkpoint's weights and normalisation (e.g. on its data plus new rollouts).
Loss per window = reconstruction of the first frame + sum over the k steps of the members'
normalised state error (masked where the episode has no next frame) + reward MSE + BCE of
the success and done heads. With cameras (not with heads_only), the loss adds image_weight times the pixel MSE of
the frames decoded from the members' mean latent at every step (the latent the env steps
with), composited over the window's first frame (so the first frame itself needs no
reconstruction term). The held-out metric is the members' mean
normalised k-step state error, plus with cameras the k-step pixel MSE divided by the training
frames' pixel variance; the weights of its best epoch are kept. The uncertainty threshold is
`uncertainty_margin` times the 99th percentile of the ensemble-mean rollout's disagreement
over the held-out windows.

With heads_only (and init_from), the loaded encoder, members and decoder stay fixed and only
freshly initialised heads train (for example heads of another head_input, or one per member,
on a trained model's dynamics); the held-out metric is then the heads' loss on the held-out
windows.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from sims.vecenv import EnvError
from embodied.world_model.windows import Episode, frames, load_episodes, split, windows
from embodied.run.device import resolve_device, to_device
from sims.world_model.model import (DELTA_WEIGHT_CAP, HEAD_INPUTS, LATENT_SPACES, STATE_LOSSES, WorldModel,
                                    WorldModelConfig)
from embodied.world_model.noise import fit_noise_head, residual_std
from sims.world_model.rollout import mean_step
from sims.world_model.vision import to_unit


def _check(cfg: WorldModelConfig) -> None:
    for name, lo in (("members", 5), ("latent", 1), ("hidden", 1), ("horizon_k", 1), ("epochs", 1),
                     ("batch_size", 1), ("patience", 1), ("member_layers", 1)):
        if not isinstance(getattr(cfg, name), int) or getattr(cfg, name) < lo:
            raise EnvError(f"world_model.{name}: expected an integer >= {lo}, got {getattr(cfg, name)!r}")
    cams = cfg.cameras
    if not isinstance(cams, list) or not all(isinstance(c, str) and c for c in cams) or len(set(cams)) != len(cams):
        raise EnvError(f"world_model.cameras: expected a list of distinct camera names, e.g. [front, wrist], got {cams!r}")
    if cams and (not isinstance(cfg.channels, int) or cfg.channels < 1):
        raise EnvError(f"world_model.channels: expected an integer >= 1, got {cfg.channels!r}")
    if not 0.0 < cfg.holdout < 1.0:
        raise EnvError(f"world_model.holdout: expected a fraction in (0, 1), got {cfg.holdout!r}")
    if not cfg.dataset:
        raise EnvError("world_model.dataset: no dataset given; pass dataset=PATH (a LeRobot v3 dataset)")
    if cfg.state_loss not in STATE_LOSSES:
        raise EnvError(f"world_model.state_loss: {cfg.state_loss!r} is not built; "
                       f"allowed: {', '.join(STATE_LOSSES)}")
    if cfg.latent_space not in LATENT_SPACES:
        raise EnvError(f"world_model.latent_space: {cfg.latent_space!r} is not built; "
                       f"allowed: {', '.join(LATENT_SPACES)}")
    if not isinstance(cfg.consistent, bool):
        raise EnvError(f"world_model.consistent: expected true or false, got {cfg.consistent!r}")
    if cfg.consistent and cfg.latent_space != "state":
        raise EnvError("world_model.consistent: recomputes fields of the state latent; needs latent_space=state, "
                       f"got {cfg.latent_space!r}")
    if cfg.consistent:
        from sims.mujoco.tasks.registry import task_classes

        tasks = task_classes()
        if cfg.task not in tasks or not tasks[cfg.task].differences:
            raise EnvError(f"world_model.consistent: task {cfg.task} declares no derived fields; allowed for: "
                           f"{', '.join(t for t in sorted(tasks) if tasks[t].differences)}")
    if cfg.latent_space == "state" and cams:
        raise EnvError("world_model.latent_space: 'state' models the privileged vector only; "
                       "with cameras allowed: learned")
    if cfg.head_input not in HEAD_INPUTS:
        raise EnvError(f"world_model.head_input: {cfg.head_input!r} is not built; allowed: {', '.join(HEAD_INPUTS)}")
    for name in ("member_heads", "heads_only", "noise_head"):
        if not isinstance(getattr(cfg, name), bool):
            raise EnvError(f"world_model.{name}: expected true or false, got {getattr(cfg, name)!r}")
    if cfg.heads_only and not cfg.init_from:
        raise EnvError("world_model.heads_only: trains new heads on a trained model's dynamics; "
                       "it needs init_from=CHECKPOINT")


def window_loss(model: WorldModel, w: dict[str, torch.Tensor],
                weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(training loss, per-window held-out metric [N], per-window heads' loss [N]) of windows w
    (with cameras, w["img"]: uint8 [N, k+1, 3C, H, W], see batch()); weights [M, N]: each
    member's bootstrap weight of each window (None: all 1)."""
    x = model.normalize(w["x"])  # [N, k+1, P]
    img = w.get("img")
    z0 = model.encode(x[:, 0], None if img is None else img[:, 0])
    loss = model.state_error(model.decode(z0), x[:, 0]).mean()
    z, k = z0, w["a"].shape[1]
    err, head_err = torch.zeros(len(x), device=x.device), torch.zeros(len(x), device=x.device)
    wm = torch.ones(len(model.members), len(x), device=x.device) if weights is None else weights
    for j in range(k):
        a = w["a"][:, j]
        z = model.step_members(z, a)  # [M, N, Z]
        se = model.state_error(model.decode(z), x[None, :, j + 1])  # [M, N]
        om, sm = w["obs_mask"][:, j] * wm, w["step_mask"][:, j] * wm
        r, s, d = model.head(z, a.expand(len(z), -1, -1))
        hl = (r - w["r"][:, j]) ** 2
        hl = hl + F.binary_cross_entropy_with_logits(s, w["s"][:, j].expand_as(s), reduction="none")
        hl = hl + F.binary_cross_entropy_with_logits(d, w["d"][:, j].expand_as(d), reduction="none")
        loss = loss + (se * om).sum() / om.sum().clamp(min=1) + (hl * sm).sum() / sm.sum().clamp(min=1)
        err = err + se.detach().mean(dim=0) * w["obs_mask"][:, j]
        head_err = head_err + hl.detach().mean(dim=0) * w["step_mask"][:, j]
        if img is not None and not model.cfg.heads_only:  # frames decoded from the members' mean latent
            pred = model.decode_images(z.mean(dim=0), img[:, 0])  # composited over the window's first frame
            pe = ((pred - to_unit(img[:, j + 1])) ** 2).mean(dim=(1, 2, 3))  # [N]
            m = w["obs_mask"][:, j]
            loss = loss + model.cfg.image_weight * (pe * m).sum() / m.sum().clamp(min=1)
            err = err + pe.detach() / model.pixel_var * m
    return (loss, err / w["obs_mask"].sum(dim=1).clamp(min=1),
            head_err / w["step_mask"].sum(dim=1).clamp(min=1))


def batch(w: dict[str, torch.Tensor], frames_: torch.Tensor | None, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Windows idx of w; with frames, "img": uint8 [n, k+1, 3C, H, W] gathered through "frame"."""
    out = {k: v[idx] for k, v in w.items()}
    if frames_ is not None:
        out["img"] = frames_[out.pop("frame")]
    return out


def _chunks(w: dict[str, torch.Tensor], frames_: torch.Tensor | None, size: int = 256):
    for idx in torch.arange(len(w["x"])).split(size):
        yield batch(w, frames_, idx)


def _fit_normalizer(model: WorldModel, train: list[Episode]) -> None:
    x = torch.cat([ep.x for ep in train])
    model.mean.copy_(x.mean(dim=0))
    model.std.copy_(x.std(dim=0).clamp(min=1e-3))
    dx = torch.cat([ep.x[1:] - ep.x[:-1] for ep in train])
    if model.cfg.latent_space == "state":  # members predict changes in units of their std
        model.delta_scale.copy_(dx.std(dim=0) / model.std)
    if model.cfg.state_loss == "delta":  # (state std / one-step change std)^2, in [1, cap^2], mean 1
        ratio = (model.std / dx.std(dim=0).clamp(min=1e-9)).clamp(1.0, DELTA_WEIGHT_CAP)
        model.loss_weight.copy_(ratio**2 / (ratio**2).mean())
    if model.cfg.cameras:
        img = to_unit(torch.cat([ep.img for ep in train]))
        model.pixel_var.copy_(img.var().clamp(min=1e-6))


def _continue_from(model: WorldModel, cfg: WorldModelConfig) -> None:
    """Start from cfg.init_from's weights and normalisation (the same task and sizes); with
    heads_only, everything but its heads (the new heads may be of another design)."""
    from sims.world_model.checkpoint import load_world_model

    prev, _ = load_world_model(cfg.init_from, cfg.task)
    sizes = ("privileged_dim", "action_dim", "latent", "hidden", "members", "cameras", "channels", "image_size",
             "state_loss", "latent_space", "member_layers", "consistent")
    sizes += () if cfg.heads_only else ("head_input", "member_heads")
    bad = [n for n in sizes if getattr(prev.cfg, n) != getattr(cfg, n)]
    if bad:
        raise EnvError(f"world_model.init_from: {cfg.init_from} has {bad[0]}={getattr(prev.cfg, bad[0])!r}, "
                       f"this config {getattr(cfg, bad[0])!r}; continue only a model of the same shape")
    # the noise head is fit afresh after training (embodied/world_model/noise.py)
    state = {k: v for k, v in prev.state_dict().items() if not k.startswith("noise_net.")}
    state.update({k: v for k, v in model.state_dict().items() if k.startswith("noise_net.")})
    if cfg.heads_only:
        state = {k: v for k, v in state.items() if not k.startswith("heads.")}
        state.update({k: v for k, v in model.state_dict().items() if k.startswith("heads.")})
    model.load_state_dict(state)


@torch.no_grad()
def heldout_error(model: WorldModel, w: dict[str, torch.Tensor], frames_: torch.Tensor | None = None) -> float:
    """The held-out k-step error, or with heads_only the heads' held-out loss."""
    col = 2 if model.cfg.heads_only else 1
    return float(torch.cat([window_loss(model, b)[col] for b in _chunks(w, frames_)]).mean())


@torch.no_grad()
def disagreement_threshold(model: WorldModel, w: dict[str, torch.Tensor], margin: float,
                           frames_: torch.Tensor | None = None) -> float:
    dis = []
    for b in _chunks(w, frames_):
        z = model.encode(model.normalize(b["x"][:, 0]), None if frames_ is None else b["img"][:, 0])
        for j in range(b["a"].shape[1]):
            out = mean_step(model, z, b["a"][:, j])
            dis.append(out["disagreement"][b["step_mask"][:, j] > 0])
            z = out["z"]
    return float(margin * torch.quantile(torch.cat(dis), 0.99))


@torch.no_grad()
def member_disagreement_threshold(model: WorldModel, episodes: list[Episode], margin: float,
                                  horizon: int) -> float:
    """margin x the 99th percentile of the members' spread (WorldModel.disagreement) when every
    member rolls its own latent from each held-out episode's first frame under the recorded
    actions, for up to `horizon` steps: the env's "members" rollout on data it should trust."""
    dis = []
    for ep in episodes:
        img = None if ep.img is None else ep.img[:1]
        zm = model.encode(model.normalize(ep.x[:1]), img).expand(len(model.members), -1, -1)
        for j in range(min(len(ep.a), horizon)):
            zm = model.step_members(zm, ep.a[j:j + 1])
            dis.append(model.disagreement(zm))
    return float(margin * torch.quantile(torch.cat(dis), 0.99))


def resets_of(episodes: list[Episode], keyframe_every: int) -> dict[str, Any]:
    """Reset states: every episode's first frame, plus every keyframe_every-th frame if > 0
    (with cameras, their frames too: "img" uint8 [N, 3C, H, W])."""
    xs, ts, instr, imgs = [], [], [], []
    for ep in episodes:
        starts = range(0, len(ep.x), keyframe_every) if keyframe_every > 0 else [0]
        for t in starts:
            xs.append(ep.x[t])
            ts.append(t)
            instr.append(ep.instruction)
            if ep.img is not None:
                imgs.append(ep.img[t])
    out = {"x": torch.stack(xs), "t": torch.tensor(ts, dtype=torch.int64), "instruction": instr}
    if imgs:
        out["img"] = torch.stack(imgs)  # uint8 [N, 3C, H, W]
    return out


def train_world_model(cfg: WorldModelConfig, log=print, stop=None) -> tuple[WorldModel, dict[str, Any], dict[str, Any]]:
    """Train on cfg.dataset; return (best model, resets, summary). stop: a callable; once it is
    true, training ends after the epoch (the best epoch's weights so far are returned; None
    for the model if no epoch ended)."""
    _check(cfg)
    torch.manual_seed(cfg.seed)
    episodes, spec = load_episodes(cfg.dataset, cfg.task, cfg.cameras)
    if len(episodes) < 2:
        raise EnvError(f"dataset: {cfg.dataset} holds {len(episodes)} episode; a world model needs >= 2 "
                       "(some are held out)")
    ep0 = episodes[0]
    size = list(ep0.img.shape[2:]) if ep0.img is not None else []
    if size and (size[0] % 16 or size[1] % 16):
        raise EnvError(f"dataset: {cfg.dataset} has {size[0]}x{size[1]} frames; the conv world model needs "
                       "multiples of 16 (record with --image-size 32, 48, 64, ...)")
    cfg = replace(cfg, privileged_dim=ep0.x.shape[1], action_dim=ep0.a.shape[1],
                  state_dim=int(spec.get("state_dim", ep0.x.shape[1])),
                  max_episode_steps=int(spec.get("max_episode_steps", max(len(e.x) for e in episodes))),
                  control_hz=float(spec.get("control_hz", 20.0)), image_size=size,
                  latent=ep0.x.shape[1] if cfg.latent_space == "state" else cfg.latent,
                  obs_keys=["state", "privileged", "instruction"] + [f"rgb_{c}" for c in cfg.cameras])
    train, held = split(episodes, cfg.holdout, cfg.seed)
    device = resolve_device(cfg.device, "world_model.device")
    model = WorldModel(cfg)
    if cfg.init_from:
        _continue_from(model, cfg)
    else:
        _fit_normalizer(model, train)
    # the fit runs on `device` (windows and frames moved there once); the thresholds and the noise
    # head after it run on the CPU, where the saved model is loaded
    model.to(device)
    wt, wh = to_device(windows(train, cfg.horizon_k), device), to_device(windows(held, cfg.horizon_k), device)
    ft, fh = to_device(frames(train), device), to_device(frames(held), device)
    if cfg.heads_only:  # the loaded dynamics stay as they are
        for name, par in model.named_parameters():
            par.requires_grad_(name.startswith("heads."))
    opt = torch.optim.Adam([par for par in model.parameters() if par.requires_grad], lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    best, best_state, bad, start, history = float("inf"), None, 0, time.monotonic(), []
    n = len(wt["x"])
    # bootstrap: member i sees window j boot[i, j] times (a resample with replacement), so the
    # members agree where the data is dense and disagree away from it
    boot = torch.stack([torch.bincount(torch.randint(n, (n,), generator=gen), minlength=n)
                        for _ in range(cfg.members)]).float().to(device)
    for epoch in range(cfg.epochs):
        model.train()
        for idx in torch.randperm(n, generator=gen).to(device).split(cfg.batch_size):
            loss = window_loss(model, batch(wt, ft, idx), boot[:, idx])[0]
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
        model.eval()
        err = heldout_error(model, wh, fh)
        history.append(err)
        if err < best:
            best, bad = err, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            bad += 1
        metric = "heads' loss" if cfg.heads_only else f"{cfg.horizon_k}-step error"
        log(f"epoch {epoch}: train loss {loss.item():.4f}, held-out {metric} {err:.4f}")
        if bad >= cfg.patience or time.monotonic() - start > 60 * cfg.max_minutes or (stop is not None and stop()):
            break
    if best_state is None:  # stopped before an epoch ended
        return None, None, {"epochs": 0}
    model.load_state_dict(best_state)
    model.cpu().eval()
    wh, fh = to_device(wh, torch.device("cpu")), to_device(fh, torch.device("cpu"))
    model.cfg = cfg = replace(
        cfg, disagreement_threshold=disagreement_threshold(model, wh, cfg.uncertainty_margin, fh),
        member_disagreement_threshold=member_disagreement_threshold(model, held, cfg.uncertainty_margin,
                                                                    cfg.max_episode_steps),
        residual_std=residual_std(model, held))
    noise = fit_noise_head(model, held, cfg.seed, log=log) if cfg.noise_head else None
    summary = {"epochs": len(history), "best_heldout_error": best, "history": history,
               "heldout_metric": "heads_loss" if cfg.heads_only else f"{cfg.horizon_k}_step_error",
               "train_episodes": len(train), "heldout_episodes": len(held),
               "seconds": time.monotonic() - start, "disagreement_threshold": cfg.disagreement_threshold,
               "member_disagreement_threshold": cfg.member_disagreement_threshold,
               "stopped_early": len(history) < cfg.epochs, "noise_head": noise}
    return model, resets_of(train, cfg.keyframe_every), summary


def heldout_episodes(cfg: WorldModelConfig) -> list[Episode]:
    """The episodes training held out (same split: same dataset, holdout and seed)."""
    episodes, _ = load_episodes(cfg.dataset, cfg.task, cfg.cameras)
    return split(episodes, cfg.holdout, cfg.seed)[1]
