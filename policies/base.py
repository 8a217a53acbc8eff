"""The Policy contract: act with a replay record, evaluate it later, SFT loss.

Shapes: B envs, K actions per chunk, A action width.

`act(obs)` samples a chunk and returns everything needed to recompute its
log-probability later (the replay record). `evaluate(obs, replay)` recomputes
log-probability, entropy and value under the current weights: before any
gradient step it reproduces act's log-probability up to float error, so the
first PPO ratio is 1.
"""

from __future__ import annotations

import abc
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from policies.names import PolicyLoadError, policy_class

__all__ = ["ActOutput", "Evaluation", "Policy", "PolicyLoadError"]


@dataclass
class ActOutput:
    actions: torch.Tensor  # float32 [B, K, A] the chunk to execute
    log_prob: torch.Tensor  # float32 [B] log-prob of the chunk
    # float32 [B] V(obs), or [B, n] with a per-action critic (the value before each executed
    # action of the chunk, for ppo.reward_level=action); None without a critic
    value: torch.Tensor | None
    replay: dict[str, torch.Tensor]  # [B, ...] tensors that evaluate() needs
    # float32 [B, P, A]: log_prob split per chunk element (its sum is log_prob), for PPO at
    # action or token level; P = n, the executed actions, when they have a density of their own,
    # or P = K when the policy scores its whole sampled chunk (the flow VLA); executed positions
    # come first. None when a policy only has the chunk's log_prob.
    log_prob_parts: torch.Tensor | None = None


@dataclass
class Evaluation:
    log_prob: torch.Tensor  # float32 [B]
    entropy: torch.Tensor  # float32 [B]
    value: torch.Tensor | None  # float32 [B] or [B, n], as in ActOutput
    log_prob_parts: torch.Tensor | None = None  # float32 [B, P, A], as in ActOutput


class Policy(nn.Module, abc.ABC):
    """Base of every policy. Subclasses set `name` and a dataclass `config`."""

    name: ClassVar[str]
    chunk_size: int = 1
    has_critic: bool = True

    def __init__(self, config: Any):
        super().__init__()
        self.config = config

    @abc.abstractmethod
    def act(self, obs: dict[str, Any], deterministic: bool = False) -> ActOutput: ...

    @abc.abstractmethod
    def evaluate(self, obs: dict[str, Any], replay: dict[str, torch.Tensor]) -> Evaluation: ...

    def get_value(self, obs: dict[str, Any]) -> torch.Tensor:
        """float32 [B] V(obs) (or [B, n] with a per-action critic)."""
        raise NotImplementedError(f"{type(self).__name__} has no critic")

    @abc.abstractmethod
    def sft_loss(self, obs: dict[str, Any], actions: torch.Tensor) -> torch.Tensor:
        """Scalar supervised loss for demonstrated chunks float32 [B, K, A]."""

    def update_normalizer(self, obs: dict[str, Any]) -> None:
        """Fold a batch of observations [..., D] into running statistics (if any)."""

    def actor_parameters(self) -> Iterator[nn.Parameter]:
        critic = {id(p) for p in self.critic_parameters()}
        return (p for p in self.parameters() if id(p) not in critic)

    def critic_parameters(self) -> Iterator[nn.Parameter]:
        return iter(())

    # -- Hugging Face style persistence ------------------------------------
    def save_pretrained(self, path: str | Path) -> None:
        """Write config.json, model.safetensors and any extras into directory `path`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {"policy": self.name, "config": self.config_dict()}
        if getattr(self, "record", None):
            meta["trained_on"] = self.record
        (path / "config.json").write_text(json.dumps(meta, indent=2))
        save_file(self.weights_to_save(), str(path / "model.safetensors"))
        self.save_extras(path)

    def config_dict(self) -> dict[str, Any]:
        """The config as saved in config.json."""
        return asdict(self.config)

    def weights_to_save(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}

    def save_extras(self, path: Path) -> None:
        """Files beside the weights (a tokenizer, say); none by default."""

    @classmethod
    def from_pretrained(cls, path: str | Path, **config_overrides: Any) -> "Policy":
        """Load a directory written by save_pretrained, whatever its policy class; never downloads."""
        path = Path(path)
        cfg_file, weights = path / "config.json", path / "model.safetensors"
        if not cfg_file.is_file() or not weights.is_file():
            raise PolicyLoadError(f"{path}: not a policy directory (needs config.json and model.safetensors)")
        try:
            meta = json.loads(cfg_file.read_text())
        except (OSError, ValueError) as e:
            raise PolicyLoadError(f"{cfg_file}: unreadable ({type(e).__name__}: {str(e).splitlines()[0]}); "
                                  "allowed: the config.json that save_pretrained wrote") from None
        if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
            raise PolicyLoadError(f"{cfg_file}: not a policy config (expected {{\"policy\": ..., \"config\": {{...}}}})")
        klass = policy_class(meta.get("policy", "?"))
        if not issubclass(klass, cls):
            raise PolicyLoadError(f"{path}: holds a '{klass.name}' policy, not a {cls.__name__}")
        try:
            config = klass.config_class(**{**meta["config"], **config_overrides})
        except TypeError as e:
            raise PolicyLoadError(f"{path}: config.json does not fit {klass.config_class.__name__} ({e})") from None
        policy = klass.load_from(path, config, read_weights(weights))
        policy.record = meta.get("trained_on") or {}
        return policy

    def load_saved_weights(self, path: str | Path) -> None:
        """Load the model.safetensors of a save_pretrained directory into this (same-config)
        policy in place, e.g. to resume training; one-line error on a mismatch."""
        load_weights(self, self.complete_state(read_weights(Path(path) / "model.safetensors")), str(path))

    def complete_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Weights as saved -> weights as load_state_dict wants them (a subclass may restore
        tensors that saving dropped, such as tied ones)."""
        return state

    @classmethod
    def load_from(cls, path: Path, config: Any, state: dict[str, torch.Tensor]) -> "Policy":
        """Build the policy from its config and load `state` (a subclass may rebuild more)."""
        policy = cls(config)
        load_weights(policy, state, str(path))
        return policy


