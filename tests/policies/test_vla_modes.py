"""Training modes of the VLAs at tiny size (policies/vla/modes.py, policies/optim.py) and the
peak-memory prediction (policies/memory.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from policies.memory import GiB, Plan, activation_bytes, predict
from policies.optim import OptimizerError, make_optimizer
from policies.vla.autoregressive import ARVLA
from policies.vla.config import ARVLAConfig, FlowVLAConfig
from policies.vla.flow import FlowVLA
from policies.vla.modes import ModeError, apply_modes, shared_reference
from vla_batch import vla_obs as _obs


def _flow(**kw) -> FlowVLA:
    torch.manual_seed(0)
    return FlowVLA(FlowVLAConfig(**{"noise_method": "flow_noise", "num_steps": 2, **kw}))


def _loss(policy, obs, replay, actions, seed: int = 1) -> torch.Tensor:
    """An RL-like term through the whole chain (log-prob, value) plus the SFT loss, seeded."""
    torch.manual_seed(seed)
    ev = policy.evaluate(obs, replay)
    loss = -ev.log_prob.float().mean() + ev.value.float().pow(2).mean()
    return loss + policy.sft_loss(obs, actions)


def _grads(policy) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}


def test_checkpointing_gives_the_same_gradients():
    """Checkpointed vision / LM / expert layers recompute what they dropped: the same gradients
    on every parameter. SmolVLA's expert layout with the state in the prefix."""
    plain = _flow(expert_arch="smolvla", state_in_prefix=True)
    ckpt = apply_modes(copy.deepcopy(plain), checkpointing=True)
    obs, actions = _obs(2), torch.rand(2, 4, 4) * 2 - 1
    torch.manual_seed(3)
    out = plain.act(obs)
    got = []
    for policy in (plain, ckpt):
        _loss(policy, obs, out.replay, actions).backward()
        got.append(_grads(policy))
    assert got[0].keys() == got[1].keys() and any(k.startswith("prefix.vision") for k in got[0])
    for name, g in got[0].items():
        torch.testing.assert_close(got[1][name], g, rtol=1e-5, atol=1e-6, msg=name)


def test_checkpointing_the_ar_policy_keeps_its_cached_decoding():
    torch.manual_seed(0)
    plain = ARVLA(ARVLAConfig(chunk_size=2))
    ckpt = apply_modes(copy.deepcopy(plain), checkpointing=True)
    obs = _obs(2)
    torch.manual_seed(5)
    out = plain.act(obs)
    torch.manual_seed(5)
    assert torch.equal(ckpt.act(obs).replay["bins"], out.replay["bins"])
    for policy in (plain, ckpt):
        (-policy.evaluate(obs, out.replay).log_prob.mean()).backward()
    a, b = _grads(plain), _grads(ckpt)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("freeze,rank,dtype", [("vlm", 0, "bfloat16"), ("none", 4, "float32")])
def test_frozen_parts_stay_put_while_the_rest_learns(freeze, rank, dtype):
    """freeze=vlm (frozen weights in bf16) / LoRA: frozen weights keep their dtype and values
    through training, gradients reach only the trainable part (LoRA: adapters and expert), and
    the SFT loss on a fixed batch goes down. (LoRA with bf16 frozen weights: the next tests.)"""
    policy = apply_modes(_flow(), freeze=freeze, lora_rank=rank, frozen_dtype=dtype)
    frozen = {n: p.detach().clone() for n, p in policy.named_parameters() if not p.requires_grad}
    assert frozen and all(p.dtype == getattr(torch, dtype) for p in frozen.values())
    assert all(p.dtype == torch.float32 for p in policy.parameters() if p.requires_grad)
    opt = make_optimizer([p for p in policy.parameters() if p.requires_grad], "adam", lr=3e-3, weight_decay=0.0)
    obs, actions = _obs(4), torch.rand(4, 4, 4) * 2 - 1
    losses = []
    for step in range(6):
        torch.manual_seed(step % 2)  # two fixed noise draws: the loss is comparable across steps
        loss = policy.sft_loss(obs, actions)
        opt.zero_grad()
        loss.backward()
        if step == 0:
            tops = {n.split(".")[0] if not n.startswith("prefix") else "lora" if "lora_" in n else n
                    for n in _grads(policy)}
            assert tops == ({"expert", "lora"} if rank else {"expert"}), tops
        opt.step()
        losses.append(float(loss))
    assert sum(losses[-2:]) < 0.8 * sum(losses[:2])
    for n, p in policy.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), n


