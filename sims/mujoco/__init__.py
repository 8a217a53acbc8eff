"""MuJoCo tabletop backend: batched envs on `mujoco.batch`, headless EGL rendering."""

import os

# Rendering is headless: pick EGL before anything imports mujoco's GL backends.
os.environ.setdefault("MUJOCO_GL", "egl")
