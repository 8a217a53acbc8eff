"""GAE and PPO losses against hand-computed numbers."""

import pytest
import torch

from embodied.rl.algorithms import action_level_gae, gae, ppo_policy_loss, value_loss

GAMMA, LAM = 0.9, 0.8
R = torch.tensor([[1.0], [0.0], [2.0]])  # [T=3, B=1]
V = torch.tensor([[0.5], [1.0], [1.5]])
LAST = torch.tensor([2.0])


def test_gae_no_done():
    # delta = [1 + .9*1 - .5, 0 + .9*1.5 - 1, 2 + .9*2 - 1.5] = [1.4, .35, 2.3]
    adv, ret = gae(R, V, torch.zeros(3, 1, dtype=torch.bool), LAST, GAMMA, LAM)
    expect = torch.tensor([[1.4 + 0.72 * (0.35 + 0.72 * 2.3)], [0.35 + 0.72 * 2.3], [2.3]])
    torch.testing.assert_close(adv, expect)
    torch.testing.assert_close(ret, expect + V)


def test_gae_terminal_masks_next_value_and_trace():
    dones = torch.tensor([[False], [True], [False]])
    adv, _ = gae(R, V, dones, LAST, GAMMA, LAM)
    # step 1 terminated: delta1 = 0 - 1 = -1, no trace from step 2
    torch.testing.assert_close(adv, torch.tensor([[1.4 - 0.72], [-1.0], [2.3]]))


def test_gae_truncation_bootstraps_final_value():
    dones = torch.tensor([[False], [True], [False]])
    boot = torch.tensor([[0.0], [3.0], [0.0]])  # V(final obs) of the truncated step
    adv, _ = gae(R, V, dones, LAST, GAMMA, LAM, bootstrap=boot)
    # delta1 = 0 + .9*3 - 1 = 1.7
    torch.testing.assert_close(adv, torch.tensor([[1.4 + 0.72 * 1.7], [1.7], [2.3]]))


def test_gae_batch_columns_independent():
    r = torch.cat([R, 2 * R], dim=1)
    v = torch.cat([V, V], dim=1)
    adv, _ = gae(r, v, torch.zeros(3, 2, dtype=torch.bool), torch.tensor([2.0, 2.0]), GAMMA, LAM)
    a0, _ = gae(R, V, torch.zeros(3, 1, dtype=torch.bool), LAST, GAMMA, LAM)
    torch.testing.assert_close(adv[:, :1], a0)
    assert not torch.allclose(adv[:, 1:], a0)


# Action level: T=2 chunks of n=2 executed actions, laid end to end as 4 steps.
RA = torch.tensor([[[1.0, 0.0]], [[2.0, 1.0]]])  # [T=2, B=1, n=2]
VA = torch.tensor([[[0.5, 1.0]], [[1.5, 0.2]]])
ALL = torch.ones(2, 1, 2, dtype=torch.bool)
NO = torch.zeros(2, 1, dtype=torch.bool)


def test_action_level_gae_runs_over_the_executed_actions():
    # next values [1, 1.5, .2, 2]: deltas [1.4, .35, .68, 2.6]; gamma * lam = .72
    adv, ret = action_level_gae(RA, VA, ALL, NO, LAST, GAMMA, LAM)
    a2 = 0.68 + 0.72 * 2.6
    a1 = 0.35 + 0.72 * a2
    torch.testing.assert_close(adv, torch.tensor([[[1.4 + 0.72 * a1, a1]], [[a2, 2.6]]]))
    torch.testing.assert_close(ret, adv + VA)


def test_action_level_gae_stops_at_the_action_that_ended_the_episode():
    valid = torch.tensor([[[True, False]], [[True, True]]])  # chunk 0 terminated after its first action
    rewards = RA.clone()
    rewards[0, 0, 1] = 5.0  # an unexecuted action's reward is ignored
    adv, _ = action_level_gae(rewards, VA, valid, torch.tensor([[True], [False]]), LAST, GAMMA, LAM)
    torch.testing.assert_close(adv, torch.tensor([[[0.5, 0.0]], [[0.68 + 0.72 * 2.6, 2.6]]]))


