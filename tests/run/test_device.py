"""train.device: the CPU path is the CUDA path (embodied/run/device.py).

A rollout and an update run under a TorchFunctionMode that sees every torch call made from
embodied/ and policies/ code. On the CPU every tensor is trivially on train.device, so the test
checks what would leave the device on CUDA: a factory call (zeros, arange, tensor, ...) without a
device, a tensor on another device than train.device, and each host read (.cpu(), .item(),
.tolist(), .numpy()) that is not one of the few deliberate ones listed below (one per iteration or
per minibatch, never per env or per finished episode)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from embodied.config import ConfigError, load_config
from embodied.rl.train import build_algorithm, build_env
from embodied.run.device import DeviceError, resolve_device
from policies.registry import build_policy

ROOT = Path(__file__).resolve().parents[2]
OURS = (str(ROOT / "embodied"), str(ROOT / "policies"))
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "tensor", "as_tensor",
             "eye", "linspace", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like"}
LIKE = {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like"}  # inherit the device
HOST = {"cpu", "item", "tolist", "numpy"}
# (file, function) of the deliberate host reads and host factories, and why
ALLOWED = {
    ("embodied/rl/rollout.py", "pop"),  # the episode sums, once per iteration
    ("embodied/rl/learner.py", "optimize"),  # approx_kl for target_kl (per minibatch), the stats at the end,
    #                                        the minibatch permutation drawn on the CPU generator
    ("embodied/rl/learner.py", "update"),  # the iteration's stats (float())
    ("embodied/rl/learner.py", "explained_variance"),  # one stat per iteration
    ("embodied/rl/episodes.py", "_group_seeds"),  # GRPO's group seeds: they go to env.reset as ints
    ("embodied/run/device.py", "to_env"),  # actions to a CPU simulator: one copy per step
    ("embodied/rl/learner.py", "minibatch"),  # instructions of a minibatch's rows (VLAs)
    ("policies/tokenizer.py", "batch"),  # token ids of the instructions: strings live on the host, one copy per forward
}


class DeviceAudit(TorchFunctionMode):
    def __init__(self, device: torch.device):
        super().__init__()
        self.device, self.bad, self.seen = device, [], 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        where = self._caller()
        if where is None:
            return out
        self.seen += 1
        name = getattr(func, "__name__", str(func))
        if name in FACTORIES and name not in LIKE and "device" not in kwargs and where not in ALLOWED:
            self.bad.append(f"{where}: torch.{name} without device")
        if name in HOST and where not in ALLOWED:
            self.bad.append(f"{where}: .{name}() reads a tensor back to the host")
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if torch.is_tensor(t) and t.device != self.device and where not in ALLOWED:
                self.bad.append(f"{where}: {name} gave a tensor on {t.device}")
        return out

    @staticmethod
    def _caller():
        """(file, function) of the nearest frame outside torch and this file, if it is ours."""
        f = sys._getframe(2)
        while f is not None and ("/torch/" in f.f_code.co_filename or f.f_code.co_filename == __file__):
            f = f.f_back
        if f is None or not f.f_code.co_filename.startswith(OURS):
            return None
        return str(Path(f.f_code.co_filename).relative_to(ROOT)), f.f_code.co_name


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, CUDA])]


def _audit(overrides: list[str], device: str = "cpu") -> list[str]:
    cfg = load_config(None, [f"train.device={device}", *overrides])
    device = resolve_device(cfg.train.device)
    env = build_env(cfg.env, device=device)
    policy = build_policy(cfg.policy, env.spec).to(device)
    collector, learner = build_algorithm(cfg, env, policy)
    collector.reset(seed=0)
    audit = DeviceAudit(device)
    with audit:
        traj = collector.collect()
        learner.update(traj)
        collector.pop_episode_stats()
    env.close()
    assert audit.seen > 100  # the mode saw the rollout and the update
    return sorted(set(audit.bad))


@pytest.mark.parametrize("device", DEVICES)
def test_ppo_rollout_and_update_stay_on_the_device(device):
    bad = _audit(["env.task=PushCube", "env.num_envs=4", "env.num_threads=1", "ppo.rollout_steps=60",
                  "ppo.epochs=2", "ppo.minibatches=2"], device)  # 60 steps: episodes end, auto-reset
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("device", DEVICES)
def test_grpo_flow_vla_rollout_and_update_stay_on_the_device(tmp_path, device):
    from policies.vla.config import FlowVLAConfig
    from policies.vla.flow import FlowVLA

    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 32, "patch_size": 16}
    FlowVLA(FlowVLAConfig(vision=vision, action_dim=4, state_dim=9, chunk_size=10, num_steps=3,
                          noise_method="flow_noise")).save_pretrained(tmp_path / "vla")
    bad = _audit(["env.task=Reach", "env.num_envs=4", "env.num_threads=1", "env.obs_mode=rgb", "env.image_size=32",
                  "policy.name=flow_vla", f"policy.init_from={tmp_path / 'vla'}", "train.algorithm=grpo", "grpo.group_size=2", "grpo.filter_groups=false",
                  "ppo.epochs=1", "ppo.minibatches=1"], device)
    assert not bad, "\n".join(bad)


def test_the_audit_catches_a_host_allocation():
    """The check can fail: a factory call without a device in our code is reported."""
    from embodied.rl import rollout

    original = rollout.EpisodeTally.add

    def add(self, ret, length, success, done):
        torch.zeros(3)  # the bug: a CPU tensor on the CUDA path
        return original(self, ret, length, success, done)

    rollout.EpisodeTally.add = add
    try:
        bad = _audit(["env.task=PushCube", "env.num_envs=2", "env.num_threads=1", "ppo.rollout_steps=2"])
    finally:
        rollout.EpisodeTally.add = original
    assert any("torch.zeros without device" in b and "rollout.py" in b for b in bad), bad


def test_device_setting_values():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(DeviceError, match="train.device: 'gpu' is not a device; allowed: auto, cpu, cuda"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA device"):
            resolve_device("cuda:0")
    with pytest.raises(ConfigError, match="train.device"):
        load_config(None, ["train.device=tpu"])


@pytest.mark.cuda
@CUDA
@pytest.mark.parametrize("first,then", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_moves_between_devices(tmp_path, first, then):
    """Train two iterations on one device, resume on the other for two more: weights, optimiser
    state, normaliser and collector state follow the device the run continues on."""
    from embodied.rl.train import train

    base = ["env.task=PushCube", "env.num_envs=8", "env.num_threads=1", "ppo.rollout_steps=8", "ppo.epochs=1",
            "train.eval_episodes=4", "train.eval_every=0", "train.save_every=1", "train.video_episodes=0",
            "train.progress=false", f"train.run_dir={tmp_path / 'run'}"]
    one = train(load_config(None, [*base, f"train.device={first}", "train.total_steps=128"]))
    two = train(load_config(None, [*base, f"train.device={then}", "train.total_steps=256"]), resume=one["checkpoint"])
    assert two["iterations"] == 4 and two["env_steps"] == 256