def test_freeze_vlm_is_flow_only_and_bad_settings_are_one_line():
    with pytest.raises(ModeError, match="freeze=vlm applies to flow_vla only"):
        apply_modes(ARVLA(ARVLAConfig()), freeze="vlm")
    with pytest.raises(ModeError, match="frozen_dtype: 'fp8' is not allowed"):
        apply_modes(_flow(), frozen_dtype="fp8")
    with pytest.raises(OptimizerError, match="optimizer: 'sgd' is not allowed"):
        make_optimizer([torch.nn.Parameter(torch.zeros(2))], "sgd")


@pytest.mark.parametrize("freeze,rank", [("vlm", 0), ("none", 4)])
def test_the_kl_reference_shares_the_frozen_weights(freeze, rank):
    """shared_reference: frozen parameters are the policy's own storage; the trainable ones are a
    snapshot that the policy's updates do not move; its log-probs are the policy's before them."""
    policy = apply_modes(_flow(), freeze=freeze, lora_rank=rank, frozen_dtype="bfloat16")
    ref = shared_reference(policy)
    pairs = list(zip(policy.named_parameters(), ref.parameters()))
    for (name, p), r in pairs:
        assert (p.data_ptr() == r.data_ptr()) == (not p.requires_grad), name
        assert not r.requires_grad
    copied = sum(p.numel() for (_, p), _ in pairs if p.requires_grad)
    assert copied == sum(p.numel() for p in policy.parameters() if p.requires_grad)
    obs, actions = _obs(2), torch.rand(2, 4, 4) * 2 - 1
    out = policy.act(obs)
    before = ref.evaluate(obs, out.replay).log_prob
    torch.testing.assert_close(policy.evaluate(obs, out.replay).log_prob, before)
    opt = make_optimizer([p for p in policy.parameters() if p.requires_grad], "adam", lr=1e-2)
    _loss(policy, obs, out.replay, actions).backward()
    opt.step()
    assert torch.equal(ref.evaluate(obs, out.replay).log_prob, before)
    assert not torch.equal(policy.evaluate(obs, out.replay).log_prob, before)


def test_each_optimizer_trains_the_expert():
    """The fused and the 8-bit optimiser states on the CPU (plain adam: every other test);
    adam_8bit (bitsandbytes) keeps uint8 moments."""
    pytest.importorskip("bitsandbytes")
    start = apply_modes(_flow(expert_intermediate=256), freeze="vlm")
    obs, actions = _obs(4), torch.rand(4, 4, 4) * 2 - 1
    for name in ("adam_fused", "adam_8bit"):
        policy = copy.deepcopy(start)
        opt = make_optimizer([p for p in policy.parameters() if p.requires_grad], name, lr=3e-3, weight_decay=0.01)
        losses = []
        for step in range(4):
            torch.manual_seed(step % 2)
            loss = policy.sft_loss(obs, actions)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
        assert sum(losses[-2:]) < 0.9 * sum(losses[:2]), (name, losses)
        if name == "adam_8bit":
            big = policy.expert.layers[0].gate.weight  # 256 x 64 values: block-wise 8-bit
            assert opt.state[big]["state1"].dtype == torch.uint8


def _saved_bytes(fn) -> int:
    """Bytes autograd keeps for the backward of fn(), parameters left out."""
    seen: dict[int, int] = {}
    params: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    def run(policy):
        params.update(p.untyped_storage().data_ptr() for p in policy.parameters())
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return fn(policy)
    return run, seen


