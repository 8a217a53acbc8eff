"""A VLA's peak training memory, predicted from its config before a run starts (docs/vla.md,
"Predicted memory"), and whether it fits the device.

    peak = weights + gradients + optimiser state + KL reference + autocast's weight copies
           + max(activations of one training step, activations of one act, the optimiser's
                 temporaries)
(a steady step: the learners zero the gradients after the forward, so the last step's gradients
and the optimiser state are held while the forward keeps its activations; the activations are
freed as the backward fills the gradients, and the optimiser's step runs after them). The first
step has neither gradients nor state in its forward: "first_step" below.

  weights       every parameter at its dtype (frozen ones in bf16 with frozen_dtype=bfloat16)
  gradients     4 B per trainable parameter (they stay float32)
  optimiser     policies/optim.py STATE_BYTES per trainable parameter (8; adam_8bit about 2);
                torch's unfused Adam adds one float32 temporary per trainable parameter in its step
  reference     with a KL reference: the trainable parameters once more (policies/vla/modes.py
                shared_reference shares the frozen ones); none without
  autocast      bf16 autocast (CUDA) keeps a bf16 copy of each float32 weight it uses: 2 B each
  activations   what the backward pass keeps, per layer and token, in elements (fitted on
                transformers' SigLIP / Llama layers and our experts with saved-tensor hooks):
                  SigLIP layer      8 d + 2 I; frozen 6 d + I (a frozen Linear keeps no input)
                  LM / expert layer 6 d + 4 I + 3 H dh (+ the expert's keys and values repeated
                                    to H heads over the prefix and its own tokens); frozen LM
                                    2 d + 3 I + 3 H dh; LoRA adds d + 4 r to a frozen layer
                with checkpointing: each layer's input (d) plus one layer recomputed; and the
                backward's working gradients, the largest trained-through layer's size. A stack
                that nothing upstream of needs a gradient through keeps nothing (freeze=vlm:
                the prefix). The prefix's KV cache and last hidden state [T] are always kept.
                Elements are 4 B (CPU, float32) or 2 B (bf16 autocast, or bf16 frozen weights).
  act           the rollout's no-grad act at its batch: the KV cache and one layer's activations

The RL step is the learner's evaluate (one prefix forward and one expert forward over the
stored chain: N groups of K tokens with flow_noise, one with flow_sde) and its backward; the
SFT step is sft_loss (one group). Parameter counts come from building the policy on the meta
device (no memory), so they are exact; activations are an estimate, compared with measured
peaks in docs/results/vla_memory.md.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

GiB = 1024 ** 3


@dataclasses.dataclass
class Plan:
    """How a VLA is trained: its modes (policies/vla/modes.py), optimiser and batch."""

    step: str = "rl"  # "rl" (PPO / GRPO update) or "sft"
    batch: int = 8  # samples per gradient step (a minibatch)
    act_batch: int = 0  # observations per rollout act (the number of envs); 0: no rollout
    freeze: str = "none"
    lora_rank: int = 0
    frozen_dtype: str = "float32"
    checkpointing: bool = False
    optimizer: str = "adam"
    kl_reference: bool = False
    autocast_bf16: bool = False  # VLAs on CUDA run under bf16 autocast (embodied/run/device.py)


def meta_policy(name: str, config: Any, plan: Plan) -> Any:
    """The policy `config` describes, with the plan's modes, on the meta device (no memory)."""
    from policies.names import policy_class
    from policies.vla.modes import apply_modes

    with torch.device("meta"):
        policy = policy_class(name)(dataclasses.replace(config))
        apply_modes(policy, plan.freeze, plan.lora_rank, plan.frozen_dtype, checkpointing=False)
    return policy


