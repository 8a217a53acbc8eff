"""SAC math (embodied/rl/algorithms/sac.py) against hand-computed numbers, the agent's update,
and the replay's 50/50 batches."""

import math

import pytest
import torch

from embodied.rl.algorithms import sac
from embodied.robot_rl.agent import SACAgent, SACConfig
from embodied.robot_rl.replay import Replay, episode_transitions, mixed_batch


def test_tanh_log_prob_at_zero_by_hand():
    # u = mean = 0, std = 1: each dim log N(0; 0, 1) = -0.5 log(2 pi), log(1 - tanh(0)^2) = 0
    lp = sac.tanh_log_prob(torch.zeros(1, 3), torch.zeros(1, 3), torch.zeros(1, 3))
    torch.testing.assert_close(lp, torch.tensor([-1.5 * math.log(2 * math.pi)]))


def test_tanh_log_prob_matches_torch_transformed_distribution():
    g = torch.Generator().manual_seed(0)
    mean, log_std = torch.randn(5, 2, generator=g), 0.3 * torch.randn(5, 2, generator=g)
    u = mean + log_std.exp() * torch.randn(5, 2, generator=g)
    d = torch.distributions.TransformedDistribution(torch.distributions.Normal(mean, log_std.exp()),
                                                    [torch.distributions.TanhTransform()])
    torch.testing.assert_close(sac.tanh_log_prob(u, mean, log_std), d.log_prob(torch.tanh(u)).sum(-1),
                               rtol=1e-4, atol=1e-4)


R, TERM = torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0])
NEXT_Q = torch.tensor([[2.0, 3.0], [1.0, 5.0]])  # [E=2, N=2]
NEXT_LOGP = torch.tensor([-1.0, 2.0])


def test_critic_target_min_over_ensemble_and_terminal_mask():
    # min_e = [1, 3]; y0 = 1 (terminated), y1 = 0 + 0.9 * 3
    y = sac.critic_target(R, TERM, NEXT_Q, NEXT_LOGP, gamma=0.9, alpha=0.1)
    torch.testing.assert_close(y, torch.tensor([1.0, 2.7]))


def test_critic_target_entropy_backup():
    # v1 = 3 - 0.1 * 2 = 2.8 -> y1 = 0.9 * 2.8 = 2.52; y0 stays 1 (terminated)
    y = sac.critic_target(R, TERM, NEXT_Q, NEXT_LOGP, gamma=0.9, alpha=0.1, backup_entropy=True)
    torch.testing.assert_close(y, torch.tensor([1.0, 2.52]))


def test_critic_target_subsample_takes_min_of_a_random_subset():
    q = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    ys = {sac.critic_target(torch.zeros(1), torch.zeros(1), q, torch.zeros(1), 1.0, 0.0, subsample=1,
                            generator=torch.Generator().manual_seed(s)).item() for s in range(40)}
    assert ys == {1.0, 2.0, 3.0, 4.0}  # one critic at a time: every member is drawn
    assert sac.critic_target(torch.zeros(1), torch.zeros(1), q, torch.zeros(1), 1.0, 0.0, subsample=4).item() == 1.0


def test_critic_loss_sums_each_critics_mse():
    q = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    # critic 0: (0 + 1) / 2 = 0.5; critic 1: (4 + 9) / 2 = 6.5
    assert sac.critic_loss(q, torch.tensor([1.0, 1.0])).item() == pytest.approx(7.0)
    # weights [1, 0]: only the first transition: 0 + 4
    assert sac.critic_loss(q, torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0])).item() == pytest.approx(4.0)


def test_actor_loss_by_hand():
    # mean_e Q = [2, 4]; alpha * logp = [-0.5, 0.5]; mean of [-2.5, -3.5] = -3
    q_pi = torch.tensor([[1.0, 3.0], [3.0, 5.0]])
    assert sac.actor_loss(q_pi, torch.tensor([-1.0, 1.0]), 0.5).item() == pytest.approx(-3.0)


