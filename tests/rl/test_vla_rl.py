"""RL math of the VLA policies, checked against densities computed independently here:
Flow-Noise and Flow-SDE chain log-probs, autoregressive token log-probs under temperature,
ratio 1 at the first PPO epoch for every policy type and granularity, GRPO groups."""

from __future__ import annotations

import math

import pytest
import torch

from embodied.config import ConfigError, GRPOConfig, PPOConfig, load_config
from embodied.rl.episodes import GroupCollector
from embodied.rl.learner import GRPOLearner, PPOLearner, advantages_at_level, at_level
from embodied.rl.rollout import RolloutCollector
from policies.mlp import MLPActorCritic, MLPConfig
from policies.vla.autoregressive import ARVLA
from policies.vla.config import ARVLAConfig, FlowVLAConfig
from policies.vla.flow import FlowVLA
from sims.registry import make_env
from sims.vecenv import EnvError

INSTR = ["push the cube to the goal", "move the gripper to the target"]
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
               "num_attention_heads": 2, "image_size": 32, "patch_size": 16}


def _obs(B: int = 6, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"state": torch.randn(B, 9, generator=g),
            "rgb_front": torch.randint(0, 256, (B, 32, 32, 3), generator=g, dtype=torch.uint8),
            "instruction": [INSTR[i % 2] for i in range(B)]}


def _flow(method: str, **kw) -> FlowVLA:
    torch.manual_seed(0)
    p = FlowVLA(FlowVLAConfig(noise_method=method, vision=dict(TINY_VISION), **{"num_steps": 4, **kw}))
    with torch.no_grad():  # a noise head that is not constant, so the test sees per-element stds
        p.noise_head.proj.weight.normal_(0.0, 0.5)
    return p


def _normal(x, mean, std):
    return torch.distributions.Normal(mean.double(), std.double()).log_prob(x.double())


def test_flow_noise_log_prob_is_the_gaussian_density_of_the_chain():
    p = _flow("flow_noise", execute_steps=3)
    obs = _obs()
    out = p.act(obs)
    chain, N, A = out.replay["chain"], 4, 4
    assert out.replay["stochastic"].all() and chain.shape == (6, N + 1, 4, 32)
    prefix, state = p.encode(obs)
    expect = torch.zeros(6, 4, A, dtype=torch.float64)
    entropy = torch.zeros(6, dtype=torch.float64)
    with torch.no_grad():
        for i in range(N):
            t = torch.full((6,), 1.0 - i / N)
            v, h = p.expert(prefix.kv, prefix.mask, state, chain[:, i], t, with_hidden=True)
            mean = chain[:, i] - v / N
            std = 0.08 + 0.08 * torch.sigmoid(h @ p.noise_head.proj.weight.T + p.noise_head.proj.bias)
            expect += _normal(chain[:, i + 1, :, :A], mean[..., :A], std[..., :A])
            entropy += torch.distributions.Normal(0.0, std[..., :A].double()).entropy().sum((1, 2))
            # padded dims follow the ODE exactly
            torch.testing.assert_close(chain[:, i + 1, :, A:], mean[..., A:], atol=1e-6, rtol=0)
    # the whole chunk is scored, the 3 executed positions and the 1 that is not
    assert out.actions.shape == (6, 3, A) and out.log_prob_parts.shape == (6, 4, A)
    torch.testing.assert_close(out.log_prob_parts.double(), expect, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.log_prob.double(), expect.sum((1, 2)), atol=1e-4, rtol=1e-6)
    ev = p.evaluate(obs, out.replay)
    torch.testing.assert_close(ev.entropy.double(), entropy, atol=1e-4, rtol=1e-6)
    assert (ev.log_prob - out.log_prob).abs().max() < 1e-6
    ev.log_prob.sum().backward()  # the noise head learns through the log-prob
    assert p.noise_head.proj.weight.grad.abs().sum() > 0 and p.expert.action_out.weight.grad.abs().sum() > 0