def read_weights(file: str | Path) -> dict[str, torch.Tensor]:
    """load_file with a one-line PolicyLoadError naming the file (missing, truncated or corrupt)."""
    try:
        return load_file(str(file))
    except Exception as e:  # safetensors raises SafetensorError (not an OSError) on a truncated file
        first = (str(e).splitlines() or [""])[0]
        raise PolicyLoadError(f"{file}: unreadable weights ({type(e).__name__}: {first}); allowed: a complete "
                              "model.safetensors as save_pretrained wrote it (copy it again or use an earlier "
                              "checkpoint)") from None


def load_weights(module: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    """load_state_dict with a one-line error for missing, unexpected or mismatched weights."""
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing {missing[:3]}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:3]}")
        if wrong:
            k = wrong[0]
            parts.append(f"shape mismatch {k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}")
        raise PolicyLoadError(f"{where}: weights do not match the model ({'; '.join(parts)})")
    module.load_state_dict(state)


def trained_task(record: dict[str, Any]) -> str | None:
    """The simulator task a policy's record names: the sim_task its env spec or its loader
    recorded (a policy trained in a world model: the task the model learned), else its task."""
    spec = record.get("env_spec") or {}
    return record.get("sim_task") or spec.get("sim_task") or record.get("task")


def same_task(a: str, b: str) -> bool:
    """The same task: equal names up to a layout suffix (`@sampled`, `@goal`); a benchmark holds
    its tasks, which it names after a slash (`libero:libero_spatial` and `libero:libero_spatial/0`;
    `metaworld:MT10` and `metaworld:MT10/push-v3`, a task in MT10's observation layout)."""
    a, b = a.split("@", 1)[0], b.split("@", 1)[0]
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def check_fits(policy: "Policy", spec: Any, where: str, task: str | None = None) -> None:
    """PolicyLoadError (one line, naming `where` and what is allowed) if the policy was trained on
    another task than the env's (spec.task, or `task`), or reads or writes other shapes than
    the env has. `policy.record` (config.json's "trained_on": task, obs_keys, action_dim, env_spec) is
    what training recorded; a policy saved before records existed is checked on shapes only. Tasks
    compare by the simulator task behind them (EnvSpec.sim_task, the record's: trained_task), so a
    policy trained in a world model fits the task the model learned."""
    rec = getattr(policy, "record", None) or {}
    env_task = task or getattr(spec, "sim_task", None) or spec.task
    got = trained_task(rec)
    if got and not same_task(got, env_task):
        raise PolicyLoadError(f"{where}: trained on task {got!r}, not {env_task!r}; "
                              f"allowed: {got!r} (or a policy trained on {env_task!r})")
    cfg = policy.config
    a = getattr(cfg, "action_dim", None)
    if a is not None and a != spec.action_dim:
        raise PolicyLoadError(f"{where}: writes {a}-dim actions; the env {spec.task!r} takes {spec.action_dim}")
    if hasattr(cfg, "obs_dim"):  # a state MLP: its input is one vector
        key = getattr(cfg, "obs_key", None) or rec.get("obs_keys", ["privileged"])[0]
        have = {"privileged": spec.privileged_dim, "state": spec.state_dim}.get(key)
        if have is not None and have != cfg.obs_dim:
            raise PolicyLoadError(f"{where}: reads a {cfg.obs_dim}-dim '{key}' observation; the env {spec.task!r} "
                                  f"gives {have}")
    cams = getattr(cfg, "cameras", None)
    if cams:
        missing = [c for c in cams if c not in tuple(spec.cameras)]
        if missing:
            raise PolicyLoadError(f"{where}: reads cameras {list(cams)}; the env {spec.task!r} renders "
                                  f"{list(spec.cameras) or 'none (state only)'}; allowed: env.obs_mode=rgb "
                                  f"env.cameras=[{','.join(cams)}]")
    s = getattr(cfg, "state_dim", None)
    if s is not None and cams is not None:  # a VLA: the first state_dim entries, or state_indices
        need = max(getattr(cfg, "state_indices", None) or [s - 1]) + 1
        if need > spec.state_dim:
            raise PolicyLoadError(f"{where}: reads {need} state entries; the env {spec.task!r} gives {spec.state_dim}")