def test_temperature_rises_when_entropy_is_below_target_and_falls_above():
    for logp, direction in ((torch.tensor([3.0, 5.0]), 1), (torch.tensor([-6.0, -8.0]), -1)):
        log_alpha = torch.tensor(math.log(0.01), requires_grad=True)
        loss = sac.temperature_loss(log_alpha, logp, target_entropy=-2.0)
        loss.backward()
        # d loss / d log_alpha = -(mean logp + target): logp [3, 5] (entropy -4 < -2) gives -2, so a
        # descent step raises alpha; logp [-6, -8] (entropy 7 > -2) gives +9 and lowers it
        assert log_alpha.grad.item() == pytest.approx(-(logp.mean().item() - 2.0))
        assert -direction * log_alpha.grad.item() > 0  # gradient descent moves alpha in `direction`


def test_bc_loss_only_on_masked_rows():
    mean_a = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    a = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    assert sac.bc_loss(mean_a, a, torch.tensor([1.0, 0.0])).item() == pytest.approx(2.0)
    assert sac.bc_loss(mean_a, a, torch.zeros(2)).item() == 0.0


def test_polyak():
    src, tgt = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    before = tgt.weight.detach().clone()
    sac.polyak(tgt, src, 0.25)
    torch.testing.assert_close(tgt.weight, 0.75 * before + 0.25 * src.weight)


def _bandit(n: int, reward: float) -> Replay:
    """One-step episodes from a fixed state: reward, then terminated."""
    r = Replay()
    for i in range(n):
        r.add({"obs": torch.ones(3), "action": torch.full((2,), 0.5 - i / n), "reward": reward,
               "next_obs": torch.ones(3), "terminated": 1.0, "intervened": 0.0, "version": 0.0})
    return r


def test_agent_critic_regresses_onto_terminal_rewards_and_actor_waits_for_warmup():
    agent = SACAgent(3, 2, SACConfig(hidden=(32, 32), batch_size=32, lr=3e-3))
    online, demo = _bandit(16, 1.0), _bandit(16, 1.0)
    actor_before = [p.detach().clone() for p in agent.actor.parameters()]
    for _ in range(300):
        agent.update([mixed_batch(online, demo, 32, 0.5) for _ in range(2)], actor=False)
    assert all(torch.equal(a, b) for a, b in zip(actor_before, agent.actor.parameters()))
    q = agent.critic(torch.ones(4, 3), torch.zeros(4, 2))
    assert q.shape == (2, 4)
    torch.testing.assert_close(q, torch.ones(2, 4), atol=0.05, rtol=0)  # y = r for terminated rows
    stats = agent.update([mixed_batch(online, demo, 32, 0.5)], actor=True)
    assert {"critic_loss", "actor_loss", "entropy", "alpha"} <= set(stats)
    assert stats["alpha"] == pytest.approx(0.01, rel=0.01)  # SACConfig.init_temperature


def test_agent_state_dict_roundtrip():
    a, b = SACAgent(3, 2, SACConfig(hidden=(8,))), SACAgent(3, 2, SACConfig(hidden=(8,)))
    a.update([mixed_batch(_bandit(4, 1.0), Replay(), 4, 0.5)])
    b.load_state_dict(a.state_dict())
    x, act = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    torch.testing.assert_close(a.critic(x, act), b.critic(x, act))
    assert b.updates == 1 and b.alpha.item() == pytest.approx(a.alpha.item())


def test_mixed_batch_is_half_demo():
    online, demo = _bandit(10, 0.0), _bandit(10, 1.0)
    b = mixed_batch(online, demo, 256, 0.5)
    assert b["demo"].sum().item() == 128 and b["reward"].sum().item() == 128  # demo rows have reward 1
    only = mixed_batch(Replay(), demo, 8, 0.5)
    assert only["demo"].sum().item() == 8


def test_replay_keeps_every_row_as_it_grows():
    r = Replay()
    for i in range(150):  # past two doublings of the first 64 rows
        r.add({"obs": torch.full((2,), float(i)), "action": torch.zeros(1), "reward": float(i),
               "next_obs": torch.zeros(2), "terminated": 0.0, "intervened": 0.0, "version": 0.0})
    assert len(r) == 150 and r.tensors()["reward"].tolist() == [float(i) for i in range(150)]
    assert r.tensors()["obs"][149].tolist() == [149.0, 149.0]


