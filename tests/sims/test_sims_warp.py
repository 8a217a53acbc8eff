"""The MuJoCo Warp backend (env.backend=warp, sims/mujoco/warp_env.py) on warp's CPU device: the
VecEnv contract, and equality with the C backend on the same task files.

Tolerances, measured at 64 seeds per task (docs/results/warp_backend.md, "Equal to the C backend"):
- initial states: equal seeds give the same privileged observation to float32 rounding (1.5e-8);
- the scripted expert's success rate: equal on every task (1.0 on both) except PushCube, 0.98 on
  warp against 1.0 (one env of 64); the test allows 0.1;
- states along an expert rollout: the TCP agrees to 5e-8 m on the contact-free tasks all along
  (the test allows 1e-5 m); with contacts the two solvers part (MuJoCo Warp is float32 and
  collides boxes in its own way): median 3e-8 m, 95th percentile at most 3.7 cm (PushCube; the
  test allows 8 cm);
- frames at 64 px: mean absolute difference 0.51-0.54 of 255 from the front camera, 2.2-3.3 from
  the wrist camera (ray tracer against OpenGL shading); at most 0.15% of pixels differ by more
  than 32 in any channel (the test allows 2, 6 and 0.5%).

All of it runs in this one module, on one xdist worker. Warp's kernels come from the venv's kernel
cache (`<venv>/warp-cache`), which `make setup` fills (python -m sims.mujoco.warp_warmup).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco_warp", reason="mujoco-warp is not installed (make setup installs it)")

from sims.registry import expert_for, list_tasks, make_env  # noqa: E402
from sims.vecenv import EnvError  # noqa: E402
import test_sims_contract as contract  # noqa: E402

TASKS = list_tasks()
N, SEED = 64, 1000
CONTACT_FREE = ("Reach", "ReachPoint", "ReachColor")


def _pair(task: str, n: int, **kw):
    return {b: make_env(task, n, backend=b, **kw) for b in ("cpu", "warp")}


@pytest.mark.parametrize("task", TASKS)
def test_same_seeds_same_initial_states_and_frames(task):
    envs = _pair(task, N, obs_mode="rgb", cameras=("front", "wrist"), image_size=64)
    obs = {b: e.reset(seed=SEED)[0] for b, e in envs.items()}
    assert obs["warp"]["instruction"] == obs["cpu"]["instruction"]
    assert envs["warp"].task_labels() == envs["cpu"].task_labels()
    torch.testing.assert_close(obs["warp"]["privileged"], obs["cpu"]["privileged"], atol=1e-6, rtol=0)
    for cam, mean_tol in (("front", 2.0), ("wrist", 6.0)):
        w, c = obs["warp"][f"rgb_{cam}"], obs["cpu"][f"rgb_{cam}"]
        assert w.shape == c.shape == (N, 64, 64, 3) and w.dtype == torch.uint8
        diff = (w.float() - c.float()).abs()
        assert diff.mean() < mean_tol, (cam, float(diff.mean()))
        assert (diff.max(-1).values > 32).float().mean() < 0.005, cam
    for e in envs.values():
        e.close()


# PushCube (contacts) and Compose (four verbs) in the suite; the other tasks in `make bench-scale`
ALIKE_IN_SUITE = ("PushCube", "Compose")


@pytest.mark.parametrize("task", [t if t in ALIKE_IN_SUITE else pytest.param(t, marks=pytest.mark.scale)
                                  for t in TASKS])
def test_expert_succeeds_alike_and_states_agree(task):
    """The expert closed-loop on each backend from the same 64 seeds, to the end of each env's
    first episode: success rates within 0.1, TCP paths within the measured tolerances."""
    envs = _pair(task, N)
    obs = {b: e.reset(seed=SEED)[0] for b, e in envs.items()}
    expert = expert_for(task)
    alive = {b: np.ones(N, bool) for b in envs}
    success = {b: np.zeros(N, bool) for b in envs}
    deviation = []
    for _ in range(envs["cpu"].spec.max_episode_steps):
        res = {}
        for b, e in envs.items():
            res[b] = e.step(torch.from_numpy(expert(obs[b]["privileged"].numpy())))
            success[b] |= res[b].info["success"].numpy() & alive[b]
        both = alive["cpu"] & alive["warp"]
        last = {b: (r.final_obs or r.obs)["privileged"][:, :3] for b, r in res.items()}
        deviation.append((last["warp"] - last["cpu"]).norm(dim=1).numpy()[both])
        for b in envs:
            alive[b] &= ~(res[b].terminated | res[b].truncated).numpy()
            obs[b] = res[b].obs
    dev = np.concatenate(deviation)
    assert abs(success["warp"].mean() - success["cpu"].mean()) <= 0.1, success
    assert success["cpu"].mean() > 0.9
    if task in CONTACT_FREE:
        assert dev.max() < 1e-5, dev.max()
    else:
        assert np.median(dev) < 1e-4 and np.percentile(dev, 95) < 0.08, (np.median(dev), np.percentile(dev, 95))
    for e in envs.values():
        e.close()


# The contract tests of tests/sims/test_sims_contract.py with the warp backend.
CONTRACT = ["state_obs_shapes", "rgb_obs", "truncation_and_auto_reset", "success_terminates_and_final_obs",
            "seeding", "determinism", "chunk_step", "chunk_equals_steps", "state_dict_round_trip", "reward_modes"]


@pytest.mark.parametrize("task", ["PushCube", "Compose"])
@pytest.mark.parametrize("check", CONTRACT)
def test_contract(task, check, monkeypatch, tmp_path):
    make = contract.make_env
    monkeypatch.setattr(contract, "make_env", lambda t, n, **kw: make(t, n, backend="warp", **kw))
    fn = getattr(contract, f"test_{check}")
    fn(task, tmp_path) if check == "state_dict_round_trip" else fn(task)


def test_bad_input_and_refusals():
    env = make_env("PushCube", 2, backend="warp")
    with pytest.raises(EnvError, match="action"):
        env.step(torch.full((2, 4), float("nan")))
    with pytest.raises(EnvError, match="action"):
        env.step(torch.zeros(3, 4))
    state = make_env("PushCube", 2).state_dict()  # the C backend's
    with pytest.raises(EnvError, match="backend"):
        env.load_state_dict(state)
    with pytest.raises(EnvError, match="env.backend"):
        make_env("PushCube", 2, backend="gpu")
    with pytest.raises(EnvError, match="env.backend: warp"):
        make_env("ms:PushCube-v1", 2, backend="warp")
    env.close()


def test_observations_are_views_of_warp_memory():
    """qpos, qvel, ctrl and mocap_pos are torch views of MuJoCo Warp's arrays, not copies: a write
    through the view is what the next physics step starts from."""
    env = make_env("Reach", 2, backend="warp")
    env.reset(seed=0)
    q = env._qpos
    assert q.data_ptr() == env.wp.to_torch(env._d.qpos).data_ptr()
    env._qpos[0, 2] = 0.2  # lift env 0's gripper by hand
    obs = env.step(torch.zeros(2, 4)).obs
    assert abs(float(obs["state"][0, 2]) - 0.2) < 0.01
    env.close()


TRAIN = ["train.eval_every=0", "train.eval_episodes=8", "train.video_episodes=0", "train.progress=false",
         "train.torch_threads=1", "train.save_every=1"]


@pytest.mark.slow
def test_ppo_trains_on_warp_and_its_checkpoint_runs_on_either_backend(tmp_path, capsys):
    """PPO from state on PushCube with env.backend=warp end to end; the checkpoint evaluates on the
    C backend (env.backend=cpu) and on warp, and resumes on warp."""
    import json

    from embodied.cli import main
    from embodied.config import load_config
    from embodied.rl.train import train

    run = tmp_path / "ppo"
    cfg = load_config(None, ["env.task=PushCube", "env.backend=warp", "env.num_envs=32", "ppo.rollout_steps=16",
                             "ppo.minibatches=2", "ppo.epochs=2", "policy.hidden_sizes=[64,64]",
                             "train.total_steps=1024", f"train.run_dir={run}", *TRAIN])
    train(cfg)
    capsys.readouterr()
    for backend in ("cpu", "warp"):
        assert main(["eval", str(run), "--episodes", "8", f"env.backend={backend}"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["task"] == "PushCube" and report["episodes"] == 8.0
    assert main(["train", "--resume", str(run), "train.total_steps=1536"]) == 0
    assert (run / "checkpoints" / "latest").read_text().strip() == "iter_000003"


@pytest.mark.slow
def test_flow_vla_grpo_from_pixels_on_warp(tmp_path):
    """GRPO for a tiny flow VLA from 64 px frames of the front and wrist cameras on ReachPoint with
    env.backend=warp: rollout (frames ray-traced by MuJoCo Warp), group advantages, update."""
    from embodied.config import load_config
    from embodied.rl.train import train
    from policies.vla.config import FlowVLAConfig
    from policies.vla.flow import FlowVLA

    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 64, "patch_size": 16}
    FlowVLA(FlowVLAConfig(vision=vision, action_dim=4, state_dim=9, chunk_size=4, num_steps=3,
                          noise_method="flow_noise")).save_pretrained(tmp_path / "vla")
    cfg = load_config(None, ["env.task=ReachPoint", "env.backend=warp", "env.num_envs=16", "env.obs_mode=rgb",
                             "env.image_size=64", "env.cameras=[front,wrist]", "policy.name=flow_vla",
                             f"policy.init_from={tmp_path / 'vla'}", "train.algorithm=grpo", "grpo.group_size=8",
                             "grpo.filter_groups=false", "ppo.epochs=1", "ppo.minibatches=1",
                             "train.total_steps=384", f"train.run_dir={tmp_path / 'grpo'}", *TRAIN])
    summary = train(cfg)
    assert summary["env_steps"] >= 384 and (tmp_path / "grpo" / "checkpoints" / "latest").exists()


# Domain randomisation on warp: the C backend's tests of each knob's effect, with the warp backend.
DR_CHECKS = ["nominal_block_is_bit_identical_to_no_randomisation", "friction_changes_the_push_distance",
             "latency_shifts_the_response_by_exactly_k_steps",
             "action_and_obs_noise_have_the_configured_std", "state_dict_round_trip_with_randomisation",
             "chunk_step_applies_latency_as_single_steps_do"]


@pytest.mark.parametrize("check", DR_CHECKS)
def test_randomisation(check, monkeypatch):
    import inspect

    import test_sims_randomization as dr

    make = dr.make_env
    monkeypatch.setattr(dr, "make_env", lambda t, n, **kw: make(t, n, backend="warp", **kw))
    fn = getattr(dr, f"test_{check}")
    fn(*([1] if "k" in inspect.signature(fn).parameters else []))


@pytest.fixture
def warp_dr(monkeypatch):
    """tests/sims/test_sims_randomization.py with its envs on the warp backend."""
    import test_sims_randomization as dr

    make = dr.make_env
    monkeypatch.setattr(dr, "make_env", lambda t, n, **kw: make(t, n, backend="warp", **kw))
    return dr


def test_same_seed_same_draws_and_episodes_on_warp(warp_dr):
    dr = warp_dr
    block = {"friction": [0.5, 1.5], "latency_steps": [0, 2], "action_noise": [0.0, 0.1], "obs_noise": [0.0, 0.01],
             "object_color": [-0.2, 0.2]}
    a, b = dr.env(rgb=True, randomization=block), dr.env(rgb=True, randomization=block)
    dr.assert_same(dr.rollout(a, 6), dr.rollout(b, 6))
    p = a._dr.params["friction"].copy()
    a.reset(seed=[12, 11, 13, 14])
    np.testing.assert_array_equal(a._dr.params["friction"], p[[1, 0, 2, 3]])


def test_mass_and_servo_gain_act_through_the_device_model(warp_dr):
    dr = warp_dr
    ok, _ = dr._lift(None)
    heavy, top = dr._lift(50.0)  # 2.5 kg: the fingers' 12 N squeeze cannot hold it
    assert ok.all() and not heavy.any() and top.max() < 0.04
    e = dr.env(randomization=dr.fixed(mass=50.0))
    body, f = int(e.model.geom_bodyid[e._h.cube_geom]), e._dr.fields
    np.testing.assert_allclose(f["body_mass"][:, body].numpy(), 50 * e.model.body_mass[body], rtol=1e-6)
    np.testing.assert_allclose(f["body_subtreemass"][:, body].numpy(), 50 * e.model.body_subtreemass[body],
                               rtol=1e-5)  # derived constants follow (set_const on the device)
    e = dr.env(randomization=dr.fixed(actuator_gain=0.25))
    kp, kv = e._dr.fields["actuator_gainprm"][:, :, 0].numpy(), -e._dr.fields["actuator_biasprm"][:, :, 2].numpy()
    np.testing.assert_allclose(kp, np.tile(0.25 * e.model.actuator_gainprm[:, 0], (dr.N, 1)), rtol=1e-6)
    np.testing.assert_allclose(kv, np.tile(0.5 * -e.model.actuator_biasprm[:, 2], (dr.N, 1)), rtol=1e-6)


def test_randomisation_draws_equal_the_c_backends_and_colours_match():
    block = {"friction": [0.5, 1.5], "mass": [0.5, 2.0], "latency_steps": [0, 2], "object_color": [-0.2, 0.2],
             "table_color": [-0.1, 0.1]}
    envs = _pair("PushCube", 8, randomization=block, obs_mode="rgb")
    obs = {b: e.reset(seed=5)[0] for b, e in envs.items()}
    for knob in block:
        np.testing.assert_array_equal(envs["warp"]._dr.params[knob], envs["cpu"]._dr.params[knob])
    assert (obs["warp"]["rgb_front"].float() - obs["cpu"]["rgb_front"].float()).abs().mean() < 2.0
    with pytest.raises(EnvError, match="camera_fovy not yet on the warp backend"):
        make_env("PushCube", 2, backend="warp", randomization={"camera_fovy": [-5, 5]})
