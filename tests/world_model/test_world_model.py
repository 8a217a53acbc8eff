"""The world model (sims/world_model): the VecEnv contract suite on `wm:PATH`, a small model
trained here on 30 PushCube expert episodes beating copy-last, uncertainty truncation on
out-of-distribution actions, bit-identical save/load, and one-line errors."""

from __future__ import annotations

import json
import shutil

import pytest
import test_sims_contract as contract
import torch

from sims.registry import expert_for, make_env
from sims.vecenv import EnvError
from sims.world_model.checkpoint import load_world_model, save_world_model
from sims.world_model.env import WorldModelVecEnv
from embodied.world_model.quality import kstep_errors, report
from sims.world_model.model import WorldModelConfig
from embodied.world_model.train import heldout_episodes, train_world_model

SMALL = dict(hidden=64, latent=32, horizon_k=4, epochs=30, patience=5, batch_size=128)


@pytest.fixture(scope="module")
def trained(build_once):
    """(checkpoint, the contract checkpoint without uncertainty truncation, dataset)."""
    from embodied.data.collect import collect_demos

    data = build_once("wm_pushcube_30", lambda p: collect_demos("PushCube", 30, p, seed=0))

    def build(path):
        torch.manual_seed(0)
        model, resets, _ = train_world_model(WorldModelConfig(task="PushCube", dataset=str(data), **SMALL),
                                             log=lambda *a: None)
        save_world_model(path / "wm", model, resets)
        shutil.copytree(path / "wm", path / "wm_contract")
        meta = json.loads((path / "wm_contract" / "config.json").read_text())
        meta["config"]["disagreement_threshold"] = float("inf")
        meta["config"]["member_disagreement_threshold"] = float("inf")
        (path / "wm_contract" / "config.json").write_text(json.dumps(meta))

    root = build_once("wm_pushcube_model", build)
    return root / "wm", root / "wm_contract", data


@pytest.fixture
def task(trained):
    return f"wm:{trained[1]}"


# The contract suite of tests/sims/test_sims_contract.py, run on the world model.
def test_contract_state_obs_shapes(task):
    contract.test_state_obs_shapes(task)


def test_contract_truncation_and_auto_reset(task):
    contract.test_truncation_and_auto_reset(task)


def test_contract_seeding(task):
    contract.test_seeding(task)


def test_contract_determinism(task):
    contract.test_determinism(task)


def test_contract_chunk_step(task):
    contract.test_chunk_step(task)


def test_contract_chunk_equals_steps(task):
    contract.test_chunk_equals_steps(task)


def test_contract_state_dict_round_trip(task, tmp_path):
    contract.test_state_dict_round_trip(task, tmp_path)


@pytest.mark.parametrize("check", ["state_obs_shapes", "seeding", "determinism", "chunk_step", "chunk_equals_steps",
                                   "state_dict_round_trip"])
def test_contract_members_rollout(task, check, monkeypatch, tmp_path):
    """The contract suite with every member on its own latent (rollout "members"). Truncation and
    auto-reset are checked by the next test: the suite's bound on the gripper's drift under a
    held action (1 cm a step) holds for the members' mean, not for each of this tiny model's
    members."""
    make = contract.make_env
    monkeypatch.setattr(contract, "make_env", lambda t, n, **kw: make(t, n, rollout="members", **kw))
    fn = getattr(contract, f"test_{check}")
    fn(task, tmp_path) if check == "state_dict_round_trip" else fn(task)


