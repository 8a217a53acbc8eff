"""WarpWorlds: B copies of one MuJoCo model on a warp device (MuJoCo Warp's model and data), the
plumbing WarpVecEnv (warp_env.py) steps and draws through.

It keeps warp's work ordered with torch's (a warp stream per CUDA device), captures the physics
substeps once as a graph and replays it, and ray-traces frames of every world from a few
cameras (one render context, and its captured graph, per image size and camera set). The
worlds' arrays are read and written by the env as torch views (`view`), without a copy.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import mujoco
import torch

NCONMAX = 48  # contacts per world: two boxes on a plane and between the fingers, with room
NJMAX = 256  # constraint rows per world (pyramidal friction cones, joint limits, the finger equality)


def import_warp():
    """Import warp with its kernel cache beside the interpreter's packages (the venv), unless the
    user set WARP_CACHE_PATH: kernels compile once per venv, not once per process."""
    os.environ.setdefault("WARP_CACHE_PATH", str(Path(sys.prefix) / "warp-cache"))
    import warp as wp

    wp.config.quiet = True
    wp.init()
    return wp


class WarpWorlds:
    """`num_worlds` worlds of `model` on `device` (torch.device: cpu, or cuda with its index).
    batched: model fields with a value per world {name: num_worlds} (geom_rgba, DR's fields)."""

    def __init__(self, model: mujoco.MjModel, num_worlds: int, device: torch.device, batched: dict[str, int]):
        self.model, self.num_worlds, self.device = model, num_worlds, device
        self.wp = wp = import_warp()
        import mujoco_warp as mjw

        self.mjw = mjw
        self._wdev = "cpu" if device.type == "cpu" else f"cuda:{device.index}"
        self._stream = wp.Stream(self._wdev) if device.type == "cuda" else None
        with self.on_warp():
            self.m = mjw.put_model(model, batch_sizes=batched)
            self.d = mjw.put_data(model, mujoco.MjData(model), nworld=num_worlds, nconmax=NCONMAX, njmax=NJMAX)
        self._graph = None
        self._contexts: dict[tuple[tuple[int, int], tuple[str, ...]], Any] = {}

    def view(self, array: Any) -> torch.Tensor:
        """A torch view, without a copy, of a warp array of the model or data (e.g. d.qpos)."""
        return self.wp.to_torch(array)

    @contextlib.contextmanager
    def on_warp(self) -> Iterator[None]:
        """Run warp work on this device. On CUDA, warp's stream waits for torch's current stream
        before and torch's waits for warp's after, so torch ops and kernels stay ordered."""
        wp = self.wp
        if self._stream is None:
            with wp.ScopedDevice(self._wdev):
                yield
            return
        caller = wp.stream_from_torch(torch.cuda.current_stream(self.device))
        self._stream.wait_stream(caller)
        with wp.ScopedStream(self._stream):
            yield
        caller.wait_stream(self._stream)

    def physics(self, substeps: int) -> None:
        """`substeps` physics steps of every world: one graph launch after the first call (a CUDA
        graph on a GPU; on warp's CPU device a recorded graph, which saves the launch overhead)."""
        wp, mjw = self.wp, self.mjw
        with self.on_warp():
            if self._graph is None:
                for _ in range(substeps):  # compiles and loads the kernels outside the capture
                    mjw.step(self.m, self.d)
                with wp.ScopedCapture(stream=self._stream) as cap:
                    for _ in range(substeps):
                        mjw.step(self.m, self.d)
                self._graph = cap.graph
            else:
                wp.capture_launch(self._graph, stream=self._stream)

    def reset(self, mask: torch.Tensor) -> None:
        """Reset the data of the worlds of bool mask [B] (on the device) to the model's defaults."""
        with self.on_warp():
            self.mjw.reset_data(self.m, self.d, reset=self.wp.from_torch(mask))

    def set_const(self) -> None:
        """Recompute the model's derived constants of every world (after body masses changed)."""
        with self.on_warp():
            self.mjw.set_const(self.m, self.d)

    def _draw(self, rc: Any) -> None:
        """Positions of every body, camera and light from qpos, then one ray-traced frame per world
        and active camera into rc's buffer."""
        mjw = self.mjw
        mjw.kinematics(self.m, self.d)
        mjw.camlight(self.m, self.d)
        mjw.refit_bvh(self.m, self.d, rc)
        mjw.render(self.m, self.d, rc)

    def frames(self, size: tuple[int, int], cameras: tuple[str, ...]) -> dict[str, torch.Tensor]:
        """uint8 [B, H, W, 3] frames of every world from each camera (views of the tracer's buffer)."""
        key = (size, cameras)
        if key not in self._contexts:
            with self.on_warp():
                rc = self.mjw.create_render_context(self.model, nworld=self.num_worlds, cam_res=(size[1], size[0]),
                                                    render_rgb=True, render_depth=False, cam_active=list(cameras),
                                                    use_shadows=False)
            ids = [mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, c) for c in cameras]
            adr = rc.rgb_adr.numpy()
            graph = None
            with self.on_warp():
                self._draw(rc)  # loads the kernels outside the capture
                try:
                    with self.wp.ScopedCapture(stream=self._stream) as cap:
                        self._draw(rc)
                    graph = cap.graph
                except Exception:  # noqa: BLE001 - a warp build whose BVH refit cannot be captured: launch each call
                    graph = None
            self._contexts[key] = (rc, {c: int(adr[i]) for c, i in zip(cameras, ids)}, graph)
        rc, adr, graph = self._contexts[key]
        with self.on_warp():
            if graph is None:
                self._draw(rc)
            else:
                self.wp.capture_launch(graph, stream=self._stream)
        packed = self.wp.to_torch(rc.rgb_data)  # uint32 [B, pixels of all cameras], bytes B, G, R, A
        h, w = size
        return {c: packed[:, a:a + h * w].view(torch.uint8).view(-1, h, w, 4)[..., [2, 1, 0]]
                for c, a in adr.items()}

    def close(self) -> None:
        self._contexts.clear()
        self._graph = None