def test_action_level_gae_bootstraps_a_truncated_chunk_at_its_last_action():
    boot = torch.tensor([[3.0], [0.0]])
    adv, _ = action_level_gae(RA, VA, ALL, torch.tensor([[True], [False]]), LAST, GAMMA, LAM, boot)
    # delta1 = 0 + .9 * 3 - 1 = 1.7 (V of the next chunk not used); delta0 = 1.4
    torch.testing.assert_close(adv[0], torch.tensor([[1.4 + 0.72 * 1.7, 1.7]]))


def test_action_level_gae_with_one_action_per_chunk_is_chunk_gae():
    dones = torch.tensor([[False], [True], [False]])
    adv, ret = action_level_gae(R[..., None], V[..., None], torch.ones(3, 1, 1, dtype=torch.bool), dones,
                                LAST, GAMMA, LAM)
    a0, r0 = gae(R, V, dones, LAST, GAMMA, LAM)
    torch.testing.assert_close(adv[..., 0], a0)
    torch.testing.assert_close(ret[..., 0], r0)


def _loss_and_grad(ratio: float, adv: float, **kw):
    old = torch.zeros(1)
    lp = torch.tensor([torch.log(torch.tensor(ratio)).item()], requires_grad=True)
    loss, stats = ppo_policy_loss(lp, old, torch.tensor([adv]), **kw)
    loss.backward()
    return loss.item(), lp.grad.item(), stats


def test_ppo_inside_clip_range_is_plain_surrogate():
    loss, grad, st = _loss_and_grad(1.1, 2.0)
    assert loss == pytest.approx(-2.2)
    assert grad == pytest.approx(-2.2)  # d(-r A)/d logp = -r A
    assert st.clip_fraction.item() == 0.0


@pytest.mark.parametrize("ratio,adv,expect", [
    (1.5, 2.0, -1.28 * 2.0),   # positive advantage, above 1 + clip_high
    (0.5, -2.0, 0.8 * 2.0),    # negative advantage, below 1 - clip_low
])
def test_ppo_gradient_vanishes_outside_clip(ratio, adv, expect):
    loss, grad, st = _loss_and_grad(ratio, adv, dual_clip=None)
    assert loss == pytest.approx(expect)
    assert grad == 0.0
    assert st.clip_fraction.item() == 1.0


def test_ppo_asymmetric_clip():
    # 1.25 is outside a symmetric 0.2 range but inside clip_high = 0.28.
    _, grad_asym, _ = _loss_and_grad(1.25, 1.0, clip_low=0.2, clip_high=0.28)
    _, grad_sym, _ = _loss_and_grad(1.25, 1.0, clip_low=0.2, clip_high=0.2)
    assert grad_asym == pytest.approx(-1.25)
    assert grad_sym == 0.0


def test_ppo_pessimistic_side_keeps_gradient():
    # A > 0 and ratio below 1 - clip: min picks the unclipped term.
    loss, grad, _ = _loss_and_grad(0.5, 2.0)
    assert loss == pytest.approx(-1.0)
    assert grad == pytest.approx(-1.0)


def test_dual_clip_bounds_negative_advantage():
    loss, grad, _ = _loss_and_grad(5.0, -1.0, dual_clip=3.0)
    assert loss == pytest.approx(3.0)  # objective = max(5 * -1, 3 * -1) = -3
    assert grad == 0.0
    loss, grad, _ = _loss_and_grad(5.0, -1.0, dual_clip=None)
    assert loss == pytest.approx(5.0)
    assert grad == pytest.approx(5.0)
    # dual clip never touches positive advantages
    loss, _, _ = _loss_and_grad(5.0, 1.0, dual_clip=3.0)
    assert loss == pytest.approx(-1.28)


