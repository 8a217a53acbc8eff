"""Supervised fine-tuning (SFT) of a VLA policy on demonstrations (`embodied sft CONFIG`).

The dataset is any torch Dataset whose items are dicts with "rgb_<cam>" uint8 [H, W, 3],
"state" float32 [S], "instruction" str, "actions" float32 [K, A], "action_valid" bool [K]
(the LeRobotDataset layout), and which has `.stats` ({"state": {"mean", "std"}, "action":
{...}}) for the policy's normalisation buffers.

The loop, top to bottom: batch -> policy.sft_loss (optional bf16 autocast) -> backward ->
clip -> AdamW step (`optimizer`: policies/optim.py) -> warm-up + cosine learning rate; every `eval_every` steps a seeded
evaluation in the simulator (embodied.eval.evaluate.evaluate); every `save_every` steps a
save_pretrained directory written atomically (tmp dir + rename); TensorBoard scalars
under sft/ and eval/.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import torch
from torch.utils.data import DataLoader, Dataset

from embodied.config_loader import ConfigError, from_dict, load_mapping
from embodied.run.device import DeviceError, flat_device_key, resolve_device


@dataclass
class SFTConfig:
    policy: Literal["flow_vla", "ar_vla"] = "flow_vla"
    preset: str = "tiny"  # policies.vla.config.PRESETS
    init_from: str | None = None  # a save_pretrained directory to fine-tune instead
    chunk_size: int = 4  # K
    num_steps: int = 10  # flow: Euler steps in act
    execute_steps: int = 0  # actions of each chunk executed before re-planning (0 = all K)
    cameras: list[str] = field(default_factory=lambda: ["front"])
    # masked: the policy is blind to the instruction (its prompt is empty, kept in the checkpoint, so
    # RL, eval and sim2real of it stay blind): the text-blind baseline of an instruction suite
    instruction: Literal["read", "masked"] = "read"
    dataset: str = ""  # LeRobot v3 dataset root (embodied.data.lerobot.LeRobotDataset)
    task: str = "Reach"  # evaluation task
    image_size: int = 64  # rendered images; also the tiny preset's vision input size
    patch_size: int = 0  # tiny preset's vision patch size (0: the preset's, 16)
    steps: int = 2000  # gradient steps
    max_minutes: float = 0.0  # > 0: also stop after this much training time; the cosine follows the clock
    label_sigma: float = 0.0  # ar_vla: Gaussian (HL-Gauss) targets this many bins wide; 0: one-hot
    batch_size: int = 32
    lr: float = 3e-4
    weight_decay: float = 0.01
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    grad_clip: float = 1.0
    # bf16 autocast: null (auto) = on CUDA, where VLAs train in bf16 (embodied/run/device.py); true / false force it
    bf16: bool | None = None
    eval_every: int = 500  # steps; 0 disables periodic evaluation
    eval_episodes: int = 20
    eval_envs: int = 10
    save_every: int = 1000  # steps; 0: only the final checkpoint
    run_dir: str = "runs/sft"
    seed: int = 0
    torch_threads: int = 0  # 0 = leave torch's default
    num_workers: int = 0
    # the one device setting (embodied/run/device.py): auto (CUDA when present), cpu, cuda, cuda:N;
    # `train.device=...` is the same key, as `embodied train` spells it
    device: str = "auto"
    progress: bool = True  # a progress bar with the loss
    # training modes (docs/vla.md, "Training modes"): what trains (freeze: none, vision, vlm (flow
    # only); lora_rank > 0: adapters on the prefix), the frozen weights' dtype, activation
    # checkpointing, the optimiser's state (policies/optim.py)
    freeze: Literal["none", "vision", "vlm"] = "none"
    lora_rank: int = 0
    frozen_dtype: Literal["float32", "bfloat16"] = "float32"
    checkpointing: bool = False
    optimizer: Literal["adam", "adam_fused", "adam_8bit"] = "adam"


def load_sft_config(path: str | Path, overrides: list[str] = ()) -> SFTConfig:
    """YAML file (a flat mapping of SFTConfig fields) plus key=value overrides; one-line errors."""
    cfg = from_dict(SFTConfig, flat_device_key(load_mapping(path, overrides, what="SFT settings", example="lr=1e-4")))
    try:  # the form, and a CUDA device that is not on this machine, before anything is built
        resolve_device(cfg.device, "device")
    except DeviceError as e:
        raise ConfigError(str(e)) from None
    for key in ("max_minutes", "label_sigma"):
        if getattr(cfg, key) < 0:
            raise ConfigError(f"{key}: {getattr(cfg, key)} must be >= 0 (0: off)")
    if cfg.label_sigma and cfg.policy != "ar_vla":
        raise ConfigError(f"label_sigma applies to ar_vla only, not policy={cfg.policy}; remove it")
    return cfg


def build_policy(cfg: SFTConfig, stats: dict[str, Any] | None = None) -> Any:
    """A fresh tiny/real VLA from cfg (or cfg.init_from), with the dataset's stats set; a fresh
    one takes its state and action widths from the stats (9 and 4 for the MuJoCo tasks, 18 and
    7 or 8 for ManiSkill's Panda)."""
    from policies.registry import policy_class
    from policies.vla.config import make_config

    klass = policy_class(cfg.policy)
    if cfg.init_from:
        policy = klass.from_pretrained(cfg.init_from)
    else:
        extra: dict[str, Any] = ({"num_steps": cfg.num_steps} if cfg.policy == "flow_vla"
                                 else {"label_sigma": cfg.label_sigma})
        if stats is not None:
            extra["state_dim"], extra["action_dim"] = len(stats["state"]["mean"]), len(stats["action"]["mean"])
        if cfg.preset == "tiny":
            vision = make_config(klass.config_class, cfg.preset).vision
            vision["image_size"] = cfg.image_size
            if cfg.patch_size:
                vision["patch_size"] = cfg.patch_size
            extra["vision"] = vision
        policy = klass(make_config(klass.config_class, cfg.preset, chunk_size=cfg.chunk_size,
                                   cameras=list(cfg.cameras), **extra))
    policy.config.execute_steps = cfg.execute_steps
    if cfg.instruction == "masked":
        policy.config.prompt_template = ""  # every instruction tokenises as the empty text
    if stats is not None and not cfg.init_from:
        policy.set_stats(stats)
    from policies.vla.modes import ModeError, apply_modes

    try:
        apply_modes(policy, cfg.freeze, cfg.lora_rank, cfg.frozen_dtype, cfg.checkpointing)
    except ModeError as e:
        raise ConfigError(str(e)) from None
    return policy


def lr_lambda(cfg: SFTConfig, time_fraction: Callable[[], float] | None = None) -> Callable[[int], float]:
    """Linear warm-up to 1, then cosine to min_lr_ratio at cfg.steps; with time_fraction (the
    share of cfg.max_minutes used), the cosine follows whichever of steps and time is further."""
    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        p = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        if time_fraction is not None:
            p = max(p, time_fraction())
        p = min(1.0, p)
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p))
    return f