def test_obs_norm_leaves_a_constant_dim_unscaled_with_min_std():
    from embodied.robot_rl.networks import ObsNorm

    obs = torch.tensor([[0.0, -1.0], [0.2, -1.0], [0.4, -1.0]])  # dim 1: a gripper command the demos never change
    old, new = ObsNorm(2), ObsNorm(2)
    old.set(obs)
    new.set(obs, min_std=0.01)
    later = torch.tensor([[0.2, -0.9]])
    assert old(later)[0].tolist() == pytest.approx([0.0, 10.0])  # 0.1 / 1e-3, clipped at 10
    assert new(later)[0].tolist() == pytest.approx([0.0, 0.1])
    assert new.std[0].item() == pytest.approx(0.2)  # the other dims are scaled as before


def test_episode_transitions_terminal_and_truncated():
    obs = torch.arange(3.0).reshape(3, 1)
    act = torch.zeros(3, 1)
    ok = episode_transitions(obs, act, torch.tensor([0.0, 0.0, 1.0]), torch.tensor([False, False, True]))
    assert [t["terminated"] for t in ok] == [0.0, 0.0, 1.0]
    assert [t["next_obs"].item() for t in ok[:2]] == [1.0, 2.0]
    cut = episode_transitions(obs, act, torch.zeros(3), torch.zeros(3, dtype=torch.bool))
    assert len(cut) == 2  # no final observation: the last step has nothing to bootstrap from
    full = episode_transitions(obs, act, torch.zeros(3), torch.zeros(3, dtype=torch.bool), final_obs=torch.tensor([9.0]))
    assert len(full) == 3 and full[-1]["next_obs"].item() == 9.0


def test_config_errors_are_one_line():
    with pytest.raises(ValueError, match=r"^sac\.gamma: must be in \[0, 1\], got 1.5$"):
        SACConfig(gamma=1.5)
    with pytest.raises(ValueError, match=r"^sac\.subsample"):
        SACConfig(ensemble=2, subsample=3)


def test_image_observations_share_one_encoder_trained_by_the_critic(tmp_path):
    from embodied.robot_rl.data import load_policy, save_policy
    from embodied.robot_rl.obs import check_obs_key, image_of, obs_vector

    obs = {"rgb_front": torch.randint(0, 256, (3, 8, 8, 3), dtype=torch.uint8), "state": torch.randn(3, 9)}
    v = obs_vector(obs, "rgb_front+state")
    assert v.shape == (3, 8 * 8 * 3 + 9) and torch.equal(v[1, :192], obs["rgb_front"][1].reshape(-1).float())
    assert image_of("rgb_front+state", (8, 8)) == (8, 8) and image_of("state", (8, 8)) is None
    check_obs_key("rgb_front+state", ("front",))
    with pytest.raises(ValueError, match=r"^obs_key: a camera comes first, and once; allowed: state, privileged, "
                                         r"rgb_front \(robot.image_topics\), joined by '\+'$"):
        check_obs_key("state+rgb_front", ("front",))
    with pytest.raises(ValueError, match=r"^obs_key: unknown 'rgb_wrist'; allowed: "):
        check_obs_key("rgb_wrist", ("front",))
    torch.manual_seed(0)
    agent = SACAgent(v.shape[1], 4, SACConfig(hidden=(16, 16), batch_size=8), image=(8, 8))
    assert agent.actor.encoder is agent.critic.encoder and agent.target.encoder is not agent.critic.encoder
    in_actor_opt = {id(p) for g in agent.opt_actor.param_groups for p in g["params"]}
    assert not in_actor_opt & {id(p) for p in agent.critic.encoder.parameters()}
    b = {"obs": torch.cat([v, v])[:6], "action": torch.rand(6, 4) * 2 - 1, "reward": torch.ones(6),
         "next_obs": torch.cat([v, v])[:6], "terminated": torch.ones(6)}
    enc = [p.detach().clone() for p in agent.critic.encoder.parameters()]
    head = [p.detach().clone() for p in agent.actor.body.parameters()]
    agent.actor_step(b)  # the actor's loss moves its head, not the shared encoder
    assert all(torch.equal(a, p) for a, p in zip(enc, agent.critic.encoder.parameters()))
    assert not all(torch.equal(a, p) for a, p in zip(head, agent.actor.body.parameters()))
    agent.critic_step(b)
    assert not all(torch.equal(a, p) for a, p in zip(enc, agent.critic.encoder.parameters()))
    save_policy(tmp_path / "p.safetensors", agent.actor, 3, (16, 16))
    actor, version = load_policy(tmp_path / "p.safetensors")
    assert version == 3 and actor.encoder.image == (8, 8)
    assert torch.equal(actor.sample(v, deterministic=True)[0], agent.actor.sample(v, deterministic=True)[0])