def test_flow_sde_log_prob_is_the_density_of_its_one_stochastic_step():
    a = 0.7
    p = _flow("flow_sde", sde_noise_level=a)
    obs = _obs()
    out = p.act(obs)
    chain, stoch, N, A = out.replay["chain"], out.replay["stochastic"], 4, 4
    assert (stoch.sum(1) == 1).all()
    prefix, state = p.encode(obs)
    expect = torch.zeros(6, 4, A, dtype=torch.float64)
    dt = 1.0 / N
    with torch.no_grad():
        for i in range(N):
            t = 1.0 - i / N
            v = p.velocity(prefix, state, chain[:, i], torch.full((6,), t))
            ts = min(t, 1 - dt)
            g2 = a * a * ts / (1 - ts)
            mean = chain[:, i] - dt * v - dt * g2 / (2 * t) * (chain[:, i] + (1 - t) * v)
            rows = stoch[:, i]
            lp = _normal(chain[:, i + 1, :, :A], mean[..., :A], torch.full_like(mean[..., :A], math.sqrt(g2 * dt)))
            expect[rows] += lp[rows]
            ode = chain[:, i] - dt * v  # every other step is a plain ODE step
            torch.testing.assert_close(chain[~rows, i + 1], ode[~rows], atol=1e-6, rtol=0)
    torch.testing.assert_close(out.log_prob_parts.double(), expect, atol=1e-5, rtol=0)
    assert (p.evaluate(obs, out.replay).log_prob - out.log_prob).abs().max() < 1e-6
    ev = p.evaluate(obs, out.replay)
    assert not ev.entropy.requires_grad  # Flow-SDE's stds come from the schedule: no parameters


def test_flow_sde_replay_with_two_stochastic_steps_is_an_error():
    p = _flow("flow_sde")
    obs = _obs()
    out = p.act(obs)
    bad = dict(out.replay, stochastic=out.replay["stochastic"].clone())
    bad["stochastic"][0] = True
    with pytest.raises(ValueError, match="flow_sde replay: 4 stochastic steps"):
        p.evaluate(obs, bad)


def test_ar_log_probs_are_the_log_softmax_of_the_restricted_logits():
    temp = 1.6
    torch.manual_seed(0)
    p = ARVLA(ARVLAConfig(temperature=temp, vision=dict(TINY_VISION), chunk_size=2, execute_steps=1))
    obs = _obs()
    out = p.act(obs)
    bins = out.replay["bins"]  # [B, K * A]
    ids, mask = p.text(obs, 6)
    embeds, emask = p.prefix.embed(obs, ids, mask, p.state_proj(p.padded_state(obs))[:, None])
    seq = torch.cat([embeds, p.prefix.lm.get_input_embeddings()(bins[:, :-1] + p.base_id)], 1)
    full = torch.cat([emask, torch.ones(6, bins.shape[1] - 1, dtype=torch.bool)], 1)
    pos = (full.long().cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = p.prefix.lm(inputs_embeds=seq, attention_mask=full.long(), position_ids=pos).logits
    T = embeds.shape[1]
    restricted = logits[:, T - 1:, p.base_id:p.base_id + 256] / temp  # [B, M, 256]
    tok = torch.log_softmax(restricted.double(), -1).gather(-1, bins[..., None]).squeeze(-1)  # [B, M]
    torch.testing.assert_close(out.log_prob_parts.double(), tok.view(6, 2, 4)[:, :1], atol=1e-4, rtol=1e-5)
    assert out.log_prob_parts.shape == (6, 1, 4)  # only the executed action's tokens


def _rollout(policy, task="PushCube", B=4, T=3, image=True):
    env = make_env(task, B, obs_mode="rgb", image_size=32) if image else make_env(task, B)
    col = RolloutCollector(env, policy, T)
    col.reset(seed=0)
    traj = col.collect()
    env.close()
    return traj


POLICIES = {
    "mlp": lambda: MLPActorCritic(MLPConfig(obs_dim=make_env("PushCube", 1).spec.privileged_dim, action_dim=4,
                                            obs_key="privileged", hidden_sizes=[32])),
    # the flow recipes' settings (configs/rl/rl_pushcube_*.yaml), and other step counts
    "flow_noise": lambda: _flow("flow_noise", execute_steps=2, noise_std_min=0.2, noise_std_max=0.5),
    "flow_noise_n5": lambda: _flow("flow_noise", execute_steps=2, num_steps=5),
    "flow_noise_n10": lambda: _flow("flow_noise", execute_steps=1, num_steps=10),
    "flow_sde": lambda: _flow("flow_sde", execute_steps=2, sde_noise_level=0.5),
    "flow_sde_n3": lambda: _flow("flow_sde", execute_steps=2, num_steps=3),
    "ar": lambda: ARVLA(ARVLAConfig(temperature=1.6, vision=dict(TINY_VISION), chunk_size=2)),
}


def test_non_executed_chunk_positions_take_the_chunk_advantage_and_their_step_mask():
    """The flow VLA scores K = 4 positions of which n = 2 were executed: positions 2-3 count
    wherever their step does (its first substep was executed) and take the chunk's advantage,
    the first executed action's."""
    parts = torch.arange(24, dtype=torch.float32).view(3, 4, 2)  # [N, K, A]
    valid = torch.tensor([[True, True], [True, False], [False, False]])  # [N, n]
    lp, mask = at_level(parts.sum((1, 2)), parts, valid, "action")
    torch.testing.assert_close(lp, parts.sum(-1))
    assert mask.tolist() == [[True] * 4, [True, False, True, True], [False] * 4]
    tok, tmask = at_level(parts.sum((1, 2)), parts, valid, "token")
    assert tok.shape == (3, 8) and tmask.tolist()[1] == [True, True, False, False, True, True, True, True]
    adv = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])  # per executed action
    assert advantages_at_level(adv, 4, 2, "action").tolist() == [[1, 2, 1, 1], [3, 4, 3, 3], [5, 6, 5, 5]]
    assert advantages_at_level(adv, 4, 2, "token").tolist()[0] == [1, 1, 2, 2, 1, 1, 1, 1]
    assert advantages_at_level(adv, 4, 2, "chunk").tolist() == [[1], [3], [5]]
    per_chunk = torch.tensor([7.0, 8.0, 9.0])
    assert advantages_at_level(per_chunk, 4, 2, "action").tolist() == [[7] * 4, [8] * 4, [9] * 4]


