"""`make gpu-check`'s VLA parts (benchmarks/gpu_check.py runs each in a child process under its own
time limit, after the simulator parts): the pi0-size flow VLA's full fine-tune (vla), and per
training mode at SmolVLA's and pi0's size (vla_smol, vla_pi0; policies/vla/modes.py and the modes
of benchmarks/bench_vla_memory.py). What each measures: gpu_check.py's docstring."""

from __future__ import annotations

import dataclasses
import sys
import time

from gpu_check_common import DEV, DRY, ROOT, row


def part_vla(limit: float) -> None:
    import statistics

    import torch

    from embodied.rl.algorithms.ppo import ppo_policy_loss
    from policies.vla.flow import FlowVLA
    from policies.vla.pretrained.presets import PRESETS

    dev = torch.device("cuda")
    cfg = dataclasses.replace(PRESETS["pi0"](), noise_method="flow_noise")  # pi_RL's exploration
    t = time.perf_counter()
    with dev:
        policy = FlowVLA(cfg)
    n_par = sum(p.numel() for p in policy.parameters())
    row("vla", "pi0 preset (random weights): parameters, build s", f"{n_par / 1e9:.2f} B", "",
        f"built on the GPU in {time.perf_counter() - t:.0f} s, fp32 weights, bf16 autocast")
    size = cfg.vision["image_size"]

    def obs(b: int) -> dict:
        return {"state": torch.randn(b, cfg.state_dim, device=dev),
                "instruction": ["pick up the red cube and put it in the box"] * b,
                **{f"rgb_{c}": torch.randint(0, 256, (b, size, size, 3), dtype=torch.uint8, device=dev)
                   for c in cfg.cameras}}

    def timed(fn, reps: int) -> float:
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    auto = torch.autocast("cuda", dtype=torch.bfloat16)
    policy.eval()
    o1 = obs(1)
    with torch.no_grad(), auto:
        lat = timed(lambda: policy.act(o1, deterministic=True), 5)
    row("vla", "act latency, one observation", f"{lat * 1e3:.0f} ms", "",
        f"{cfg.num_steps} Euler steps, chunk {cfg.chunk_size}, bf16 autocast")
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-5, fused=True)
    for b in (16, 8, 4):
        try:
            ob = obs(b)
            with torch.no_grad(), auto:
                out = policy.act(ob)

            def rl_step():
                with auto:
                    ev = policy.evaluate(ob, out.replay)
                adv = torch.randn(b, device=dev)
                # float32 log-prob arithmetic (the ratio) outside autocast
                loss, _ = ppo_policy_loss(ev.log_prob.float(), out.log_prob.float(), adv)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            def sft_step():
                with auto:
                    loss = policy.sft_loss(ob, out.actions[:, :, : cfg.action_dim])
                opt.zero_grad(set_to_none=True)
                loss.float().backward()
                opt.step()

            policy.train()
            torch.cuda.reset_peak_memory_stats()
            rl = timed(rl_step, 3)
            peak_rl = torch.cuda.max_memory_allocated() / 2 ** 30
            torch.cuda.reset_peak_memory_stats()
            sft = timed(sft_step, 3)
            peak_sft = torch.cuda.max_memory_allocated() / 2 ** 30
            row("vla", f"RL step (PPO loss, full fine-tune, AdamW), batch {b}", f"{b / rl:.1f} samples/s",
                "", f"{rl:.2f} s/step; peak {peak_rl:.1f} GiB")
            row("vla", f"SFT step (flow loss, full fine-tune, AdamW), batch {b}", f"{b / sft:.1f} samples/s",
                "", f"{sft:.2f} s/step; peak {peak_sft:.1f} GiB")
            return
        except torch.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            print(f"batch {b}: out of memory", flush=True)
    row("vla", "RL / SFT step", "out of memory at batch 4", "", "")


# (mode, batches to try first) per preset, the most valuable first; then each mode's largest batch
VLA_MODES = {"smolvla": ["frozen_bf16_ckpt", "lora16_bf16_ckpt", "frozen_bf16_ckpt_8bit_ref", "full_ckpt_8bit", "full"],
             "pi0": ["frozen_bf16_ckpt", "lora16_bf16_ckpt", "frozen_bf16_ckpt_8bit_ref", "full_ckpt_8bit", "full"]}
VLA_FIRST = {"smolvla": 32, "pi0": 64}  # the targets: SmolVLA batch 32 within 22 GiB, pi0 batch 64


def bitsandbytes_problem() -> str | None:
    """None when bitsandbytes imports; else one line saying why not (missing, or failing to load)."""
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as e:
        if getattr(e, "name", None) == "bitsandbytes" or "bitsandbytes" in str(e) and "No module" in str(e):
            return ("bitsandbytes is not installed (make gpu-bundle carries it; or pip install -c constraints.txt "
                    "bitsandbytes)")
        return f"bitsandbytes does not load: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    except Exception as e:  # a library that loads its native code at import can fail in other ways
        return f"bitsandbytes does not load: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    return None


