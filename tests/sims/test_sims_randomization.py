"""Domain randomisation and reality presets of the MuJoCo suite: each knob changes what it should
and nothing else, draws are seeded, bad blocks are one-line errors."""

import numpy as np
import pytest
import torch

from embodied.config import ConfigError, config_from_dict
from sims.mujoco.randomization import KNOBS, load_preset, preset_names
from sims.mujoco.tasks.base import CUBE_LAYOUT
from sims.registry import expert_for, make_env
from sims.vecenv import EnvError

N = 4


def env(task="PushCube", n=N, rgb=False, **kw):
    extra = dict(obs_mode="rgb", image_size=32) if rgb else {}
    return make_env(task, n, num_threads=1, seed=0, **extra, **kw)


def fixed(**values):
    """A randomisation block with low == high for each knob."""
    return {k: [v, v] for k, v in values.items()}


def rollout(e, steps=8, seed=11, actions=None):
    """Observations (numpy, per step incl. the reset) of e under fixed random actions."""
    rng = np.random.default_rng(0)
    o, _ = e.reset(seed=seed)
    out = [{k: v.numpy().copy() for k, v in o.items() if k != "instruction"}]
    for t in range(steps):
        a = rng.uniform(-1, 1, (e.num_envs, 4)) if actions is None else actions[t]
        r = e.step(torch.tensor(a, dtype=torch.float32))
        out.append({k: v.numpy().copy() for k, v in r.obs.items() if k != "instruction"}
                   | {"reward": r.reward.numpy().copy()})
    return out


def assert_same(a, b, keys=None):
    for x, y in zip(a, b):
        for k in [k for k in keys or x if k in x]:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def test_nominal_block_is_bit_identical_to_no_randomisation():
    nominal = {k: ([[KNOBS[k].nominal] * 3] * 2 if KNOBS[k].shape else [KNOBS[k].nominal] * 2)
               for k in KNOBS}
    ref = rollout(env(rgb=True, max_episode_steps=5))  # auto-resets inside the rollout
    got = rollout(env(rgb=True, max_episode_steps=5, randomization=nominal))
    assert_same(ref, got)


def test_same_seed_same_draws_and_episodes():
    block = {"friction": [0.5, 1.5], "latency_steps": [0, 2], "action_noise": [0.0, 0.1],
             "obs_noise": [0.0, 0.01], "camera_pos": [-0.02, 0.02], "light_warmth": [-0.3, 0.3]}
    a, b = env(rgb=True, randomization=block), env(rgb=True, randomization=block)
    assert_same(rollout(a, 6), rollout(b, 6))
    for k in a._dr.params:
        np.testing.assert_array_equal(a._dr.params[k], b._dr.params[k])
    p = a._dr.params["friction"].copy()
    a.reset(seed=[11, 12, 13, 14])
    np.testing.assert_array_equal(a._dr.params["friction"], p)  # a seed's draw, wherever it is
    a.reset(seed=[12, 11, 13, 14])
    np.testing.assert_array_equal(a._dr.params["friction"], p[[1, 0, 2, 3]])
    a.reset(seed=50)
    assert not np.array_equal(a._dr.params["friction"], p)


def test_render_knobs_change_images_only():
    ref = rollout(env(rgb=True), steps=3)
    cases = {
        "dark": fixed(light_intensity=0.4), "bright": fixed(light_intensity=1.6),
        "warm": fixed(light_warmth=0.5), "tilt": fixed(light_tilt=60.0, light_azimuth=45.0),
        "table": {"table_color": [[0.3, -0.3, -0.3], [0.3, -0.3, -0.3]]},
        "object": fixed(object_color=0.3), "move": fixed(camera_pos=0.03),
        "turn": {"camera_rot": [[0, 5, 0], [0, 5, 0]]}, "fov": fixed(camera_fovy=15.0),
    }
    img = {}
    for name, block in cases.items():
        got = rollout(env(rgb=True, randomization=block), steps=3)
        assert_same(ref, got, ["state", "privileged", "reward"])  # physics untouched
        img[name] = np.stack([o["rgb_front"] for o in got]).astype(float)
    base = np.stack([o["rgb_front"] for o in ref]).astype(float)
    mean = base.mean()
    assert img["dark"].mean() < mean - 20 and img["bright"].mean() > mean + 20
    red_blue = lambda x: x[..., 0].mean() - x[..., 2].mean()  # noqa: E731
    assert red_blue(img["warm"]) > red_blue(base) + 10
    assert img["tilt"].mean() < mean - 3  # the top light hits the table at 60 degrees
    assert red_blue(img["table"]) > red_blue(base) + 30
    changed = (np.abs(img["object"] - base).max(-1) > 0).mean()
    assert 0.002 < changed < 0.1  # only the cube and the target square's pixels
    for name in ("move", "turn", "fov"):
        assert np.abs(img[name] - base).mean() > 5, name