def test_members_rollout_follows_one_member(trained):
    """Row i serves member i mod M, rolled on its own latent from the start as in training; the
    disagreement is the spread of all members' own latents; an auto-reset restarts every member
    of the row from the new frame."""
    model, _ = load_world_model(trained[0])
    M, N = model.cfg.members, 2 * model.cfg.members
    env = WorldModelVecEnv(str(trained[0]), N, rollout="members", max_episode_steps=4)
    obs, _ = env.reset(seed=3)
    encode = lambda x: model.encode(model.normalize(x))  # noqa: E731
    zm = encode(obs["privileged"]).expand(M, -1, -1).clone()
    acts = torch.rand(9, N, 4, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        for t, a in enumerate(acts):
            res = env.step(a)
            zm = model.step_members(zm, a)
            torch.testing.assert_close(res.info["disagreement"], model.disagreement(zm))
            x = model.denormalize(model.decode(zm))  # [M, N, P]
            own = x[torch.arange(N) % M, torch.arange(N)]
            assert torch.equal(res.truncated, torch.full((N,), t % 4 == 3) & ~res.terminated)
            ended = res.done
            if ended.any():
                torch.testing.assert_close(res.final_obs["privileged"][ended], own[ended])
                zm[:, ended] = encode(res.obs["privileged"][ended])
            torch.testing.assert_close(res.obs["privileged"][~ended], own[~ended])
    assert 0 < env.cfg.member_disagreement_threshold < float("inf")


def test_beats_copy_last(trained):
    model, _ = load_world_model(trained[0], task="PushCube")
    held = heldout_episodes(model.cfg)
    err = kstep_errors(model, held, 4)
    assert err["starts"] > 20 and err["model"] < 0.9 * err["copy_last"], err
    rep = report(model, held, ks=(1, 4))
    assert rep["success_head"]["auroc"] > 0.8 and rep["success_head"]["fpr"] < 0.2, rep


def test_reset_from_dataset_frames(trained):
    env = make_env(f"wm:{trained[0]}", 4)
    _, resets = load_world_model(trained[0])
    obs, _ = env.reset(seed=[0, 1, 2, 3])
    for row in obs["privileged"]:
        assert (resets["x"] == row).all(dim=1).any()  # a real initial frame
    assert set(obs["instruction"]) <= set(resets["instruction"])


def test_reset_to_given_states(trained):
    """reset_to starts rows from given privileged vectors (the simulator's starts in the ranking
    benchmark), with the episode clock at 0; the other rows keep their episodes."""
    env = make_env(f"wm:{trained[0]}", 3)
    sim = make_env("PushCube", 2)
    x = sim.reset(seed=[5, 6])[0]["privileged"]
    sim.close()
    env.reset(seed=0)
    env.step(torch.zeros(3, 4))
    kept = env.state_dict()
    obs, _ = env.reset_to(x, env_ids=torch.tensor([0, 2]))
    torch.testing.assert_close(obs["privileged"][[0, 2]], x)
    assert env.state_dict()["elapsed"].tolist() == [0, kept["elapsed"][1], 0]
    torch.testing.assert_close(obs["privileged"][1], torch.as_tensor(kept["privileged"][1]))
    with pytest.raises(EnvError, match="privileged"):
        env.reset_to(torch.zeros(3, 5))


def test_sparse_reward_mode(trained):
    """reward_mode sparse: 1 when the success head fires, minus the disagreement penalty."""
    envs = [make_env(f"wm:{trained[0]}", 16, reward_mode=m) for m in ("sparse", "dense")]
    obs = [e.reset(seed=0)[0] for e in envs]
    expert = expert_for("PushCube")
    for _ in range(10):
        act = torch.from_numpy(expert(obs[0]["privileged"].numpy()))
        r, d = (e.step(act) for e in envs)
        penalty = envs[0].cfg.uncertainty_lambda * r.info["disagreement"]
        torch.testing.assert_close(r.reward, r.info["success"].float() - penalty)
        torch.testing.assert_close(r.obs["privileged"], d.obs["privileged"])  # the same dynamics
        assert not torch.allclose(r.reward, d.reward)
        obs = [r.obs, d.obs]
    with pytest.raises(EnvError, match="reward_mode.*dense.*sparse"):
        make_env(f"wm:{trained[0]}", 2, reward_mode="staged")


def test_task_reward_mode(trained, tmp_path):
    """reward_mode task: the task's progress difference plus success on the decoded states,
    terminated on the decoded state's success; the dynamics are the same as with the heads."""
    from sims.world_model.task_terms import push_cube

    envs = [make_env(f"wm:{trained[1]}", 16, reward_mode=m) for m in ("task", "dense")]
    obs = [e.reset(seed=0)[0] for e in envs]
    expert = expert_for("PushCube")
    for _ in range(10):
        x0 = obs[0]["privileged"].numpy()
        r, d = (e.step(torch.from_numpy(expert(x0))) for e in envs)
        live = ~(r.done | d.done)
        x1 = r.obs["privileged"].numpy()
        p0, p1, succ = push_cube(x0)[0], *push_cube(x1)[:2]
        penalty = envs[0].cfg.uncertainty_lambda * r.info["disagreement"]
        want = torch.from_numpy((p1 - p0 + succ).astype("float32")) - penalty
        torch.testing.assert_close(r.reward[live], want[live])
        torch.testing.assert_close(r.obs["privileged"][live], d.obs["privileged"][live])
        obs = [r.obs, d.obs]
    other = tmp_path / "other"
    shutil.copytree(trained[1], other)
    meta = json.loads((other / "config.json").read_text())
    meta["config"]["task"] = "Reach"
    (other / "config.json").write_text(json.dumps(meta))
    with pytest.raises(EnvError, match="task terms exist for PushCube, not Reach"):
        make_env(f"wm:{other}", 2, reward_mode="task")


@pytest.mark.parametrize("rollout", ["mean", "members"])
def test_uncertainty_truncation_on_out_of_distribution_actions(trained, rollout):
    """Driving the gripper straight up (the experts never go above 7 cm) leaves the data:
    the ensemble disagrees and the episodes are truncated sooner than under the expert."""
    first = {}
    for name in ("expert", "up"):
        env = make_env(f"wm:{trained[0]}", 16, rollout=rollout)
        obs, _ = env.reset(seed=0)
        expert = expert_for("PushCube")
        stop = torch.full((16,), 99)
        for t in range(30):
            act = (torch.from_numpy(expert(obs["privileged"].numpy())) if name == "expert"
                   else torch.tensor([[0.0, 0.0, 1.0, 1.0]]).expand(16, 4))
            r = env.step(act)
            fresh = (stop == 99) & r.done
            assert torch.equal(r.info["uncertain"], r.truncated & (r.info["disagreement"] >
                                                                  env.uncertainty_threshold))
            stop[fresh & r.info["uncertain"]] = t
            stop[fresh & ~r.info["uncertain"]] = 100 + t  # ended otherwise
            obs = r.obs
        first[name] = stop
    assert (first["up"] < 99).float().mean() >= 0.75, first
    assert first["up"].float().median() < first["expert"].clamp(max=99).float().median(), first


def test_save_load_bit_identical(trained, tmp_path):
    model, resets = load_world_model(trained[0])
    save_world_model(tmp_path / "again", model, resets)
    model2, resets2 = load_world_model(tmp_path / "again")
    for (k, v), (k2, v2) in zip(model.state_dict().items(), model2.state_dict().items()):
        assert k == k2 and torch.equal(v, v2), k
    assert torch.equal(resets["x"], resets2["x"]) and resets["instruction"] == resets2["instruction"]
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (trained[0] / "model.safetensors").read_bytes()
    envs = [make_env(f"wm:{p}", 3) for p in (trained[0], tmp_path / "again")]
    acts = torch.rand(5, 3, 4) * 2 - 1
    obs = [e.reset(seed=4)[0] for e in envs]
    for a in acts:
        ra, rb = (e.step(a) for e in envs)
        contract._assert_obs_equal(ra.obs, rb.obs)
        assert torch.equal(ra.reward, rb.reward)
    assert obs


def _one_line(fn, *words):
    with pytest.raises(EnvError) as err:
        fn()
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_bad_input(trained, tmp_path):
    from embodied.data.dataset import EpisodeWriter

    path, _, data = trained
    _one_line(lambda: make_env(f"wm:{path}", 2, obs_mode="rgb"), "obs_mode", "state")
    _one_line(lambda: make_env(f"wm:{path}", 2, expected_task="Reach"), "PushCube", "Reach")
    _one_line(lambda: make_env(f"wm:{tmp_path}", 2), "config.json")
    cfg = dict(task="PushCube", **SMALL)
    _one_line(lambda: train_world_model(WorldModelConfig(dataset=str(tmp_path), **cfg)), "dataset", "info.json")
    _one_line(lambda: train_world_model(WorldModelConfig(dataset="", **cfg)), "dataset")
    _one_line(lambda: train_world_model(WorldModelConfig(dataset=str(data), **{**cfg, "members": 3})), "members")
    _one_line(lambda: train_world_model(WorldModelConfig(dataset=str(data), **{**cfg, "task": "Reach"})),
              "PushCube", "Reach")
    no_reward = tmp_path / "no_reward"  # a dataset without the reward column
    writer = EpisodeWriter(no_reward, "PushCube", {"control_hz": 20.0, "max_episode_steps": 50})
    for seed in range(2):
        writer.add({"obs.privileged": torch.zeros(5, 32), "action": torch.zeros(5, 4),
                    "success": torch.zeros(5, dtype=torch.bool)}, "push", seed)
    _one_line(lambda: train_world_model(WorldModelConfig(dataset=str(no_reward), **cfg)), "next.reward")
    _one_line(lambda: make_env(f"wm:{path}", 2, rollout="particles"), "rollout", "members")
    old = tmp_path / "old"  # a checkpoint written before the members rollout's threshold existed
    shutil.copytree(path, old)
    meta = json.loads((old / "config.json").read_text())
    del meta["config"]["member_disagreement_threshold"]
    (old / "config.json").write_text(json.dumps(meta))
    _one_line(lambda: make_env(f"wm:{old}", 2, rollout="members"), "rollout", "mean")
    env = make_env(f"wm:{path}", 2)
    _one_line(lambda: env.step(torch.zeros(2, 3)), "action", "shape")
    _one_line(lambda: env.reset(seed=[1, 2, 3]), "seed")
    _one_line(lambda: env.reset(env_ids=torch.tensor([0, 2])), "env_ids")


def test_cli_train_and_eval(trained, tmp_path, capsys):
    from embodied.cli import main

    out = tmp_path / "cli"
    assert main(["world-model", "train", "world_model/pushcube", f"dataset={trained[2]}", "hidden=32",
                 "latent=16", "horizon_k=2", "epochs=2", "--out", str(out)]) == 0
    assert (out / "config.json").is_file() and (out / "report.json").is_file()
    capsys.readouterr()
    assert main(["world-model", "eval", str(out), "--ks", "1,4,200"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["task"] == "PushCube" and rep["kstep"]["4"]["starts"] > 0
    assert rep["kstep"]["200"]["model"] is None  # no episode is that long
    assert main(["world-model", "train", "world_model/pushcube", "bogus=1"]) == 2
    assert "world_model.bogus" in capsys.readouterr().err


def test_keyframe_resets(trained, tmp_path):
    """keyframe_every > 0: resets also start mid-trajectory, with the episode clock at the
    keyframe's index (so fewer steps remain before the horizon)."""
    cfg = WorldModelConfig(task="PushCube", dataset=str(trained[2]), keyframe_every=4,
                           **{**SMALL, "epochs": 1})
    model, resets, _ = train_world_model(cfg, log=lambda *a: None)
    save_world_model(tmp_path / "kf", model, resets)
    meta = json.loads((tmp_path / "kf" / "config.json").read_text())
    meta["config"]["disagreement_threshold"] = float("inf")
    (tmp_path / "kf" / "config.json").write_text(json.dumps(meta))
    assert (resets["t"] > 0).any() and (resets["t"] % 4 == 0).all()
    env = make_env(f"wm:{tmp_path / 'kf'}", 64, max_episode_steps=10)
    env.reset(seed=0)
    start = torch.from_numpy(env._elapsed.copy())  # the reset frames' indices
    assert (start > 0).any() and (start == 0).any()
    end = torch.full((64,), -1)
    for t in range(10):
        r = env.step(torch.zeros(64, 4))
        end[(end < 0) & r.truncated] = t + 1
        end[(end < 0) & r.terminated] = 0  # ended by a head: not a horizon check
    by_horizon = end > 0
    assert (by_horizon & (start > 0)).any()
    assert torch.equal(end[by_horizon], (10 - start[by_horizon]).clamp(min=1))
    first_only = make_env(f"wm:{tmp_path / 'kf'}", 8, keyframes=False)
    assert (first_only.reset(seed=0)[0]["privileged"][:, None] == resets["x"][resets["t"] == 0]).all(-1).any(1).all()


def test_member_heads_on_fixed_dynamics(trained, tmp_path):
    """heads_only: new heads (one per member, scoring the decoded state, no action) train on a
    trained model's fixed dynamics; the env combines their success by mean or minimum."""
    base, _ = load_world_model(trained[0])
    cfg = WorldModelConfig(task="PushCube", dataset=str(trained[2]), init_from=str(trained[0]), heads_only=True,
                           head_input="state", member_heads=True, **{**SMALL, "epochs": 2})
    model, resets, summary = train_world_model(cfg, log=lambda *a: None)
    assert summary["heldout_metric"] == "heads_loss"
    new = model.state_dict()
    for k, v in base.state_dict().items():
        if not k.startswith("heads."):
            assert torch.equal(v, new[k]), k  # the dynamics did not move
    assert sum(k.startswith("heads.4.") for k in new) == 6  # five members' heads, 3 layers each
    save_world_model(tmp_path / "mh", model, resets)
    rep = report(model, heldout_episodes(model.cfg), ks=(1,))
    assert rep["success_head_min"]["steps"] == rep["success_head"]["steps"] > 0
    envs = [WorldModelVecEnv(str(tmp_path / "mh"), 8, success_aggregate=agg) for agg in ("mean", "min")]
    for e in envs:
        e.reset(seed=3)
    act = torch.rand(8, 4) * 2 - 1
    mean, low = (e.step(act) for e in envs)
    assert (low.info["success_p"] <= mean.info["success_p"] + 1e-6).all()
    live = ~(low.done | mean.done)  # a row that ended in one env was reset there
    assert live.any()
    torch.testing.assert_close(low.obs["privileged"][live], mean.obs["privileged"][live])  # the same dynamics
    _one_line(lambda: WorldModelVecEnv(str(trained[0]), 2, success_aggregate="min"), "success_aggregate", "mean")
    bad = dict(task="PushCube", dataset=str(trained[2]), **SMALL)
    _one_line(lambda: train_world_model(WorldModelConfig(head_input="pixels", **bad)), "head_input", "latent")
    _one_line(lambda: train_world_model(WorldModelConfig(heads_only=True, **bad)), "heads_only", "init_from")