def save_atomic(policy: Any, path: Path, state: dict | None = None) -> Path:
    """save_pretrained (and with state, what --resume reads: sft_state.write) into path.tmp, then
    rename onto path (replacing an older one)."""
    tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
    for p in (tmp, old):
        shutil.rmtree(p, ignore_errors=True)
    policy.save_pretrained(tmp)
    if state is not None:
        from embodied.imitation import sft_state

        sft_state.write(tmp, state)
    if path.exists():
        os.rename(path, old)
    os.rename(tmp, path)
    shutil.rmtree(old, ignore_errors=True)
    return path


def _obs(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items() if k != "actions"}


def train_sft(policy: Any, dataset: Dataset, cfg: SFTConfig, eval_env: Any = None,
              log: Callable[[str], None] = print, resume: dict | None = None) -> dict[str, Any]:
    """Fit `policy` to `dataset` for cfg.steps steps (or cfg.max_minutes); returns a summary
    (losses, evals, steps, paths). resume: a step directory's trainer state (sft_state.read):
    the run continues from its step, optimiser, schedule and generators."""
    from torch.utils.tensorboard import SummaryWriter

    from embodied.run.env import eval_seeds

    from embodied.eval.evaluate import evaluate
    torch.manual_seed(cfg.seed)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    device = resolve_device(cfg.device, "device")
    policy.to(device).train()
    run = Path(cfg.run_dir)
    gen = torch.Generator().manual_seed(cfg.seed)  # the data order
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                        num_workers=cfg.num_workers, generator=gen)
    if len(loader) == 0:
        raise ConfigError(f"batch_size: {cfg.batch_size} is larger than the dataset ({len(dataset)} items)")
    # resumed: the events the interrupted process logged after the step it continues from are purged
    writer = SummaryWriter(str(run / "tb"), purge_step=resume["step"] + 1 if resume else None)
    params = [p for p in policy.actor_parameters() if p.requires_grad]
    bf16 = device.type == "cuda" if cfg.bf16 is None else cfg.bf16
    if hasattr(policy, "prefix") and policy.name in ("flow_vla", "ar_vla"):  # the predicted peak (policies/memory.py)
        from policies.memory import Plan, check_device

        plan = Plan(step="sft", batch=cfg.batch_size, freeze=cfg.freeze, lora_rank=cfg.lora_rank,
                    frozen_dtype=cfg.frozen_dtype, checkpointing=cfg.checkpointing, optimizer=cfg.optimizer,
                    autocast_bf16=bf16 and device.type == "cuda")
        try:
            log(check_device(plan, policy, device, "SFT run", "freeze=vlm or lora_rank, frozen_dtype=bfloat16, "
                             "checkpointing=true, optimizer=adam_8bit, or a smaller batch_size"))
        except MemoryError as e:
            raise ConfigError(str(e)) from None
    from policies.optim import make_optimizer

    opt = make_optimizer(params, cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay)
    t0 = time.perf_counter()
    budget_s = 60.0 * cfg.max_minutes

    def time_fraction() -> float:  # of the training budget (periodic evaluations count too)
        return (time.perf_counter() - t0) / budget_s

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg, time_fraction if budget_s > 0 else None))
    if resume:
        opt.load_state_dict(resume["optimizer"])
        sched.load_state_dict(resume["scheduler"])
        gen.set_state(resume["data_generator"])
        torch.set_rng_state(resume["torch_rng"])
        log(f"resumed at step {resume['step']} of {cfg.steps} (optimiser, schedule and generators restored)")

    def state(step: int, samples: int) -> dict:  # what --resume reads beside the weights
        from embodied.imitation import sft_state

        return sft_state.trainer_state(cfg, opt, sched, step, samples, gen)
    seeds = eval_seeds(cfg.eval_episodes)  # train's, eval's and sim2real's seeds: one number per weights
    summary: dict[str, Any] = {"loss": [], "eval": [], "checkpoints": []}

    def run_eval(step: int) -> None:
        policy.eval()
        res = evaluate(policy, eval_env, seeds)
        policy.train()
        for key, value in res.as_dict().items():  # success/<task> too where the episodes ran several tasks
            if key != "episodes":
                writer.add_scalar(f"eval/{key}", value, step)
        summary["eval"].append((step, res.success_rate))
        log(f"step {step}: eval success {res.success_rate:.2f} over {len(seeds)} episodes")
        per = res.per_task()
        if len(per) > 1:
            summary.setdefault("eval_per_task", []).append((step, per))
            log(res.per_task_line())

    from tqdm import tqdm

    from embodied.run.stop import stoppable

    start = (resume["step"], resume["samples"]) if resume else (0, 0)
    bar = tqdm(total=cfg.steps, initial=start[0], unit="step", dynamic_ncols=True, disable=not cfg.progress,
               desc="sft")
    stopping = stoppable("this gradient step")
    stop = stopping.__enter__()
    step, samples = start
    try:
        step, samples = _fit(policy, loader, cfg, opt, sched, params, device, writer, summary, run, eval_env, run_eval,
                             bar, stop, budget_s, time_fraction, t0, start, state)
    finally:
        stopping.__exit__(None, None, None)
        bar.close()
    summary["steps"] = step
    summary["samples_per_s"] = (samples - start[1]) / (time.perf_counter() - t0)
    if stop:  # the weights and trainer state so far, where `sft --resume` reads them
        summary["stopped"] = stop.signum
        here = run / f"step_{step:07d}"  # already written when save_every fell on this step
        summary["partial"] = str(here if here.is_dir() else save_atomic(policy, here, state(step, samples)))
        writer.close()
        policy.eval()
        return summary
    if eval_env is not None:
        run_eval(step)
    summary["final"] = str(save_atomic(policy, run / "final"))
    writer.close()
    policy.eval()
    return summary