@pytest.fixture
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("name", list(POLICIES))
def test_first_ppo_ratio_is_one_at_every_level(name, one_thread):
    """To 1e-6 on a shuffled minibatch, with one intra-op thread as the recipes run
    (train.torch_threads: 1); with more, float32 reductions split by batch size and move a
    chunk's log-prob by up to about 1e-5."""
    torch.manual_seed(1)
    policy = POLICIES[name]()
    traj = _rollout(policy, image=name != "mlp")
    assert traj.log_prob_parts is not None
    obs = {k: v.flatten(0, 1) for k, v in traj.obs.items()}
    obs["instruction"] = [s for step in traj.instructions for s in step]
    replay = {k: v.flatten(0, 1) for k, v in traj.replay.items()}
    idx = torch.tensor([5, 0, 7, 2, 11])  # a shuffled minibatch, as in the learner
    mb = {k: (v[idx] if torch.is_tensor(v) else [v[i] for i in idx.tolist()]) for k, v in obs.items()}
    with torch.no_grad():
        ev = policy.evaluate(mb, {k: v[idx] for k, v in replay.items()})
    valid = traj.valid.flatten(0, 1)[idx]
    for level in ("chunk", "action", "token"):
        new, mask = at_level(ev.log_prob, ev.log_prob_parts, valid, level)
        old, _ = at_level(traj.log_probs.flatten()[idx], traj.log_prob_parts.flatten(0, 1)[idx], valid, level)
        ratio = torch.exp(new - old)[mask]
        assert (ratio - 1).abs().max() < 1e-6, (level, ratio)


def test_ppo_learner_moves_a_flow_noise_policy_and_recomputes_old_log_probs():
    policy = _flow("flow_noise")
    traj = _rollout(policy)
    before = [p.detach().clone() for p in policy.noise_head.parameters()]
    cfg = PPOConfig(epochs=1, minibatches=2, logprob_level="action", recompute_log_probs=True, lr=1e-5)
    stats = PPOLearner(policy, cfg).update(traj)
    assert abs(stats["ratio"] - 1.0) < 0.05 and stats["minibatch_updates"] == 2
    assert any(not torch.equal(b, p) for b, p in zip(before, policy.noise_head.parameters()))


@pytest.mark.parametrize("level", ["chunk", "action", "token"])
def test_action_level_rewards_train_a_per_action_critic(level):
    policy = _flow("flow_noise", execute_steps=2)
    policy.reset_critic("prefix", per_action=True)
    traj = _rollout(policy)
    assert traj.values.shape == (3, 4, 2) and traj.last_value.shape == (4,)
    critic = [p.detach().clone() for p in policy.critic_parameters()]
    cfg = PPOConfig(epochs=1, minibatches=2, logprob_level=level, reward_level="action", lr=1e-5)
    stats = PPOLearner(policy, cfg).update(traj)
    assert abs(stats["ratio"] - 1.0) < 0.05 and math.isfinite(stats["value_loss"])
    assert any(not torch.equal(c, p) for c, p in zip(critic, policy.critic_parameters()))
    with pytest.raises(ValueError, match="ppo.reward_level=chunk: the policy's critic gives one value per action"):
        PPOLearner(policy, PPOConfig(epochs=1, minibatches=2)).update(traj)
    policy.reset_critic("prefix")  # one value per chunk cannot score two actions
    with pytest.raises(ValueError, match="ppo.reward_level=action: the critic gives 1 value"):
        PPOLearner(policy, cfg).update(_rollout(policy))