def test_camera_knobs_apply_to_the_wrist_camera_too():
    e0 = make_env("Reach", 2, num_threads=1, obs_mode="rgb", image_size=32, cameras=("wrist",))
    e1 = make_env("Reach", 2, num_threads=1, obs_mode="rgb", image_size=32, cameras=("wrist",),
                  randomization=fixed(camera_fovy=-20.0))
    a = e0.reset(seed=1)[0]["rgb_wrist"].float()
    b = e1.reset(seed=1)[0]["rgb_wrist"].float()
    assert (a - b).abs().mean() > 3


def _push(friction):
    """Cube travel in x (m) [2] after a fast push and release, open loop after the approach."""
    e = env(n=2, randomization=None if friction is None else fixed(friction=friction))
    o, _ = e.reset(seed=3)
    cube = CUBE_LAYOUT["cube"]
    cube0 = o["privileged"][:, cube].double().numpy()

    def to(goal):
        a = np.zeros((2, 4))
        a[:, :3] = np.clip((goal - o["privileged"][:, :3].double().numpy()) / 0.02, -1, 1)
        a[:, 3] = 1.0
        return torch.tensor(a, dtype=torch.float32)

    for z, k in ((0.08, 12), (0.02, 6)):  # behind the cube, above it, then down
        goal = cube0 + [-0.05, 0.0, 0.0]
        goal[:, 2] = z
        for _ in range(k):
            o = e.step(to(goal)).obs
    start = o["privileged"][:, cube].double().numpy()
    for a in [[1, 0, 0, 1]] * 3 + [[-1, 0, 0, 1]] + [[0, 0, 0, 1]] * 10:
        o = e.step(torch.tensor([a] * 2, dtype=torch.float32)).obs
    return o["privileged"][:, cube.start].double().numpy() - start[:, 0]


def test_friction_changes_the_push_distance():
    nominal = _push(None)
    assert nominal.min() > 0.03  # the cube was pushed
    np.testing.assert_array_equal(_push(1.0), nominal)
    assert (_push(0.3) > nominal + 0.01).all()  # slides further on a slippery table
    assert (_push(2.0) < nominal).all()


def _lift(mass):
    e = env("PickCube", n=2, randomization=None if mass is None else fixed(mass=mass))
    expert, o = expert_for("PickCube"), e.reset(seed=0)[0]
    success, top = np.zeros(2, bool), np.zeros(2)
    for _ in range(60):
        r = e.step(torch.as_tensor(expert(o["privileged"].numpy())))
        success |= r.info["success"].numpy()
        top = np.maximum(top, r.obs["privileged"][:, CUBE_LAYOUT["cube"].stop - 1].numpy())
        o = r.obs
    return success, top


def test_mass_decides_whether_the_grasp_holds():
    ok, _ = _lift(None)
    assert ok.all()
    heavy, top = _lift(50.0)  # 2.5 kg: the fingers' 12 N squeeze cannot hold it
    assert not heavy.any() and top.max() < 0.04
    e = env(randomization=fixed(mass=50.0))
    body = int(e.model.geom_bodyid[e._h.cube_geom])
    np.testing.assert_allclose(e._batch.expanded("body_mass")[:, body], 50 * e.model.body_mass[body])
    sub = e._batch.expanded("body_subtreemass")  # derived constants follow (set_const)
    np.testing.assert_allclose(sub[:, body], 50 * e.model.body_subtreemass[body])