def _fit(policy: Any, loader: DataLoader, cfg: SFTConfig, opt: Any, sched: Any, params: list, device: torch.device,
         writer: Any, summary: dict[str, Any], run: Path, eval_env: Any, run_eval: Callable[[int], None], bar: Any,
         stop: Any, budget_s: float, time_fraction: Callable[[], float], t0: float, start: tuple[int, int],
         state: Callable[[int, int], dict]) -> tuple[int, int]:
    """The gradient steps of train_sft from start = (step, samples) until cfg.steps, the time
    budget or a signal; (steps, samples)."""
    bf16 = device.type == "cuda" if cfg.bf16 is None else cfg.bf16
    (step, samples), done = start, start[0] >= cfg.steps
    while not done:
        for batch in loader:
            obs = _obs(batch, device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = policy.sft_loss(obs, batch["actions"].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            sched.step()
            step += 1
            samples += batch["actions"].shape[0]
            summary["loss"].append(loss.item())
            done = step >= cfg.steps or (budget_s > 0 and time_fraction() >= 1.0) or bool(stop)
            bar.update(1)
            if step % 10 == 0 or done:
                bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
            if step % 50 == 0 or done:
                sps = samples / (time.perf_counter() - t0)
                writer.add_scalar("sft/loss", loss.item(), step)
                writer.add_scalar("sft/grad_norm", float(grad_norm), step)
                writer.add_scalar("sft/lr", sched.get_last_lr()[0], step)
                writer.add_scalar("time/samples_per_s", sps, step)
            if eval_env is not None and cfg.eval_every and step % cfg.eval_every == 0 and not done:
                run_eval(step)
            if cfg.save_every and step % cfg.save_every == 0 and not done:
                summary["checkpoints"].append(str(save_atomic(policy, run / f"step_{step:07d}", state(step, samples))))
            if done:
                break
    return step, samples


def check_dataset(cfg: SFTConfig, info: dict[str, Any]) -> None:
    """ConfigError (one line) unless the dataset (its info.json: embodied.data.layout.read_info) holds
    cfg.task's demos with cfg.cameras' images."""
    from embodied.data.read import recorded_cameras

    have = (info.get("embodied") or {}).get("task")
    if have and have != cfg.task:
        raise ConfigError(f"task: {cfg.task}, but {cfg.dataset} holds demos of {have}; allowed: task={have} "
                          f"(the dataset's), or a dataset of {cfg.task}")
    recorded = recorded_cameras(info)
    if any(c not in recorded for c in cfg.cameras):
        held = ", ".join(recorded) or "none (a state-only dataset; collect one with --obs-mode rgb --cameras ...)"
        raise ConfigError(f"cameras: {', '.join(cfg.cameras)}, but {cfg.dataset} records the cameras {held}; "
                          f"allowed: cameras from the dataset's")


def cmd_sft(args: argparse.Namespace) -> int:
    """`embodied sft CONFIG [key=value ...]`: SFT on a LeRobot dataset, evaluated in the sim;
    `embodied sft --resume RUN_DIR [key=value ...]` continues a run that a signal stopped."""
    from embodied.data.lerobot import LeRobotDataset  # written alongside; the LeRobot v3 reader
    from embodied.data.layout import read_info
    from sims.registry import make_env

    from embodied.config_loader import find_config
    from embodied.imitation import sft_state
    from embodied.run.stop import Stopped, no_empty_dirs, program

    resume = None
    if getattr(args, "resume", None):
        if args.config:
            raise ConfigError(f"--resume: the run's settings are its own ({sft_state.CONFIG}); give key=value "
                              f"overrides, not the config {args.config}")
        step_dir = sft_state.newest(Path(args.resume))
        cfg = load_sft_config(step_dir / sft_state.CONFIG, [*args.overrides, f"run_dir={args.resume}",
                                                            f"init_from={step_dir}"])
        resume = sft_state.read(step_dir)
    elif not args.config:
        raise ConfigError("config: give an SFT config (e.g. sft_reach_flow), or --resume RUN_DIR")
    else:
        cfg = load_sft_config(find_config(args.config), args.overrides)
    if not cfg.dataset:
        raise ConfigError("dataset: set the LeRobot dataset root, e.g. dataset=data/reach")
    info = read_info(cfg.dataset)
    check_dataset(cfg, info)  # before any episode is read
    dataset = LeRobotDataset(cfg.dataset, chunk_size=cfg.chunk_size, cameras=cfg.cameras)  # only the cameras used
    torch.manual_seed(cfg.seed)  # seeds the initial weights too
    policy = build_policy(cfg, dataset.stats)
    trained_on = (getattr(policy, "record", None) or {}).get("task") if cfg.init_from else None
    if trained_on and trained_on != cfg.task:
        raise ConfigError(f"init_from: {cfg.init_from} was trained on task {trained_on!r}, not {cfg.task!r}; "
                          f"allowed: task={trained_on} with a {trained_on} dataset, or a policy trained on {cfg.task}")
    policy.record = {"task": cfg.task, "obs_mode": "rgb", "obs_keys": ["state", *(f"rgb_{c}" for c in cfg.cameras)],
                     "action_dim": int(policy.config.action_dim), "dataset": str(cfg.dataset),
                     # the frames' camera transform (a robot recording's), for serve on a machine without the dataset
                     "camera_transform": ((info.get("embodied") or {}).get("spec") or {}).get("camera_transform")}
    env = None
    with no_empty_dirs(cfg.run_dir):
        if cfg.eval_every or cfg.eval_episodes:
            env = make_env(cfg.task, cfg.eval_envs, obs_mode="rgb", image_size=cfg.image_size,
                           cameras=tuple(cfg.cameras))
        try:
            summary = train_sft(policy, dataset, cfg, env, resume=resume)
        finally:
            if env is not None:
                env.close()
    if "stopped" in summary:
        raise Stopped(summary["stopped"], f"the weights and trainer state after step {summary['steps']} of "
                      f"{cfg.steps} in {summary['partial']}", f"{program()} sft --resume {cfg.run_dir}")
    print(f"final checkpoint: {summary['final']}")
    if summary["eval"]:
        print(f"success rate: {summary['eval'][-1][1]:.2f}")
    print(f"tensorboard: {Path(cfg.run_dir) / 'tb'}")
    return 0