def test_critic_warmup_leaves_the_actor_alone():
    policy = _flow("flow_noise")
    traj = _rollout(policy)
    actor = [p.detach().clone() for p in policy.actor_parameters()]
    critic = [p.detach().clone() for p in policy.critic_parameters()]
    stats = PPOLearner(policy, PPOConfig(epochs=1, minibatches=1, critic_warmup_iters=1)).update(traj)
    assert stats["critic_warmup"] == 1.0
    assert all(torch.equal(a, p) for a, p in zip(actor, policy.actor_parameters()))
    assert any(not torch.equal(c, p) for c, p in zip(critic, policy.critic_parameters()))


def test_grpo_groups_share_initial_states_and_mask_their_episodes():
    policy = _flow("flow_sde")
    env = make_env("PushCube", 6, obs_mode="rgb", image_size=32)
    col = GroupCollector(env, policy, group_size=3, seed=5)
    traj = col.collect()
    env.close()
    assert traj.group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    s0 = traj.obs["state"][0]
    assert torch.equal(s0[0], s0[1]) and torch.equal(s0[0], s0[2]) and not torch.equal(s0[0], s0[3])
    m = traj.episode_mask
    assert m[0].all() and (m[1:] <= m[:-1]).all()  # a prefix of steps per env
    assert not m[-1].all() or traj.dones[-1].all()
    stats = GRPOLearner(policy, PPOConfig(epochs=1, minibatches=1), load_config(None).grpo).update(traj)
    assert 0.0 <= stats["group_success"] <= 1.0
    keep_all = GRPOConfig(reward="return", filter_groups=False)  # all-fail groups still rank by return
    stats = GRPOLearner(policy, PPOConfig(epochs=1, minibatches=1), keep_all).update(traj)
    assert stats["kept_groups"] == 2.0 and stats["minibatch_updates"] == 1.0


def test_grpo_loss_weighs_episodes_equally_without_renormalising():
    """At ratio 1 the GRPO policy loss is minus the mean advantage over kept episodes, which
    group normalisation makes 0, however long each episode is. A per-minibatch normalisation
    over steps (PPO's) would shift the advantages by a mean dominated by the long episodes."""
    policy = _flow("flow_noise")
    env = make_env("PushCube", 6, obs_mode="rgb", image_size=32)
    traj = GroupCollector(env, policy, group_size=3, seed=5).collect()
    env.close()
    traj.episode_mask[2:, 0] = False  # env 0's episode ends after 2 steps; the others run on
    traj.episode_mask[5:, 4] = False
    steps = traj.episode_mask.sum(0)
    assert len(set(steps.tolist())) > 1
    cfg = GRPOConfig(reward="return", filter_groups=False)
    ret = (traj.chunk_rewards * traj.episode_mask).sum(0)
    assert ret.std() > 0  # advantages that are not all zero
    stats = GRPOLearner(policy, PPOConfig(epochs=1, minibatches=1, normalize_advantages=True), cfg).update(traj)
    assert abs(stats["policy_loss"]) < 1e-6 and abs(stats["ratio"] - 1.0) < 1e-5


def test_bad_rl_input_gives_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="grpo.group_size: env.num_envs=30 must be a multiple of group_size=8"):
        load_config(None, ["train.algorithm=grpo", "env.num_envs=30"])
    with pytest.raises(ConfigError, match="ppo.normalize_rewards: PPO only"):
        load_config(None, ["train.algorithm=grpo", "env.num_envs=16", "ppo.normalize_rewards=true"])
    with pytest.raises(ConfigError, match="ppo.logprob_level: 'sequence' is not allowed"):
        load_config(None, ["ppo.logprob_level=sequence"])
    with pytest.raises(ConfigError, match="ppo.reward_level: GRPO scores whole episodes"):
        load_config(None, ["train.algorithm=grpo", "env.num_envs=16", "ppo.reward_level=action"])
    with pytest.raises(ConfigError, match="policy.critic_obs: ppo.reward_level=action needs"):
        load_config(None, ["policy.name=flow_vla", "ppo.reward_level=action"])
    with pytest.raises(EnvError, match="group_size"):
        GroupCollector(make_env("Reach", 5), None, group_size=2)
    from policies.base import PolicyLoadError
    from policies.registry import build_policy

    ARVLA(ARVLAConfig(vision=dict(TINY_VISION))).save_pretrained(tmp_path / "ar")
    env = make_env("Reach", 2, obs_mode="rgb", image_size=32)
    with pytest.raises(ConfigError, match="^unknown config key 'policy.noise_method' for policy.name=ar_vla; allowed"):
        load_config(None, ["policy.name=ar_vla", f"policy.init_from={tmp_path / 'ar'}", "policy.noise_method=flow_noise"])
    cfg = load_config(None, ["policy.name=ar_vla", f"policy.init_from={tmp_path / 'ar'}"]).policy
    cfg.noise_method = "flow_noise"  # set by hand on the object: build_policy refuses it too
    with pytest.raises(PolicyLoadError, match="policy.noise_method applies to flow_vla only"):
        build_policy(cfg, env.spec)
    del cfg.noise_method
    cfg.init_from = None
    with pytest.raises(PolicyLoadError, match="policy.init_from"):
        build_policy(cfg, env.spec)
    env.close()