def test_actuator_gain_slows_the_servo():
    def moved(gain):
        e = env(n=2, randomization=None if gain is None else fixed(actuator_gain=gain))
        o, _ = e.reset(seed=5)
        r = e.step(torch.tensor([[0, 0, 1, 1]] * 2, dtype=torch.float32))
        return (r.obs["state"][:, 2] - o["state"][:, 2]).numpy()

    assert (moved(0.05) < 0.6 * moved(None)).all() and (moved(None) > 0.015).all()
    e = env(randomization=fixed(actuator_gain=0.25))
    kp = e._batch.expanded("actuator_gainprm")[:, :, 0]
    kv = -e._batch.expanded("actuator_biasprm")[:, :, 2]
    np.testing.assert_allclose(kp, np.tile(0.25 * e.model.actuator_gainprm[:, 0], (N, 1)))
    np.testing.assert_allclose(kv, np.tile(0.5 * -e.model.actuator_biasprm[:, 2], (N, 1)))  # same ratio


@pytest.mark.parametrize("k", [1, 2])
def test_latency_shifts_the_response_by_exactly_k_steps(k):
    rng = np.random.default_rng(1)
    acts = rng.uniform(-1, 1, (10, N, 4))
    acts[:, :, 3] = 1.0
    hold = np.zeros((k, N, 4))
    hold[:, :, 3] = 1.0  # PushCube starts closed: "hold" is no motion, gripper +1
    delayed = rollout(env(randomization=fixed(latency_steps=k)), 10, actions=acts)
    shifted = rollout(env(), 10, actions=np.concatenate([hold, acts])[:10])
    assert_same(delayed, shifted, ["state", "privileged", "reward"])
    undelayed = rollout(env(), 10, actions=acts)
    assert not np.array_equal(delayed[3]["state"], undelayed[3]["state"])


def test_action_and_obs_noise_have_the_configured_std():
    e = env(n=64, randomization=fixed(action_noise=0.2))
    e.reset(seed=0)
    grip = [e.step(torch.zeros(64, 4)).obs["state"][:, 8].numpy() for _ in range(5)]
    grip = np.concatenate(grip)  # the applied gripper command: 0 + noise
    assert abs(grip.std() - 0.2) < 0.02 and abs(grip.mean()) < 0.03
    noisy, clean = env(n=64, randomization=fixed(obs_noise=0.01)), env(n=64)
    acts = np.zeros((5, 64, 4))  # noise does not touch physics: the same states underneath
    got, ref = rollout(noisy, 5, actions=acts), rollout(clean, 5, actions=acts)
    err = np.stack([g["privileged"] - r["privileged"] for g, r in zip(got, ref)]).astype(float)
    assert abs(err.std() - 0.01) < 0.001 and abs(err.mean()) < 0.001
    for g in got:
        np.testing.assert_array_equal(g["privileged"][:, :9], g["state"])


def test_state_dict_round_trip_with_randomisation():
    block = {"friction": [0.5, 1.5], "latency_steps": [0, 2], "action_noise": [0.0, 0.1]}
    a = env(randomization=block)
    rollout(a, 3)
    saved = a.state_dict()
    b = env(randomization=block)
    b.load_state_dict(saved)
    act = torch.full((N, 4), 0.5)
    np.testing.assert_array_equal(a.step(act).obs["state"].numpy(), b.step(act).obs["state"].numpy())
    with pytest.raises(EnvError, match="^state_dict: saved with domain randomisation"):
        env().load_state_dict(saved)


@pytest.mark.parametrize("block, field, allowed", [
    ({"fricton": [0.5, 1.0]}, "env.randomization", "allowed: friction"),
    ({"friction": [-0.5, 1.0]}, "env.randomization.friction", "allowed: values in [0, 10]"),
    ({"mass": [0.0, 1.0]}, "env.randomization.mass", "(0, 100]"),
    ({"camera_fovy": [-50, 0]}, "env.randomization.camera_fovy", "(-45, 105)"),
    ({"friction": [1.5, 0.5]}, "env.randomization.friction", "low <= high"),
    ({"latency_steps": [0, 1.5]}, "env.randomization.latency_steps", "integers"),
    ({"camera_pos": [[0, 0], [0, 0]]}, "env.randomization.camera_pos", "list of 3"),
    ({"friction": 1.0}, "env.randomization.friction", "[low, high]"),
])
def test_bad_blocks_are_one_line_errors(block, field, allowed):
    with pytest.raises(EnvError) as e:
        env(randomization=block)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(field) and allowed in msg, msg
    with pytest.raises(ConfigError) as c:
        config_from_dict({"env": {"randomization": block}})
    assert str(c.value) == msg