def test_random_shift_moves_each_frame_by_at_most_pad_and_leaves_the_state():
    from embodied.robot_rl.augment import random_shift

    h, w, pad, n = 12, 10, 2, 300
    frame = torch.zeros(h, w, 3)
    frame[5, 4] = 255.0  # one marked pixel: where it lands is the shift
    state = torch.arange(n * 3.0).reshape(n, 3)
    obs = torch.cat([frame.reshape(1, -1).expand(n, -1), state], -1)
    out = random_shift(obs, (h, w), pad, torch.Generator().manual_seed(0))
    assert out.shape == obs.shape and torch.equal(out[:, h * w * 3:], state)
    marks = out[:, :h * w * 3].reshape(n, h, w, 3)[..., 0].flatten(1).argmax(1)
    dy, dx = marks // w - 5, marks % w - 4
    assert dy.abs().max() <= pad and dx.abs().max() <= pad
    assert set(dy.tolist()) == set(dx.tolist()) == set(range(-pad, pad + 1))  # every shift is drawn, per sample
    assert (out[:, :h * w * 3] == 255.0).sum(1).eq(3).all()  # the mark moves whole; edges repeat the border
    assert random_shift(obs, (h, w), 0) is obs


def test_agent_shifts_only_image_batches_obs_and_next_obs_independently():
    b = {"obs": torch.rand(64, 8 * 8 * 3 + 2) * 255, "next_obs": torch.rand(64, 8 * 8 * 3 + 2) * 255}
    b["next_obs"] = b["obs"].clone()
    img = SACAgent(b["obs"].shape[1], 2, SACConfig(hidden=(8,)), image=(8, 8))
    assert img.cfg.image_shift == 4  # on by default with images
    out = img.augment(b)
    assert not torch.equal(out["obs"], b["obs"]) and not torch.equal(out["obs"], out["next_obs"])
    assert SACAgent(b["obs"].shape[1], 2, SACConfig(hidden=(8,), image_shift=0), image=(8, 8)).augment(b) is b
    assert SACAgent(b["obs"].shape[1], 2, SACConfig(hidden=(8,))).augment(b) is b  # state: never shifted
    with pytest.raises(ValueError, match=r"^sac\.image_shift: must be >= 0"):
        SACConfig(image_shift=-1)


def _steps(rewards, terminated_last=False, intervened=()):
    return [{"obs": torch.tensor([float(i)]), "action": torch.tensor([i + 0.5, -i - 0.5]),
             "reward": torch.tensor(r), "next_obs": torch.tensor([i + 1.0]),
             "terminated": float(terminated_last and i == len(rewards) - 1), "intervened": float(i in intervened),
             "version": float(10 + i), "episode": 3, "step": i} for i, r in enumerate(rewards)]


def test_chunk_transition_by_hand():
    from embodied.robot_rl.replay import chunk_transition

    # 3 steps of a chunk of 4 (the episode succeeded at the third): reward 0 + 0.9 * 0.5 + 0.81 * 1 = 1.26
    t = chunk_transition(_steps([0.0, 0.5, 1.0], terminated_last=True, intervened=(1,)), 4, 0.9)
    assert t["reward"].item() == pytest.approx(1.26)
    assert t["steps"] == 3.0 and t["terminated"] == 1.0 and t["intervened"] == 1.0
    assert t["obs"].item() == 0.0 and t["next_obs"].item() == 3.0 and t["version"] == 10.0 and t["step"] == 0
    assert t["action"].tolist() == [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.0, 0.0]  # executed, zeros past the end
    one = _steps([0.25])
    assert chunk_transition(one, 1, 0.9) == {**one[0], "steps": 1.0}  # single actions: the transition as it is