def test_every_shipped_config_loads():
    from pathlib import Path

    from embodied.pipeline import load_pipeline
    from embodied.imitation.sft import load_sft_config

    root = Path(__file__).resolve().parents[2] / "configs"
    kinds = {"ppo", "rl", "sft", "finetune", "pipeline", "lift"}  # the experiment configs, a folder per schema
    configs = sorted(p for kind in kinds for p in (root / kind).glob("*.yaml"))
    assert len(configs) >= 30 and not list(root.glob("*.yaml"))  # none left outside a kind folder
    for path in configs:
        if path.parent.name == "sft":
            load_sft_config(path)
        elif path.parent.name == "finetune":  # on-robot RL (embodied finetune-robot)
            from embodied.robot_rl.config import load_finetune_config

            load_finetune_config(path)
        elif path.name == "lift_multi_grpo_state.yaml":  # collect, bc (behaviour cloning), rl
            from test_rl_lift_multitask_state import load_state_lift

            from embodied.config import config_from_dict

            config_from_dict(load_state_lift(path)[0]["rl"])
        elif path.parent.name in ("pipeline", "lift"):
            run_dir, collect, sft, rl = load_pipeline(path)
            assert rl.policy.init_from == str(run_dir / "sft" / "final") and sft.dataset == str(run_dir / "data")
        else:
            load_config(path)


def test_pipeline_owns_the_paths_between_stages(tmp_path):
    from pathlib import Path

    from embodied.pipeline import load_pipeline

    demo = Path(__file__).resolve().parents[2] / "configs" / "pipeline" / "demo.yaml"
    with pytest.raises(ConfigError, match="rl.policy.init_from: set by the pipeline"):
        load_pipeline(demo, ["rl.policy.init_from=somewhere"])
    with pytest.raises(ConfigError, match="rl.env.task"):
        load_pipeline(demo, ["rl.env.task=PushCube"])


def test_pipeline_end_to_end_writes_summary_plot_and_video(tmp_path, capsys):
    """collect -> SFT -> PPO -> eval on a tiny budget: every stage's output exists."""
    import json
    from pathlib import Path

    from embodied.cli import main

    demo = Path(__file__).resolve().parents[2] / "configs" / "pipeline" / "demo.yaml"
    rc = main(["pipeline", str(demo), f"run_dir={tmp_path / 'demo'}", "collect.episodes=6",
               "collect.image_size=32", "sft.steps=10", "sft.batch_size=8", "sft.warmup_steps=2",
               "rl.env.image_size=32", "rl.env.num_envs=8", "rl.ppo.rollout_steps=4", "rl.train.total_steps=200", "rl.train.eval_every=0",
               "rl.train.eval_episodes=4", "rl.train.video_episodes=1", "rl.train.progress=false"])
    assert rc == 0
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert 0.0 <= summary["success_sft"] <= 1.0 and 0.0 <= summary["success_rl"] <= 1.0
    assert Path(summary["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Path(summary["video"]).stat().st_size > 0 and Path(summary["rl_checkpoint"]).is_dir()
    out = capsys.readouterr().out
    assert "success after SFT (before RL)" in out and "success after RL" in out


def test_resume_loads_an_ar_checkpoint_with_tied_weights(tmp_path):
    """Training resume loads saved weights into the running policy; the AR VLA's LM head is
    tied to its embeddings and saved once."""
    torch.manual_seed(0)
    saved = ARVLA(ARVLAConfig(vision=dict(TINY_VISION)))
    saved.save_pretrained(tmp_path)
    torch.manual_seed(1)
    running = ARVLA(ARVLAConfig(vision=dict(TINY_VISION)))
    running.load_saved_weights(tmp_path)
    for (k, a), b in zip(saved.state_dict().items(), running.state_dict().values()):
        assert torch.equal(a, b), k