def _vla_modes(preset: str, limit: float) -> None:
    """Per training mode: RL and SFT steps at the target batch and at the largest that fits; act
    latency. --dry-run: the tiny preset on the CPU at batch 8 (tests this code without a GPU)."""
    import contextlib
    import statistics

    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_vla_memory import MODES, build, observations, plan_of, preset_config, random_replay, rl_step, sft_step

    from policies.memory import GiB, predict

    part = "vla_smol" if preset == "smolvla" else "vla_pi0"
    t_end = time.perf_counter() + limit
    dev = torch.device(DEV)
    total = 8 * GiB if DRY else torch.cuda.get_device_properties(dev).total_memory
    cfg = preset_config("tiny" if DRY else preset)
    auto = contextlib.nullcontext if DRY else (lambda: torch.autocast("cuda", dtype=torch.bfloat16))
    sync = (lambda: None) if DRY else torch.cuda.synchronize
    first = 8 if DRY else VLA_FIRST[preset]

    def timed(fn, reps: int = 2) -> float:
        fn()
        sync()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    def steps(mode: str, b: int) -> None:
        policy, opt, ref = build(cfg, mode, dev)
        try:
            for step in ("rl", "sft"):
                obs = observations(cfg, b, dev)
                pred = predict("flow_vla", cfg, plan_of(mode, step, b, autocast=not DRY))["total"] / GiB
                if not DRY:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                if step == "rl":
                    replay = random_replay(cfg, b, dev)
                    s = timed(lambda: rl_step(policy, opt, obs, replay, ref, auto()))
                else:
                    actions = torch.rand(b, cfg.chunk_size, cfg.action_dim, device=dev) * 2 - 1
                    s = timed(lambda: sft_step(policy, opt, obs, actions, auto()))
                peak = float("nan") if DRY else torch.cuda.max_memory_allocated() / GiB
                target = ""
                if step == "rl" and b == first:
                    target = "peak <= 22 GiB" if preset == "smolvla" else ">= 100 samples/s (VLM frozen or LoRA)"
                row(part, f"{mode}: {step.upper()} step, batch {b}", f"{b / s:.1f} samples/s", target,
                    f"{s:.2f} s/step; peak {peak:.2f} GiB, predicted {pred:.2f} GiB")
        finally:
            del policy, opt, ref
            torch.cuda.empty_cache() if not DRY else None

    def largest(mode: str) -> None:
        """The mode's RL and SFT steps at the target batch and at the largest predicted to fit."""
        sizes = (8,) if DRY else (1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1)
        fits = [b for b in sizes if predict("flow_vla", cfg, plan_of(mode, "rl", b, autocast=not DRY))["total"] < 0.92 * total]
        if not fits:
            row(part, f"{mode}: RL step", "does not fit", "", "predicted above 92% of the device at batch 1")
            return
        tried: set[int] = set()
        for b in dict.fromkeys(([first] if first <= fits[0] else []) + fits[:1]):
            while b >= 1 and b not in tried and time.perf_counter() < t_end - 20:
                tried.add(b)
                try:
                    steps(mode, b)
                    break
                except torch.OutOfMemoryError:
                    torch.cuda.empty_cache()
                    print(f"{mode} batch {b}: out of memory (predicted to fit)", flush=True)
                    row(part, f"{mode}: batch {b}", "out of memory", "", "predicted to fit; halved")
                    b //= 2

    bnb = bitsandbytes_problem()
    for mode in VLA_MODES[preset][:2] if DRY else VLA_MODES[preset]:
        if time.perf_counter() > t_end - 30:
            row(part, mode, "not run", "", "time limit")
            continue
        if MODES[mode][4] == "adam_8bit" and bnb:
            print(f"{mode}: not run: {bnb}", flush=True)
            row(part, mode, "not run", "", bnb)
            continue
        try:
            largest(mode)
        except Exception as e:  # one mode's failure is a row; the other modes still run
            import traceback

            traceback.print_exc()
            row(part, mode, "failed", "", f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            if not DRY:
                torch.cuda.empty_cache()
    policy, _, _ = build(cfg, "frozen_bf16_ckpt", dev)
    policy.eval()
    for b in (1, 64):
        if time.perf_counter() > t_end - 10:
            row(part, f"act latency, {b} observation(s)", "not run", "", "time limit")
            continue
        obs = observations(cfg, b, dev)
        with torch.no_grad(), auto():
            lat = timed(lambda: policy.act(obs, deterministic=True), 3)
        row(part, f"act latency, {b} observation(s)", f"{lat * 1e3:.0f} ms", "",
            f"{cfg.num_steps} Euler steps, chunk {cfg.chunk_size}, bf16 frozen prefix" + ("" if DRY else ", bf16 autocast"))


def part_vla_smol(limit: float) -> None:
    _vla_modes("smolvla", limit)


def part_vla_pi0(limit: float) -> None:
    _vla_modes("pi0", limit)
