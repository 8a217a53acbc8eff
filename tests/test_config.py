import pytest
import torch

from embodied.config import ConfigError, load_config


def test_defaults_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("env:\n  task: Reach\nppo:\n  epochs: 3\n")
    cfg = load_config(f, ["ppo.lr=1e-3", "env.num_envs=16", "ppo.dual_clip=null", "policy.hidden_sizes=[64,64]"])
    assert cfg.env.task == "Reach" and cfg.env.num_envs == 16
    assert cfg.ppo.epochs == 3 and cfg.ppo.lr == 1e-3 and cfg.ppo.dual_clip is None
    assert cfg.policy.hidden_sizes == [64, 64]


@pytest.mark.parametrize("override,needle", [
    (["ppo.lrr=1"], "unknown config key 'ppo.lrr'"),
    (["nope.x=1"], "unknown config key 'nope'"),
    (["env.obs_mode=depth"], "env.obs_mode: 'depth' is not allowed; choose one of state, rgb"),
    (["env.num_envs=many"], "env.num_envs: expected int"),
    (["ppo.epochs=2.5"], "ppo.epochs: expected int"),
    (["ppo.lr"], "expected key=value"),
    (["env.max_episode_steps=0"], "env.max_episode_steps: 0; allowed: an integer >= 1, or null"),
])
def test_bad_config_one_line(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config(None, override)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_missing_file():
    with pytest.raises(ConfigError, match="config file not found"):
        load_config("does/not/exist.yaml")


def test_find_config_by_folder_or_by_a_name_one_folder_holds(tmp_path, monkeypatch):
    """configs/<kind>/NAME.yaml is found as "kind/NAME" and as "NAME" when only one kind folder
    holds it; a name two folders hold is a one-line error, a missing one comes back as given."""
    import embodied.config_loader as loader

    for rel in ("ppo/a.yaml", "sft/b.yaml", "rl/b.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}\n")
    monkeypatch.setattr(loader, "CONFIG_DIR", tmp_path)
    assert loader.find_config("a") == loader.find_config("ppo/a") == loader.find_config("ppo/a.yaml") == tmp_path / "ppo/a.yaml"
    with pytest.raises(ConfigError, match=r"^config 'b': rl/b.yaml and sft/b.yaml both match; give the folder"):
        loader.find_config("b")
    assert str(loader.find_config("nope")) == "nope"
    assert loader.config_names() == ["ppo/a", "rl/b", "sft/b"]


def test_env_time_limit_reaches_the_env():
    from embodied.run.env import build_env

    cfg = load_config(None, ["env.task=Reach", "env.num_envs=2", "env.max_episode_steps=7"])
    env = build_env(cfg.env)
    try:
        env.reset(seed=0)
        for t in range(7):
            res = env.step(torch.zeros(2, env.spec.action_dim))
        assert env.spec.max_episode_steps == 7 and bool(res.truncated.all() | res.terminated.all())
    finally:
        env.close()
    default = build_env(load_config(None, ["env.task=Reach", "env.num_envs=1"]).env)
    assert default.spec.max_episode_steps > 7
    default.close()
