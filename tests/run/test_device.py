"""train.device: the CPU path is the CUDA path (embodied/run/device.py).

A rollout and an update run under a TorchFunctionMode that sees every torch call made from
embodied/, policies/ and sims/ code (the MuJoCo Warp backend keeps its worlds on train.device).
On the CPU every tensor is trivially on train.device, so the test checks what would leave the
device on CUDA: a factory call (zeros, arange, tensor, ...) without a device or with an explicit
host device ("cpu"), a move to the host (.to("cpu")), a tensor on another device than
train.device, and each host read (.cpu(), .item(), .tolist(), .numpy()) that is not one of the few
deliberate ones listed below, each allowed by name in its function only (one per iteration or per
minibatch, never per env or per finished episode)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch.overrides import TorchFunctionMode

from embodied.config import ConfigError, load_config
from embodied.rl.train import build_algorithm, build_env
from embodied.run.device import DeviceError, resolve_device
from policies.registry import build_policy

ROOT = Path(__file__).resolve().parents[2]
OURS = (str(ROOT / "embodied"), str(ROOT / "policies"), str(ROOT / "sims"))
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "tensor", "as_tensor",
             "eye", "linspace", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like"}
LIKE = {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like"}  # inherit the device
HOST = {"cpu", "item", "tolist", "numpy"}
# (file, function) -> the calls it may make to the host or without a device, and why
ALLOWED = {
    ("embodied/rl/rollout.py", "pop"): {"tolist", "item", "cpu", "tensor"},  # the episode sums, once per iteration
    ("embodied/rl/learner.py", "optimize"): {"item", "randperm", "cpu"},  # approx_kl for target_kl (per
    #                                         minibatch); the minibatch permutation on the CPU generator
    ("embodied/rl/learner.py", "update"): {"item", "tolist", "cpu", "numpy"},  # the iteration's stats (float())
    ("embodied/rl/learner.py", "explained_variance"): {"item"},  # one stat per iteration
    ("embodied/rl/episodes.py", "_group_seeds"): {"tolist", "cpu", "arange", "tensor", "randint"},  # GRPO's group
    #                                                                          seeds go to env.reset as ints
    ("embodied/run/device.py", "to_env"): {"cpu", "numpy", "to"},  # actions to a CPU simulator: one copy per step
    ("embodied/rl/learner.py", "minibatch"): {"tolist", "cpu"},  # instructions of a minibatch's rows (VLAs)
    ("policies/tokenizer.py", "batch"): {"tensor", "as_tensor", "tolist", "full", "zeros"},  # token ids of the instructions:
    #                                                      strings live on the host, one copy per forward
    ("sims/mujoco/env.py", "_actions"): {"to", "cpu", "numpy"},  # the C backend's actions: one copy per step
    ("sims/mujoco/warp_env.py", "step"): {"cpu", "numpy"},  # MuJoCo Warp: the done flags [B], once per step
    #                                        (finished envs draw their next episodes on the host)
    # the iteration's diagnostics (embodied/rl/diagnostics.py) are computed on the host, once per iteration
    ("embodied/rl/diagnostics.py", "rollout_signal"): "*",
    ("embodied/rl/diagnostics.py", "group_signal"): "*",
}


def allowed(where: tuple[str, str], name: str) -> bool:
    ok = ALLOWED.get(where, ())
    return ok == "*" or name in ok


class DeviceAudit(TorchFunctionMode):
    def __init__(self, device: torch.device):
        super().__init__()
        self.device, self.bad, self.seen, self.files = device, [], 0, set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        where = self._caller()
        if where is None:
            return out
        self.seen += 1
        self.files.add(where[0])
        name = getattr(func, "__name__", str(func))
        if allowed(where, name):
            return out
        if name in FACTORIES and name not in LIKE and "device" not in kwargs:
            self.bad.append(f"{where}: torch.{name} without device")
        if name in FACTORIES and _host(kwargs.get("device")) and self.direct:
            self.bad.append(f"{where}: torch.{name} on an explicit host device")
        if name == "to" and any(_host(a) for a in (*args[1:], kwargs.get("device"))):
            self.bad.append(f"{where}: .to(cpu) moves a tensor to the host")
        if name in HOST:
            self.bad.append(f"{where}: .{name}() reads a tensor back to the host")
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if torch.is_tensor(t) and t.device != self.device:
                self.bad.append(f"{where}: {name} gave a tensor on {t.device}")
        return out

    def _caller(self):
        """(file, function) of the nearest frame outside torch and this file, if it is ours;
        self.direct: whether our code made the call itself (not through torch's own code, such
        as the optimiser's step counters, which torch keeps on the host)."""
        f = sys._getframe(2)
        self.direct = True
        while f is not None and ("/torch/" in f.f_code.co_filename or f.f_code.co_filename == __file__):
            self.direct = self.direct and f.f_code.co_filename == __file__
            f = f.f_back
        if f is None or not f.f_code.co_filename.startswith(OURS):
            return None
        return str(Path(f.f_code.co_filename).relative_to(ROOT)), f.f_code.co_name


def _host(device) -> bool:
    """An explicit host device written in the code: "cpu" or "cpu:N" (a string; train.device
    reaches the code as a torch.device)."""
    return isinstance(device, str) and device.split(":")[0] == "cpu"


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, CUDA])]