def _lm_dims(policy: Any) -> dict[str, int]:
    lm = policy.prefix.lm_config
    heads = int(lm.num_attention_heads)
    return {"L": int(lm.num_hidden_layers), "d": int(lm.hidden_size), "I": int(lm.intermediate_size), "H": heads,
            "Hk": int(getattr(lm, "num_key_value_heads", None) or heads),
            "dh": int(getattr(lm, "head_dim", None) or lm.hidden_size // heads)}


def _tokens(policy: Any) -> tuple[int, int]:
    """(image tokens, all prefix tokens) per sample."""
    cfg, v = policy.config, policy.prefix.vision.config
    patches = (int(v.image_size) // int(v.patch_size)) ** 2
    image = len(cfg.cameras) * patches // max(cfg.pixel_shuffle, 1) ** 2
    extra = int(getattr(cfg, "state_in_prefix", False)) + (2 if policy.name == "ar_vla" else 0)
    return image, image + cfg.max_text_len + extra


def _stack(layers: int, tokens: float, per_token: float, d: int, keep: bool, ckpt: bool) -> float:
    """Elements a stack keeps for its backward: every layer's activations, or with checkpointing
    every layer's input plus one layer recomputed; nothing when no gradient passes through it."""
    if not keep:
        return 0.0
    if ckpt:
        return tokens * (layers * d + per_token)
    return tokens * layers * per_token


def activation_bytes(policy: Any, plan: Plan, batch: int) -> dict[str, float]:
    """Bytes the training step keeps for its backward, per part (see the module doc)."""
    cfg = policy.config
    lm = _lm_dims(policy)
    v = policy.prefix.vision.config
    image, prefix_tokens = _tokens(policy)
    vision_tokens = image * max(cfg.pixel_shuffle, 1) ** 2
    grads = {n.split(".")[1] if n.startswith("prefix.") else n.split(".")[0]
             for n, p in policy.named_parameters() if p.requires_grad}
    # a stack keeps activations when a trained weight sits in it or before it (vision -> projector
    # -> LM; the state token and the AR marker enter the LM)
    through_vision = "vision" in grads
    through_lm = bool(grads & {"vision", "projector", "lm", "marker", "state_proj"})
    trained = {n.split(".")[1] for n, p in policy.named_parameters()  # stacks whose own weights train
               if p.requires_grad and n.startswith("prefix.") and "lora_" not in n}
    lora = 4 * plan.lora_rank  # an adapted projection keeps its input for the adapter's gradient
    e_train = 2.0 if plan.autocast_bf16 else 4.0

    def elem(weight: torch.Tensor) -> float:  # activations follow the stack's weights' dtype
        return 2.0 if plan.autocast_bf16 or weight.dtype == torch.bfloat16 else 4.0

    e_vision = elem(policy.prefix.projector.weight)
    e_prefix = elem(policy.prefix.lm.get_input_embeddings().weight)
    out: dict[str, float] = {}
    layer: list[float] = [0.0]  # one layer's activations per stack a gradient passes through
    d, I = int(v.hidden_size), int(v.intermediate_size)
    per_token = 8 * d + 2 * I if "vision" in trained else 6 * d + I + (d + lora if plan.lora_rank else 0)
    out["vision"] = batch * e_vision * _stack(int(v.num_hidden_layers), vision_tokens, per_token, d,
                                              through_vision, plan.checkpointing)
    layer.append(batch * e_vision * vision_tokens * per_token if through_vision else 0.0)
    if "lm" in trained:
        lm_per_token = 6 * lm["d"] + 4 * lm["I"] + 3 * lm["H"] * lm["dh"]
    else:  # frozen Linears keep no input; norms, activations and attention still do
        lm_per_token = 2 * lm["d"] + 3 * lm["I"] + 3 * lm["H"] * lm["dh"] + (lm["d"] + lora if plan.lora_rank else 0)
    lm_tokens = prefix_tokens
    if policy.name == "ar_vla":  # the teacher-forced action tokens follow the prefix
        lm_tokens += cfg.chunk_size * cfg.action_dim - 1
    out["lm"] = batch * e_prefix * _stack(lm["L"], lm_tokens, lm_per_token, lm["d"], through_lm, plan.checkpointing)
    layer.append(batch * e_prefix * lm_tokens * lm_per_token if through_lm else 0.0)
    # the prefix's outputs the expert / the loss read: per-layer keys and values, last hidden state
    out["prefix_out"] = batch * e_prefix * lm_tokens * (lm["L"] * 2 * lm["Hk"] * lm["dh"] + lm["d"])
    if hasattr(policy, "expert"):
        groups = 1
        if plan.step == "rl":
            groups = {"flow_noise": cfg.num_steps, "flow_sde": 1}.get(cfg.noise_method, 0)
        own = cfg.chunk_size + (0 if cfg.expert_arch == "smolvla" else 1)
        tokens = groups * own
        eh, ei = cfg.expert_hidden, cfg.expert_intermediate
        per_token = 6 * eh + 4 * ei + 3 * lm["H"] * lm["dh"]
        keys = 2 * lm["H"] * lm["dh"] * (prefix_tokens + tokens) * lm["L"]  # repeated to H heads, per sample
        out["expert"] = batch * e_train * (_stack(lm["L"], tokens, per_token, eh, tokens > 0, plan.checkpointing)
                                           + (0 if plan.checkpointing else keys))
        layer.append(batch * e_train * tokens * per_token)
    out["backward"] = max(layer)  # the backward of a layer holds gradients the size of its activations
    out["inputs"] = batch * 4.0 * len(cfg.cameras) * 3 * int(v.image_size) ** 2 * 2  # resized pixels, normalised
    return out


def act_bytes(policy: Any, plan: Plan, batch: int) -> float:
    """The no-grad act at `batch`: its KV cache and hidden states plus the largest layer's
    activations (the vision tower's, over one camera)."""
    if batch <= 0:
        return 0.0
    lm = _lm_dims(policy)
    v = policy.prefix.vision.config
    image, prefix_tokens = _tokens(policy)
    e = 2.0 if (plan.autocast_bf16 or plan.frozen_dtype == "bfloat16") else 4.0
    vision_tokens = image * max(policy.config.pixel_shuffle, 1) ** 2 // max(len(policy.config.cameras), 1)
    kv = prefix_tokens * (lm["L"] * 2 * lm["Hk"] * lm["dh"] + lm["d"])
    layer = vision_tokens * (4 * int(v.hidden_size) + 2 * int(v.intermediate_size))
    return batch * e * (kv + layer) + batch * 4.0 * 3 * int(v.image_size) ** 2 * 2


def predict(name: str, config: Any, plan: Plan, policy: Any = None) -> dict[str, float]:
    """Predicted peak bytes of training policy `name` built from `config` under `plan`, per part
    and "total" (module doc). `policy`: an already built one with its modes (else a meta build)."""
    from policies.optim import STATE_BYTES

    policy = meta_policy(name, config, plan) if policy is None else policy
    weights = sum(p.numel() * p.element_size() for p in policy.parameters())
    weights += sum(b.numel() * b.element_size() for b in policy.buffers())
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    fp32 = sum(p.numel() for p in policy.parameters() if p.dtype == torch.float32)
    parts = {"weights": float(weights), "gradients": 4.0 * trainable,
             "optimizer": trainable * STATE_BYTES[plan.optimizer],
             "reference": 4.0 * trainable if plan.kl_reference else 0.0,
             "autocast_copies": 2.0 * fp32 if plan.autocast_bf16 else 0.0}
    acts = activation_bytes(policy, plan, plan.batch)
    parts.update({f"act_{k}": val for k, val in acts.items()})
    rollout = act_bytes(policy, plan, plan.act_batch)
    step = sum(acts.values())
    parts["rollout_act"] = rollout
    parts["optimizer_temp"] = 4.0 * trainable if plan.optimizer == "adam" else 0.0
    parts["total"] = (sum(v for k, v in parts.items() if not k.startswith(("act_", "rollout", "optimizer_temp")))
                      + max(step, rollout, parts["optimizer_temp"]))
    # the first step, before any gradient or optimiser state exists: its forward holds the
    # activations, its optimiser step the gradients and the freshly made state (what a one-step
    # measurement sees; from the second step on, the last step's gradients and the state are
    # held through the forward: "total")
    parts["first_step"] = (parts["weights"] + parts["reference"] + parts["autocast_copies"]
                           + max(step, rollout, parts["gradients"] + parts["optimizer"] + parts["optimizer_temp"]))
    parts["trainable_params"] = float(trainable)
    parts["params"] = float(sum(p.numel() for p in policy.parameters()))
    return parts


# glibc's M_MMAP_THRESHOLD (malloc.h) and the value set: blocks from 1 MiB up are mapped and unmapped
M_MMAP_THRESHOLD, MMAP_THRESHOLD = -3, 1 << 20


def return_freed_memory(threshold: int = MMAP_THRESHOLD) -> bool:
    """Make glibc serve allocations of `threshold` bytes and more with mmap, so that a freed tensor's
    memory goes back to the system at once. Left alone, glibc raises this threshold (128 KiB at
    start) to the size of each mapped block freed, up to 32 MiB; after that, blocks of that size
    (a SmolVLA vision layer's [8, 1024, 768] float32 activations are 24 MiB) come from its heap and
    stay resident once freed, wherever another live block sits above them. A LoRA step, whose
    backward recomputes and frees the vision tower's activations layer by layer between the
    gradients it keeps, then held 2.4 times the memory it used (docs/results/vla_memory.md).
    Setting the threshold turns the raising off. Returns False where the C library is not glibc."""
    import ctypes

    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):
        return False


def device_bytes(device: Any) -> tuple[float, str]:
    """What the device holds: a CUDA device's total memory, or the RAM available now on a CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return float(props.total_memory), f"{props.name} total"
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: line.split()[1] for line in f}
        return float(info["MemAvailable"]) * 1024, "RAM available now"
    except (OSError, KeyError):
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")), "RAM available now"


def summary_line(parts: dict[str, float]) -> str:
    """One line: the predicted peak and its largest parts."""
    acts = sum(v for k, v in parts.items() if k.startswith("act_"))
    return (f"predicted peak {parts['total'] / GiB:.2f} GiB (weights {parts['weights'] / GiB:.2f}, gradients "
            f"{parts['gradients'] / GiB:.2f}, optimiser {parts['optimizer'] / GiB:.2f}, reference "
            f"{parts['reference'] / GiB:.2f}, step activations {acts / GiB:.2f}, act {parts['rollout_act'] / GiB:.2f}; "
            f"{parts['trainable_params'] / 1e6:.1f} M of {parts['params'] / 1e6:.1f} M parameters train)")


RL_KNOBS = ("policy.freeze=vlm or policy.lora_rank, policy.frozen_dtype=bfloat16, policy.checkpointing=true, "
            "ppo.optimizer=adam_8bit, or a smaller minibatch (env.num_envs, ppo.minibatches)")


def check_device(plan: Plan, policy: Any, device: Any, what: str = "run", knobs: str = RL_KNOBS) -> str:
    """One line with the predicted peak of training the built `policy` under `plan` on `device`;
    MemoryError (one line, naming the settings that shrink it) when it cannot fit: above a CUDA
    device's total memory, or on a CPU above the RAM available now plus the weights that `policy`
    already holds there. On a CPU, a run predicted at 1 GiB or more also gets
    `return_freed_memory()`, so that its resident memory follows the prediction."""
    parts = predict(policy.name, policy.config, plan, policy=policy)
    have, where = device_bytes(device)
    if torch.device(device).type == "cpu":
        have += parts["weights"]
        if parts["total"] >= GiB:
            return_freed_memory()
    line = f"memory: {summary_line(parts)}; {where}: {have / GiB:.1f} GiB"
    if parts["total"] > have:
        raise MemoryError(f"{line}: this {what} does not fit; shrink it with {knobs} (docs/vla.md, training modes)")
    return line