@pytest.mark.parametrize("freeze,rank,step", [("none", 0, "rl"), ("none", 4, "sft")])
def test_predicted_activations_match_what_autograd_keeps(freeze, rank, step):
    """The activation estimate against the tensors autograd saves for a real backward, within 35%
    (at a width where activations, not weights, dominate); parameter counts exactly."""
    cfg = FlowVLAConfig(noise_method="flow_noise", num_steps=4, critic=False,
                        vision={"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "image_size": 64, "patch_size": 8, "vision_use_head": False},
                        lm={"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512},
                        expert_hidden=96, expert_intermediate=192)
    plan = Plan(step=step, batch=4, freeze=freeze, lora_rank=rank)
    torch.manual_seed(0)
    policy = apply_modes(FlowVLA(cfg), freeze, rank)
    pred = predict("flow_vla", cfg, plan)
    assert pred["params"] == sum(p.numel() for p in policy.parameters())
    assert pred["trainable_params"] == sum(p.numel() for p in policy.parameters() if p.requires_grad)
    obs = _obs(4)
    chain = torch.randn(4, 5, 4, 32)
    replay = {"chain": chain, "stochastic": torch.ones(4, 4, dtype=torch.bool)}
    run, seen = _saved_bytes(lambda p: p.evaluate(obs, replay).log_prob.sum() if step == "rl"
                             else p.sft_loss(obs, torch.rand(4, 4, 4)))
    run(policy)
    est = sum(v for k, v in activation_bytes(policy, plan, 4).items() if k not in ("inputs", "prefix_out", "backward"))
    measured = sum(seen.values())
    assert 0.65 < est / measured < 1.35, (est, measured)


def test_prediction_of_the_pi0_full_fine_tune_matches_the_h100_run():
    """docs/results/gpu_check.md (one H100, commit 37aee8e): the pi0-size flow VLA, fp32 weights,
    fused AdamW, bf16 autocast peaked at 68.5 GiB (RL step, batch 8) and 63.8 GiB (SFT, batch 8),
    and batch 16 ran out of the 80 GiB."""
    from policies.vla.pretrained.presets import PRESETS

    cfg = PRESETS["pi0"]()
    cfg.noise_method = "flow_noise"

    def peak(step: str, batch: int) -> float:
        return predict("flow_vla", cfg, Plan(step=step, batch=batch, optimizer="adam_fused", autocast_bf16=True))["total"] / GiB

    assert abs(peak("rl", 8) - 68.5) < 0.05 * 68.5 and abs(peak("sft", 8) - 63.8) < 0.05 * 63.8
    assert peak("rl", 16) > 80
    frozen = predict("flow_vla", cfg, Plan(step="rl", batch=8, freeze="vlm", frozen_dtype="bfloat16",
                                           checkpointing=True, optimizer="adam_fused", autocast_bf16=True))
    assert frozen["total"] / GiB < 0.3 * peak("rl", 8)


def test_train_config_modes_reach_the_policy_the_learner_and_the_memory_check(tmp_path):
    """`embodied train`'s settings: policy.freeze / frozen_dtype / checkpointing build the policy,
    ppo.optimizer its optimiser, the KL reference shares the frozen weights; the predicted peak
    is said in one line, and a run that cannot fit the device is refused in one line."""
    from embodied.config import ExperimentConfig, PolicyConfig, PPOConfig
    from embodied.config_loader import ConfigError
    from embodied.rl.learner import PPOLearner
    from embodied.rl.loop_parts import memory_preflight
    from policies.registry import build_policy
    from sims.vecenv import EnvSpec

    _flow().save_pretrained(tmp_path / "init")
    spec = EnvSpec(task="Reach", num_envs=2, action_dim=4, state_dim=9, privileged_dim=0, max_episode_steps=50,
                   control_hz=10.0, cameras=("front",))
    pcfg = PolicyConfig(name="flow_vla", init_from=str(tmp_path / "init"), freeze="vlm", frozen_dtype="bfloat16",
                        checkpointing=True)
    policy = build_policy(pcfg, spec)
    assert {p.dtype for p in policy.prefix.parameters()} == {torch.bfloat16}
    assert all(hasattr(layer, "_checkpoint_index") for layer in policy.expert.layers)
    learner = PPOLearner(policy, PPOConfig(optimizer="adam_fused", kl_ref_coef=0.1))
    assert learner.optimizer.defaults["fused"]
    ref = dict(learner.reference.named_parameters())
    for name, p in policy.named_parameters():
        assert (ref[name].data_ptr() == p.data_ptr()) == name.startswith("prefix.")
    cfg = ExperimentConfig(policy=pcfg)
    cfg.env.num_envs = 2
    memory_preflight(cfg, policy, "cpu", spec)  # fits: one line, no error
    cfg.env.num_envs = 10 ** 9  # a rollout batch no machine holds
    with pytest.raises(ConfigError, match=r"^memory: predicted peak .* does not fit; shrink it with policy.freeze") as e:
        memory_preflight(cfg, policy, "cpu", spec)
    assert "\n" not in str(e.value)