def _audit(overrides: list[str], device: str = "cpu", files: set[str] | None = None) -> list[str]:
    """The audit's findings over one rollout and one update (sorted, unique); `files` gets the
    files of ours whose torch calls it saw."""
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
    if files is not None:
        files.update(audit.files)
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


PPO_TINY = ["env.task=PushCube", "env.num_envs=2", "env.num_threads=1", "ppo.rollout_steps=2"]


def _planted(defects: list[tuple[type, str, Callable[[], Any]]], overrides: list[str],
             files: set[str] | None = None) -> list[str]:
    """The audit's findings with each defect() run at the start of its cls.method: this file's
    frames are skipped, so a defect is charged to the function of ours that called the method."""
    originals = [(cls, method, getattr(cls, method)) for cls, method, _ in defects]

    def wrap(original, defect):
        def wrapped(self, *args, **kwargs):
            defect()
            return original(self, *args, **kwargs)
        return wrapped

    for (cls, method, original), (_, _, defect) in zip(originals, defects):
        setattr(cls, method, wrap(original, defect))
    try:
        return _audit(overrides, files=files)
    finally:
        for cls, method, original in originals:
            setattr(cls, method, original)


def test_the_audit_catches_planted_defects_in_the_rollout_and_the_update():
    """The check can fail, everywhere it looks: a factory without a device and one on an explicit
    host device in the rollout, a move to the host, and a host read inside the PPO update (which is
    not exempt as a whole: only `optimize`'s listed reads are)."""
    from embodied.rl import rollout
    from embodied.rl.learner import PolicyGradientLearner

    bad = _planted([(rollout.EpisodeTally, "add", lambda: (torch.zeros(3), torch.zeros(3, device="cpu"))),
                    (rollout.EpisodeTally, "pop", lambda: torch.ones(2).to("cpu")),
                    (PolicyGradientLearner, "_evaluate", lambda: torch.ones(2).tolist())], PPO_TINY)
    for what, where in (("torch.zeros without device", "rollout.py"), ("explicit host device", "rollout.py"),
                        (".to(cpu)", "rollout.py"), (".tolist() reads", "'optimize'")):
        assert any(what in b and where in b for b in bad), (what, bad)


def test_the_warp_backend_is_audited_and_a_planted_defect_in_it_is_caught():
    """sims/ is audited: MuJoCo Warp's worlds live on train.device (warp's CPU device here); a
    rollout and update on it are clean but for the one host allocation planted in its step."""
    pytest.importorskip("mujoco_warp")  # the conftest turns a missing package into a failure
    from sims.mujoco.warp_env import WarpVecEnv

    files: set[str] = set()
    bad = _planted([(WarpVecEnv, "_obs", lambda: torch.empty(4))], ["env.backend=warp", *PPO_TINY,
                                                                      "ppo.rollout_steps=4"], files)
    assert bad == ["('sims/mujoco/warp_env.py', 'step'): torch.empty without device"], bad
    assert "sims/mujoco/warp_env.py" in files and "embodied/rl/learner.py" in files, files


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
