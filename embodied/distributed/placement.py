"""Placement as config data: how many of each role, with how many CPUs / GPUs, on which nodes.

Three roles (embodied/distributed/roles.py):
    env       EnvWorker: a shard of the batched env (count shards of num_envs / count envs)
    rollout   RolloutWorker: policy inference for the env workers
    learner   LearnerWorker: the update; count > 1 is data parallel (torch.distributed)

Presets (docs/distributed.md says when each pays):
    collocated      rollout and learner share one device (GPU fractions 0.5 each when
                    gpus > 0); env workers on CPUs; synchronous rollout.
    disaggregated   rollout and learner each get whole devices; env workers on CPUs, on
                    nodes labelled role=env when such nodes exist.
    pipelined       collocated with the env batch split into 2 stages, so that env stepping
                    of one stage overlaps inference of the other.

Every check runs before anything starts and raises PlacementError with one line that names
the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import torch

from embodied.config_loader import ConfigError

ROLES = ("env", "rollout", "learner")
PRESETS = ("collocated", "disaggregated", "pipelined")


class PlacementError(ConfigError):
    """A placement that cannot run: unknown field or preset, too many resources, bad address.
    A ConfigError, so `embodied train` reports it as one line with exit status 2."""


@dataclass(frozen=True)
class RoleSpec:
    count: int = 1
    num_cpus: float = 1.0  # per instance; fractions allowed (Ray packs several on one CPU)
    num_gpus: float = 0.0  # per instance; fractions allowed for collocation
    labels: dict[str, str] = field(default_factory=dict)  # node labels the instance needs


@dataclass(frozen=True)
class Placement:
    env: RoleSpec = field(default_factory=RoleSpec)
    rollout: RoleSpec = field(default_factory=RoleSpec)
    learner: RoleSpec = field(default_factory=RoleSpec)
    stages: int = 1  # pipeline stages of the env batch (1: synchronous)
    address: str | None = None  # Ray: None starts Ray here, "auto" or "host:port" joins a cluster

    def total(self, resource: str) -> float:
        """Sum of count * num_cpus (or num_gpus) over the roles."""
        return sum(getattr(self, r).count * getattr(getattr(self, r), resource) for r in ROLES)


def preset(name: str, env_workers: int = 2, gpus: int = 0) -> Placement:
    """The named preset for `env_workers` env shards on a machine with `gpus` GPUs."""
    if name not in PRESETS:
        raise PlacementError(f"placement.preset: unknown preset {name!r}; allowed: {', '.join(PRESETS)}")
    shared = 0.5 if gpus else 0.0  # rollout and learner on one device
    env = RoleSpec(count=env_workers, num_cpus=0.5)
    if name == "disaggregated":
        return Placement(env=env, rollout=RoleSpec(num_cpus=0.5, num_gpus=1.0 if gpus else 0.0),
                         learner=RoleSpec(num_cpus=0.5, num_gpus=1.0 if gpus > 1 else 0.0))
    return Placement(env=env, rollout=RoleSpec(num_cpus=0.5, num_gpus=shared),
                     learner=RoleSpec(num_cpus=0.5, num_gpus=shared),
                     stages=2 if name == "pipelined" else 1)


def _role_from_dict(base: RoleSpec, raw: Any, where: str) -> RoleSpec:
    if not isinstance(raw, dict):
        raise PlacementError(f"{where}: expected a mapping with keys count, num_cpus, num_gpus, labels")
    allowed = {f.name for f in dataclasses.fields(RoleSpec)}
    for key in raw:
        if key not in allowed:
            raise PlacementError(f"{where}.{key}: unknown field; allowed: {', '.join(sorted(allowed))}")
    spec = dataclasses.replace(base, **raw)
    if not isinstance(spec.count, int) or isinstance(spec.count, bool) or spec.count < 1:
        raise PlacementError(f"{where}.count: {spec.count!r}; allowed: an integer >= 1")
    for key in ("num_cpus", "num_gpus"):
        val = getattr(spec, key)
        if isinstance(val, bool) or not isinstance(val, (int, float)) or val < 0:
            raise PlacementError(f"{where}.{key}: {val!r}; allowed: a number >= 0 (fractions allowed)")
    if not isinstance(spec.labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in spec.labels.items()):
        raise PlacementError(f"{where}.labels: {spec.labels!r}; allowed: a mapping of strings, e.g. {{role: env}}")
    return spec


def placement_from_dict(raw: dict[str, Any] | None, env_workers: int = 2, gpus: int = 0) -> Placement:
    """{preset: name, env: {...}, rollout: {...}, learner: {...}, stages, address} -> Placement.
    Role fields override the preset's; a missing preset means `collocated`."""
    raw = dict(raw or {})
    allowed = {"preset", "stages", "address", *ROLES}
    for key in raw:
        if key not in allowed:
            raise PlacementError(f"placement.{key}: unknown field; allowed: {', '.join(sorted(allowed))}")
    base = preset(raw.pop("preset", "collocated"), env_workers, gpus)
    roles = {r: _role_from_dict(getattr(base, r), raw.pop(r), f"placement.{r}") for r in ROLES if r in raw}
    place = dataclasses.replace(base, **roles, **raw)
    if not isinstance(place.stages, int) or isinstance(place.stages, bool) or place.stages < 1:
        raise PlacementError(f"placement.stages: {place.stages!r}; allowed: an integer >= 1")
    if place.env.count % place.stages:
        raise PlacementError(f"placement.stages: {place.stages} does not divide placement.env.count "
                             f"{place.env.count}; allowed: a divisor of the number of env workers")
    if place.address is not None and not isinstance(place.address, str):
        raise PlacementError(f"placement.address: {place.address!r}; allowed: null, 'auto' or 'host:port'")
    return place


def local_resources() -> dict[str, float]:
    """CPUs and GPUs of this machine (what `backend: local` and a fresh ray.init() can use)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"CPU": float(cpus), "GPU": float(torch.cuda.device_count())}


def check_fits(place: Placement, available: dict[str, float],
               node_labels: list[dict[str, str]] | None = None) -> None:
    """Raise PlacementError unless the placement's CPUs and GPUs fit `available` ({"CPU": n,
    "GPU": m}) and every role's labels match some node (node_labels: one dict per node; None
    skips the label check)."""
    for resource, key in (("CPU", "num_cpus"), ("GPU", "num_gpus")):
        need, have = place.total(key), available.get(resource, 0.0)
        if need > have + 1e-9:
            per_role = ", ".join(f"{r} {getattr(place, r).count} x {getattr(getattr(place, r), key):g}" for r in ROLES)
            raise PlacementError(f"placement: asks for {need:g} {resource}s ({per_role}) but the cluster has "
                                 f"{have:g}; lower count or {key}")
    if node_labels is None:
        return
    for r in ROLES:
        want = getattr(place, r).labels
        if want and not any(all(n.get(k) == v for k, v in want.items()) for n in node_labels):
            raise PlacementError(f"placement.{r}.labels: no node has labels {want}; nodes have "
                                 f"{[n for n in node_labels if n]}")


def check_address(address: str | None, timeout: float = 2.0) -> None:
    """None and "auto" pass (Ray resolves them); "host:port" must accept a TCP connection."""
    if address is None or address == "auto":
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise PlacementError(f"placement.address: {address!r}; allowed: null (start Ray here), 'auto', "
                             f"or host:port of a running Ray head")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise PlacementError(f"placement.address: cannot reach the Ray head at {address} ({e.strerror or e}); "
                             f"start it with `ray start --head` or use null to start Ray here") from None
