import pytest

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
])
def test_bad_config_one_line(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config(None, override)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_missing_file():
    with pytest.raises(ConfigError, match="config file not found"):
        load_config("does/not/exist.yaml")
