"""Input maps: how one env's observations feed one released checkpoint (configs/input_maps/).

A small YAML file per checkpoint and task (field meanings in docs/vla.md):
  checkpoint: what it is for (free text)       task: the env task (free text)
  cameras: {checkpoint camera: env camera}    every camera the checkpoint was trained with
                                              (LeRobot: its VISUAL input features; openpi: the
                                              image slots base_0_rgb / left_wrist_0_rgb /
                                              right_wrist_0_rgb; a slot left out is a masked
                                              image, as openpi feeds an absent camera)
  image_size: the checkpoint's square input resolution (env images are resized to it)
  state_indices: env obs['state'] dims fed as the checkpoint's state, in the checkpoint's order
  action_dim: the checkpoint's real action width (must equal the env's)
  chunk_size, execute_steps, num_steps: chunk length, actions executed per chunk, Euler steps
  normalization, asset_id: openpi exports (mean_std / quantile; the export records neither)
  normalization, unnorm_key: OpenVLA-OFT (bounds_q99 / bounds; which dataset_statistics.json entry);
    an OFT checkpoint names no cameras: the map's order is its image order (third-person first)
A key the map does not know, a checkpoint camera without an env camera, or an env that lacks
a mapped camera is a one-line error: a wrong camera shows up only as bad actions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from policies.vla.pretrained.files import PretrainedError


@dataclass
class InputMap:
    cameras: dict[str, str]  # checkpoint camera -> env camera (obs key rgb_<env camera>)
    state_indices: list[int]
    action_dim: int
    chunk_size: int
    image_size: int | None = None
    execute_steps: int = 0
    num_steps: int | None = None
    normalization: str | None = None
    asset_id: str | None = None
    unnorm_key: str | None = None
    checkpoint: str = ""
    task: str = ""
    path: str = field(default="", repr=False)

    @classmethod
    def load(cls, path: str | Path) -> "InputMap":
        path = Path(path)
        if not path.is_file():
            raise PretrainedError(f"{path}: missing input map")
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise PretrainedError(f"{path}: corrupt YAML: {str(e).splitlines()[0]}") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, where: str = "input map") -> "InputMap":
        if not isinstance(data, dict):
            raise PretrainedError(f"{where}: an input map is a mapping of fields")
        names = [f.name for f in dataclasses.fields(cls) if f.name != "path"]
        bad = sorted(set(data) - set(names))
        if bad:
            raise PretrainedError(f"{where}: unknown field {bad[0]!r}; allowed: {', '.join(names)}")
        need = [n for n in ("cameras", "state_indices", "action_dim", "chunk_size") if n not in data]
        if need:
            raise PretrainedError(f"{where}: missing field {need[0]!r}")
        if not isinstance(data["cameras"], dict) or not data["cameras"]:
            raise PretrainedError(f"{where}: cameras must map checkpoint camera names to env camera names")
        m = cls(**{**data, "cameras": {str(k): str(v) for k, v in data["cameras"].items()},
                   "state_indices": [int(i) for i in data["state_indices"]]}, path=where)
        if len(set(m.cameras.values())) != len(m.cameras):
            raise PretrainedError(f"{where}: cameras: two checkpoint cameras read the same env camera")
        return m

    def env_cameras(self, checkpoint_cameras: list[str], all_required: bool) -> list[str]:
        """The env cameras in the checkpoint's camera order. all_required: every checkpoint
        camera must be mapped (LeRobot); else unmapped ones are masked slots (openpi)."""
        unknown = [c for c in self.cameras if c not in checkpoint_cameras]
        if unknown:
            raise PretrainedError(f"{self.path}: camera {unknown[0]!r} is not an input of the checkpoint; "
                                  f"it has {checkpoint_cameras}")
        unmapped = [c for c in checkpoint_cameras if c not in self.cameras]
        if all_required and unmapped:
            raise PretrainedError(f"{self.path}: checkpoint camera {unmapped[0]!r} has no env camera in the "
                                  f"input map ({len(unmapped)} unmapped)")
        return [self.cameras[c] for c in checkpoint_cameras if c in self.cameras]

    def check_env(self, spec: Any) -> None:
        """The env (a sims EnvSpec) renders every mapped camera and has the state / action widths."""
        missing = [c for c in self.cameras.values() if c not in spec.cameras]
        if missing:
            raise PretrainedError(f"{self.path}: env camera {missing[0]!r} is not rendered by the env "
                                  f"(it has {list(spec.cameras)}; set env.obs_mode=rgb and env.cameras)")
        if self.state_indices and max(self.state_indices) >= spec.state_dim:
            raise PretrainedError(f"{self.path}: state_indices reach {max(self.state_indices)}, the env's state "
                                  f"has {spec.state_dim} dims")
        if self.action_dim != spec.action_dim:
            raise PretrainedError(f"{self.path}: action_dim {self.action_dim}, the env's actions have "
                                  f"{spec.action_dim} dims")