def test_chunk_transitions_from_an_episode_and_the_critic_target_with_gamma_to_the_h():
    from embodied.robot_rl.replay import chunk_transitions

    ts = _steps([0.0] * 5)  # truncated: every chunk bootstraps
    chunks = chunk_transitions(ts, 2, 0.9)
    assert [(t["step"], t["steps"], t["next_obs"].item()) for t in chunks] == [(0, 2.0, 2.0), (2, 2.0, 4.0), (4, 1.0, 5.0)]
    assert [t["step"] for t in chunk_transitions(ts, 2, 0.9, stride=1)] == [0, 1, 2, 3, 4]
    # y = R + gamma^h (1 - terminated) min_e Q': h = 2 -> 0.5 + 0.81 * 1, h = 1 -> 0 + 0.9 * 3
    gamma = 0.9 ** torch.tensor([2.0, 1.0])
    y = sac.critic_target(torch.tensor([0.5, 0.0]), torch.zeros(2), NEXT_Q, NEXT_LOGP, gamma, alpha=0.1)
    torch.testing.assert_close(y, torch.tensor([1.31, 2.7]))
    # a terminated chunk does not bootstrap, whatever its length
    y = sac.critic_target(torch.tensor([1.26]), torch.ones(1), NEXT_Q[:, :1], NEXT_LOGP[:1], 0.9 ** torch.tensor([3.0]), 0.1)
    assert y.item() == pytest.approx(1.26)


def test_chunk_one_is_single_actions_exactly():
    """sac.chunk 1 reads no steps field: two agents from one seed, one fed batches whose steps say 5,
    stay bit for bit equal (gamma, not gamma^5); with chunk 2 the same batches give another target."""
    def agent(chunk):
        torch.manual_seed(0)
        return SACAgent(3, 2 * chunk, SACConfig(hidden=(8,), batch_size=8, chunk=chunk))

    base = {k: v[:8] for k, v in mixed_batch(_bandit(8, 0.5), Replay(), 8, 0.5, torch.Generator().manual_seed(1)).items()}
    base["terminated"] = torch.zeros(8)
    odd = {**base, "steps": torch.full((8,), 5.0)}
    a, b = agent(1), agent(1)
    torch.manual_seed(2)
    sa = a.critic_step(base)
    torch.manual_seed(2)
    sb = b.critic_step(odd)
    assert sa == sb and all(torch.equal(p, q) for p, q in zip(a.critic.parameters(), b.critic.parameters()))
    assert SACConfig().chunk == 1
    c = agent(2)
    wide = {**odd, "action": torch.cat([odd["action"], odd["action"]], -1)}
    torch.manual_seed(2)
    with torch.no_grad():
        next_a, next_logp = c.actor.sample(wide["next_obs"])
        v = c.target(wide["next_obs"], next_a).min(0).values
    torch.manual_seed(2)
    assert c.critic_step(wide)["target_mean"] == pytest.approx((0.5 + 0.97 ** 5 * v).mean().item(), rel=1e-5)


def test_chunk_config_errors_are_one_line(tmp_path):
    from embodied.robot_rl.actor import Actor
    from embodied.robot_rl.config import FinetuneConfigError, config_from_dict
    from embodied.robot_rl.data import save_policy
    from embodied.robot_rl.networks import TanhGaussianActor
    from sims.vecenv import EnvError

    with pytest.raises(FinetuneConfigError, match=r"^sac\.chunk: 2 with residual .*; allowed with residual: 1$"):
        config_from_dict({"residual": {"base": "vla"}, "sac": {"chunk": 2}, "obs_key": "state"})
    with pytest.raises(FinetuneConfigError, match=r"^sac\.chunk: must be >= 1, got 0$"):
        config_from_dict({"sac": {"chunk": 0}})
    save_policy(tmp_path / "policy.safetensors", TanhGaussianActor(15, 4, (8,)), 0, (8,))  # single actions
    cfg = config_from_dict({"run_dir": str(tmp_path), "sac": {"chunk": 2}, "sim": {},
                            "robot": {"task": "Reach", "privileged_topic": "/privileged", "privileged_dim": 15}})
    with pytest.raises(EnvError, match=r"^sac\.chunk: 2 actions of 4 \(robot\.action_dim\), but .* gives 4 values$"):
        Actor(cfg)
