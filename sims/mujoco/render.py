"""Headless batch rendering of a Batch's simulations, many envs per GL read-back.

Each env is drawn into its own tile (viewport) of the offscreen buffer; one glReadPixels
returns a whole grid of tiles. Shadows, reflections, skybox and fog are off (shadows cost
most of a software-rendered frame). Per-env colours are written into the scene's geoms
after `mjv_updateScene`, so one model serves every env.
"""

from __future__ import annotations

import copy
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from mujoco.batch import Batch  # noqa: E402


def _gl_context(width: int, height: int):
    """An offscreen GL context of the configured backend (EGL by default)."""
    from mujoco import gl_context

    cls = getattr(gl_context, "GLContext", None)
    try:
        if cls is None:
            raise ImportError("no GL backend")
        ctx = cls(width, height)
    except Exception:  # mujoco imported before MUJOCO_GL was set: try EGL directly
        from mujoco.egl import GLContext

        ctx = GLContext(width, height)
    ctx.make_current()
    return ctx


class BatchRenderer:
    """Renders chosen envs of a Batch from a fixed camera into uint8 [n, H, W, 3] arrays."""

    def __init__(self, model: mujoco.MjModel):
        self.model = copy.copy(model)  # our own: per-env fields are written into it to draw an env
        self._nominal: dict[str, np.ndarray] = {}  # field name -> the model's value
        self.buf_w = int(model.vis.global_.offwidth)
        self.buf_h = int(model.vis.global_.offheight)
        self._ctx = _gl_context(self.buf_w, self.buf_h)
        self._con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
        self._scn = mujoco.MjvScene(model, maxgeom=256)
        for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION,
                     mujoco.mjtRndFlag.mjRND_SKYBOX, mujoco.mjtRndFlag.mjRND_FOG):
            self._scn.flags[flag] = 0
        self._opt = mujoco.MjvOption()
        self._pert = mujoco.MjvPerturb()
        self._cam = mujoco.MjvCamera()
        self._cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._data = mujoco.MjData(model)
        self._pixels = np.empty((self.buf_h, self.buf_w, 3), np.uint8)
        self._slots: dict[int, int] = {}  # model geom id -> index in the scene's geoms
        self._nscene = -1

    def camera_id(self, name: str) -> int:
        cid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, name)
        if cid < 0:
            raise KeyError(name)
        return cid

    def _slot(self, geom_id: int) -> int:
        """Scene index of a model geom; the layout is fixed for a model, options and camera."""
        scn = self._scn
        if scn.ngeom != self._nscene:
            self._slots = {}
            self._nscene = scn.ngeom
        idx = self._slots.get(geom_id)
        if idx is None or scn.geoms[idx].objid != geom_id:
            idx = -1
            for k in range(scn.ngeom):
                g = scn.geoms[k]
                if g.objtype == mujoco.mjtObj.mjOBJ_GEOM and g.objid == geom_id:
                    idx = k
                    break
            self._slots[geom_id] = idx
        return idx

    def _field(self, name: str) -> np.ndarray:
        """The render model's array `name` ("cam_pos", "vis.headlight.diffuse", ...), a live view."""
        obj = self.model
        *path, leaf = name.split(".")
        for part in path:
            obj = getattr(obj, part)
        arr = getattr(obj, leaf)
        if name not in self._nominal:
            self._nominal[name] = np.array(arr)
        return arr

    def render(self, batch: Batch, ids: np.ndarray, camera: int, size: tuple[int, int],
               colors: dict[int, np.ndarray] | None = None,
               fields: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """Frames uint8 [n, H, W, 3] of simulations ids [n] from camera (id) at size (H, W).

        colors: model geom id -> float rgba [n, 4], the per-env colour of that geom.
        fields: model field name -> per-env values [n, *field shape] written into the render
          model before drawing each env (cameras, lights: domain randomisation), then restored.
        """
        h, w = size
        if h > self.buf_h or w > self.buf_w:
            raise ValueError(f"image size {size} exceeds the offscreen buffer "
                             f"({self.buf_h}, {self.buf_w})")
        ids = np.asarray(ids, np.int64)
        out = np.empty((len(ids), h, w, 3), np.uint8)
        cols, rows = self.buf_w // w, self.buf_h // h
        per = cols * rows
        self._ctx.make_current()
        self._cam.fixedcamid = camera
        m, d, scn = self.model, self._data, self._scn
        colors, fields = colors or {}, fields or {}
        views = {name: self._field(name) for name in fields}
        for start in range(0, len(ids), per):
            chunk = ids[start:start + per]
            for j, sim in enumerate(chunk):
                batch.get_data(int(sim), d)
                for name, v in fields.items():
                    views[name][...] = v[start + j]
                mujoco.mj_kinematics(m, d)
                mujoco.mj_camlight(m, d)
                mujoco.mjv_updateScene(m, d, self._opt, self._pert, self._cam,
                                       mujoco.mjtCatBit.mjCAT_ALL, scn)
                for gid, rgba in colors.items():
                    slot = self._slot(gid)
                    if slot >= 0:
                        scn.geoms[slot].rgba[:] = rgba[start + j]
                rect = mujoco.MjrRect((j % cols) * w, (j // cols) * h, w, h)
                mujoco.mjr_render(rect, scn, self._con)
            used_rows = (len(chunk) + cols - 1) // cols
            ph = used_rows * h
            pix = self._pixels[:ph]
            mujoco.mjr_readPixels(pix, None, mujoco.MjrRect(0, 0, self.buf_w, ph), self._con)
            for j in range(len(chunk)):
                r, c = j // cols, j % cols
                # GL rows start at the bottom: flip each tile.
                out[start + j] = pix[r * h:(r + 1) * h, c * w:(c + 1) * w][::-1]
        for name, view in views.items():
            view[...] = self._nominal[name]
        return out

    def close(self) -> None:
        if self._con is not None:
            # mjr_freeContext deletes GL objects of the *current* context: make ours
            # current first, or another renderer's buffers (same ids) get deleted.
            if self._ctx is not None:
                self._ctx.make_current()
            self._con.free()
            self._con = None
        if self._ctx is not None:
            self._ctx.free()
            self._ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