def test_config_block_reaches_the_training_env():
    from embodied.run.env import build_env

    cfg = config_from_dict({"env": {"num_envs": 2, "num_threads": 1,
                                    "randomization": {"friction": [0.5, 1.5]}}})
    assert cfg.env.randomization == {"friction": [0.5, 1.5]}
    p = build_env(cfg.env)._dr.params["friction"]
    assert ((p >= 0.5) & (p <= 1.5)).all() and p[0] != p[1]
    cfg = config_from_dict({"env": {"num_envs": 2, "num_threads": 1}}, ["env.reality=twin_gap"])
    assert build_env(cfg.env)._dr.params["friction"][0] == 0.6
    with pytest.raises(ConfigError, match="^env.reality: give a reality preset or env.randomization"):
        config_from_dict({"env": {"reality": "twin_gap", "randomization": {"mass": [1, 2]}}})


def test_reality_presets_are_fixed_offsets(tmp_path):
    assert "twin_gap" in preset_names()
    r = load_preset("twin_gap")
    assert r.has("friction", "mass", "camera_pos", "camera_rot", "light_warmth", "latency_steps")
    e = env(reality="twin_gap")
    for seed in (0, 7):
        e.reset(seed=seed)
        for k, v in e._dr.params.items():
            np.testing.assert_array_equal(v, np.broadcast_to(r.low[k], v.shape))
    own = tmp_path / "my_robot.yaml"
    own.write_text("description: ours\nvalues: {friction: 0.8, camera_pos: [0.0, 0.01, 0.0]}\n")
    e = env(reality=str(own))
    np.testing.assert_array_equal(e._dr.params["camera_pos"], [[0.0, 0.01, 0.0]] * N)
    own.write_text("values: {mass: -1}\n")
    with pytest.raises(EnvError, match=r"^reality.my_robot.values.mass: -1 is outside"):
        env(reality=str(own))
    with pytest.raises(EnvError, match="^reality: no preset 'nope'"):
        env(reality="nope")


def test_robot_sim_takes_a_reality_preset(dds_env, capsys):
    from embodied.cli import main
    from robot_bridge.sim_node import SimNodeConfig, SimRobotNode

    assert main(["robot-sim", "PushCube", "--reality", "nope", "--transport", "dds"]) == 2
    assert "error: reality: no preset 'nope'" in capsys.readouterr().err
    node = SimRobotNode(SimNodeConfig(task="PushCube", image_size=0, transport="dds", reality="twin_gap"))
    try:
        assert node.env._dr.params["latency_steps"][0] == 1 and node.env._dr.params["friction"][0] == 0.6
    finally:
        node.close()


def test_chunk_step_applies_latency_as_single_steps_do():
    block = fixed(latency_steps=1) | {"friction": [0.5, 1.5]}
    acts = torch.tensor(np.random.default_rng(2).uniform(-1, 1, (N, 6, 4)), dtype=torch.float32)
    a, b = env(randomization=block, max_episode_steps=4), env(randomization=block, max_episode_steps=4)
    for e in (a, b):  # envs 2, 3 two steps ahead: they finish first, the chunk runs on a subset
        e.reset(seed=3)
        e.step(acts[:, 4]), e.step(acts[:, 5])
        e.reset(seed=[8, 9], env_ids=torch.tensor([0, 1]))
    res = a.chunk_step(acts)
    assert res.valid[:, 2].tolist() == res.valid[:, 3].tolist() == [True, True, False, False]
    finals = {}
    for k in range(4):
        r = b.step(acts[:, k])
        valid = res.valid[:, k].numpy()
        np.testing.assert_array_equal(res.reward[valid, k].numpy(), r.reward[valid].numpy())
        for i in np.flatnonzero(r.done.numpy() & valid):
            finals[i] = r.final_obs["state"][i].numpy()
    for i, state in finals.items():
        np.testing.assert_array_equal(res.final_obs["state"][i].numpy(), state)
    assert len(finals) == N