def test_ppo_mask_ignores_entries():
    lp = torch.log(torch.tensor([1.0, 1.1, 7.0]))
    lp.requires_grad_(True)
    adv = torch.tensor([1.0, 2.0, 100.0])
    mask = torch.tensor([True, True, False])
    loss, st = ppo_policy_loss(lp, torch.zeros(3), adv, mask=mask)
    assert loss.item() == pytest.approx(-(1.0 + 2.2) / 2)
    loss.backward()
    assert lp.grad[2].item() == 0.0
    assert st.approx_kl.item() == pytest.approx(((1.1 - 1) - torch.log(torch.tensor(1.1)).item()) / 2, rel=1e-5)


def test_ratio_one_gives_zero_kl():
    lp = torch.randn(16)
    _, st = ppo_policy_loss(lp, lp.clone(), torch.randn(16))
    assert st.approx_kl.item() == 0.0 and st.ratio_mean.item() == 1.0


def test_value_loss_clipped_takes_max():
    v, old, ret = torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([3.0])
    # unclipped: .5 * 1^2 = .5; clipped prediction 1.2: .5 * 1.8^2 = 1.62
    assert value_loss(v, old, ret, clip=0.2, huber_delta=None).item() == pytest.approx(1.62)
    assert value_loss(v, old, ret, clip=None, huber_delta=None).item() == pytest.approx(0.5)
    # Huber with a small delta is linear beyond it: delta * (|e| - delta / 2)
    assert value_loss(v, old, ret, clip=None, huber_delta=0.5).item() == pytest.approx(0.5 * (1.0 - 0.25))
    assert value_loss(v, old, ret, clip=None, huber_delta=10.0).item() == pytest.approx(0.5)


# --- reward scaling by the running std of the discounted return (ppo.normalize_rewards) ---

def test_return_scaler_divides_by_the_std_of_every_running_return():
    from embodied.rl.learner import ReturnScaler

    gamma = 0.5
    r = torch.tensor([[1.0, 2.0], [3.0, 0.0], [1.0, 4.0]])  # [T=3, B=2]
    done = torch.tensor([[False, True], [False, False], [False, False]])
    # env 0: R = 1, 0.5 + 3 = 3.5, 1.75 + 1 = 2.75; env 1: R = 2 (then reset), 0, 4
    returns = torch.tensor([1.0, 3.5, 2.75, 2.0, 0.0, 4.0], dtype=torch.float64)
    scale = 1.0 / (returns.var(unbiased=False) + 1e-8).sqrt()
    scaler = ReturnScaler(gamma)
    out = scaler(r[..., None], torch.ones(3, 2, 1, dtype=torch.bool), done)
    torch.testing.assert_close(out[..., 0], (r.double() * scale).float())
    assert scaler.ret.tolist() == [2.75, 4.0]  # carried to the next rollout


def test_return_scaler_skips_invalid_substeps_and_clips():
    from embodied.rl.learner import ReturnScaler

    scaler = ReturnScaler(gamma=1.0, clip=1.5)
    r = torch.tensor([[[1.0, 5.0]], [[-1.0, 0.0]]])  # [T=2, B=1, n=2]
    valid = torch.tensor([[[True, False]], [[True, True]]])
    out = scaler(r, valid, torch.zeros(2, 1, dtype=torch.bool))
    returns = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)  # 1, 1 - 1, 0 + 0; the 5 is skipped
    scale = float(1.0 / (returns.var(unbiased=False) + 1e-8).sqrt())
    torch.testing.assert_close(out, (r * scale).clamp(-1.5, 1.5))
    assert out.abs().max() == 1.5


def test_return_scaler_state_round_trips():
    from embodied.rl.learner import ReturnScaler

    a, b = ReturnScaler(0.9), ReturnScaler(0.9)
    r, valid, done = torch.randn(4, 3, 1), torch.ones(4, 3, 1, dtype=torch.bool), torch.zeros(4, 3, dtype=torch.bool)
    a(r, valid, done)
    b.load_state_dict(a.state_dict())
    r2 = torch.randn(4, 3, 1)
    torch.testing.assert_close(a(r2, valid, done), b(r2, valid, done))
