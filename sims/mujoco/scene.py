"""Tabletop scene written from primitives as MJCF: table, floating parallel gripper, cube, markers.

World frame: the table top is the plane z = 0, x points away from the "front" camera's
left, z up. The gripper's three slide joints measure the tool centre point (TCP, the point
between the fingertips' centres) directly in world coordinates, so their joint ranges are
the workspace. The two fingers slide along x, each measuring its outward travel from
closed; a fixed tendon (their sum) is the finger gap, driven by one position actuator, and
a joint equality keeps them symmetric.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

# Geometry constants shared with the env and the tasks (metres).
CUBE_HALF = 0.02  # 4 cm cube
TABLE_HALF = (0.35, 0.30)  # table top half extents in x, y
WORKSPACE_LOW = (-0.25, -0.20, 0.015)  # TCP x, y, z lower limits
WORKSPACE_HIGH = (0.25, 0.20, 0.30)
FINGER_MAX = 0.045  # travel of each finger: gap in [0, 0.09]
FINGER_HALF = (0.005, 0.015, 0.025)  # finger box half sizes (x thickness, y width, z length)
FINGER_Z = 0.015  # finger centre above the TCP: fingertips reach 1 cm below the TCP
TARGET_HALF = 0.03  # target square half size
MARKER_RADIUS = 0.012  # goal sphere radius (default of SceneOptions.sphere_radius)
POLE_RADIUS = 0.008  # visual pole under a goal sphere (SceneOptions.pole)
POLE_LENGTH = 0.35  # reaches below the table top from any goal height in the workspace

# Named palette: colour name -> RGBA. Tasks index it by position.
PALETTE: dict[str, tuple[float, float, float, float]] = {
    "red": (0.85, 0.12, 0.10, 1.0),
    "green": (0.15, 0.70, 0.20, 1.0),
    "blue": (0.12, 0.30, 0.90, 1.0),
    "yellow": (0.95, 0.85, 0.10, 1.0),
    "purple": (0.60, 0.20, 0.75, 1.0),
    "orange": (0.98, 0.50, 0.05, 1.0),
}
COLOR_NAMES: tuple[str, ...] = tuple(PALETTE)
COLOR_RGBA = np.array([PALETTE[n] for n in COLOR_NAMES], dtype=np.float32)  # [C, 4]


@dataclass(frozen=True)
class SceneOptions:
    """What a task puts on the table.

    cube: include one free 4 cm cube ("cube" body, "cube" joint and geom).
    second_cube: include a second one ("cube_b" body, joint and geom; with cube).
    markers: "square" (flat target square on the table, mocap body "target"), "sphere"
      (floating goal point, mocap body "goal"), "target_sphere" (a second floating point in
      place of the square, mocap body "target"); visual only (contype/conaffinity 0).
    pole: stand each sphere on a thin vertical pole down into the table, so that its height
      and its position over the table are visible from a camera above the table (visual only:
      physics is unchanged).
    goal_rgba / target_rgba: colours of the "sphere" and "target_sphere" markers (and poles).
    sphere_radius: of the sphere markers (visual only; success radii are the tasks' own).
    timestep: physics step (s).
    image_size: largest (H, W) rendered, to size the offscreen buffer (tiled renders use
      a grid of them).
    """

    cube: bool = True
    second_cube: bool = False
    markers: tuple[str, ...] = ("square",)
    pole: bool = False
    goal_rgba: tuple[float, float, float, float] = (0.1, 0.9, 0.2, 0.6)
    target_rgba: tuple[float, float, float, float] = PALETTE["blue"]
    sphere_radius: float = MARKER_RADIUS
    timestep: float = 0.005
    image_size: tuple[int, int] = (64, 64)
    cameras: tuple[str, ...] = ("front", "wrist")


def look_at(pos: tuple[float, float, float], target: tuple[float, float, float]) -> str:
    """MJCF xyaxes of a camera at pos looking at target with world z up."""
    p, t = np.asarray(pos, float), np.asarray(target, float)
    fwd = (t - p) / np.linalg.norm(t - p)
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    return " ".join(f"{v:.5f}" for v in (*right, *up))


def _fmt(*values: float) -> str:
    return " ".join(f"{v:g}" for v in values)


def _gripper_xml() -> str:
    lo, hi = WORKSPACE_LOW, WORKSPACE_HIGH
    fx, fy, fz = FINGER_HALF
    fingers = []
    for side, sign in (("left", -1.0), ("right", 1.0)):
        fingers.append(f"""
      <body name="finger_{side}" pos="0 0 {FINGER_Z:g}" gravcomp="1">
        <joint name="finger_{side}" type="slide" axis="{sign:g} 0 0" range="0 {FINGER_MAX:g}"
               armature="0.1" damping="15"/>
        <geom name="finger_{side}" type="box" class="pad" pos="{sign * fx:g} 0 0"
              size="{_fmt(fx, fy, fz)}" mass="0.02" rgba="0.25 0.25 0.28 1"/>
      </body>""")
    return f"""
    <body name="gripper" pos="0 0 0" gravcomp="1">
      <joint name="x" type="slide" axis="1 0 0" range="{lo[0]:g} {hi[0]:g}" damping="5"/>
      <joint name="y" type="slide" axis="0 1 0" range="{lo[1]:g} {hi[1]:g}" damping="5"/>
      <joint name="z" type="slide" axis="0 0 1" range="{lo[2]:g} {hi[2]:g}" damping="5"/>
      <site name="tcp" size="0.004" rgba="1 0 0 0" group="3"/>
      <geom name="palm" type="box" pos="0 0 0.05" size="0.06 0.018 0.01" mass="0.3"
            rgba="0.55 0.56 0.6 1"/>
      <geom name="wrist" type="cylinder" class="visual" pos="0 0 0.1" size="0.015 0.04"
            rgba="0.55 0.56 0.6 1"/>
      <camera name="wrist" pos="0 -0.08 0.07" xyaxes="{look_at((0, -0.08, 0.07), (0, 0, -0.02))}"
              fovy="75"/>{''.join(fingers)}
    </body>"""


def _sphere_xml(name: str, rgba: tuple[float, ...], pole: bool, radius: float) -> str:
    """A mocap body `name` holding a visual sphere (geom `name`) and optionally a pole below it."""
    stick = ""
    if pole:
        stick = f"""
      <geom name="{name}_pole" type="cylinder" class="visual" fromto="0 0 0 0 0 {-POLE_LENGTH:g}"
            size="{POLE_RADIUS:g}" rgba="{_fmt(*rgba[:3])} 1"/>"""
    return f"""
    <body name="{name}" mocap="true" pos="0 0 0.1">
      <geom name="{name}" type="sphere" class="visual" size="{radius:g}"
            rgba="{_fmt(*rgba)}"/>{stick}
    </body>"""


def build_mjcf(opts: SceneOptions) -> str:
    """The scene's MJCF text."""
    h, w = opts.image_size
    off_w, off_h = max(1024, w), max(1024, h)  # room for a grid of tiles
    tx, ty = TABLE_HALF
    cube = ""
    if opts.cube:
        c = CUBE_HALF
        cube = f"""
    <body name="cube" pos="0 0 {c:g}">
      <freejoint name="cube"/>
      <geom name="cube" type="box" size="{_fmt(c, c, c)}" mass="0.05" friction="1 0.01 0.001"
            rgba="0.85 0.12 0.1 1"/>
    </body>"""
        if opts.second_cube:
            cube += f"""
    <body name="cube_b" pos="0.1 0.1 {c:g}">
      <freejoint name="cube_b"/>
      <geom name="cube_b" type="box" size="{_fmt(c, c, c)}" mass="0.05" friction="1 0.01 0.001"
            rgba="0.12 0.3 0.9 1"/>
    </body>"""
    markers = ""
    if "square" in opts.markers and "target_sphere" in opts.markers:
        raise ValueError("markers: 'square' and 'target_sphere' are both the mocap body 'target'")
    if "square" in opts.markers:
        markers += f"""
    <body name="target" mocap="true" pos="0.1 0 0">
      <geom name="target" type="box" class="visual" pos="0 0 0.0006"
            size="{_fmt(TARGET_HALF, TARGET_HALF, 0.0005)}" rgba="0.15 0.7 0.2 1"/>
    </body>"""
    if "target_sphere" in opts.markers:
        markers += _sphere_xml("target", opts.target_rgba, opts.pole, opts.sphere_radius)
    if "sphere" in opts.markers:
        markers += _sphere_xml("goal", opts.goal_rgba, opts.pole, opts.sphere_radius)
    cameras = ""
    if "front" in opts.cameras:
        pos = (0.2, -0.5, 0.4)
        cameras += f"""
    <camera name="front" pos="{_fmt(*pos)}" xyaxes="{look_at(pos, (0.0, 0.0, 0.03))}" fovy="45"/>"""
    lo, hi = WORKSPACE_LOW, WORKSPACE_HIGH
    return f"""
<mujoco model="tabletop">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{opts.timestep:g}" integrator="implicitfast" cone="pyramidal"/>
  <visual>
    <global offwidth="{off_w}" offheight="{off_h}"/>
    <quality shadowsize="0" offsamples="0"/>
    <headlight ambient="0.45 0.45 0.45" diffuse="0.5 0.5 0.5" specular="0 0 0"/>
    <rgba haze="0.6 0.7 0.8 1"/>
  </visual>
  <default>
    <geom solref="0.01 1" solimp="0.95 0.99 0.001" friction="0.8 0.01 0.001"/>
    <default class="visual">
      <geom contype="0" conaffinity="0" group="1" mass="0"/>
    </default>
    <default class="pad">
      <geom friction="1.5 0.02 0.002" condim="4"/>
    </default>
  </default>
  <worldbody>
    <light name="top" pos="0 0 1.5" dir="0 0 -1" directional="true" castshadow="false"
           diffuse="0.4 0.4 0.4"/>
    <geom name="table" type="plane" size="{_fmt(tx, ty, 0.01)}" group="3"/>
    <geom name="table_top" type="box" class="visual" pos="0 0 -0.025"
          size="{_fmt(tx, ty, 0.025)}" rgba="0.62 0.5 0.38 1"/>
    <geom name="floor" type="box" class="visual" pos="0 0 -0.76" size="1.5 1.5 0.01"
          rgba="0.3 0.32 0.35 1"/>{cameras}{_gripper_xml()}{cube}{markers}
  </worldbody>
  <contact>
    <exclude body1="finger_left" body2="finger_right"/>
  </contact>
  <tendon>
    <fixed name="gap">
      <joint joint="finger_left" coef="1"/>
      <joint joint="finger_right" coef="1"/>
    </fixed>
  </tendon>
  <equality>
    <joint joint1="finger_left" joint2="finger_right" polycoef="0 1 0 0 0"
           solref="0.005 1"/>
  </equality>
  <actuator>
    <position name="x" joint="x" kp="2000" dampratio="1" ctrlrange="{lo[0]:g} {hi[0]:g}"
              forcerange="-60 60"/>
    <position name="y" joint="y" kp="2000" dampratio="1" ctrlrange="{lo[1]:g} {hi[1]:g}"
              forcerange="-60 60"/>
    <position name="z" joint="z" kp="2000" dampratio="1" ctrlrange="{lo[2]:g} {hi[2]:g}"
              forcerange="-60 60"/>
    <position name="gap" tendon="gap" kp="200" dampratio="1" ctrlrange="0 {2 * FINGER_MAX:g}"
              forcerange="-12 12"/>
  </actuator>
</mujoco>
"""


def build_model(opts: SceneOptions) -> mujoco.MjModel:
    """Compile the scene."""
    return mujoco.MjModel.from_xml_string(build_mjcf(opts))
