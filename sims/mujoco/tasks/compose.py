"""Compose: a compositional language suite in one scene: verb x colour, several phrasings each.

Scene (the same for every variant): two 4 cm cubes of different colours, a green target square
on the table and a goal ball floating above it, the floating gripper. The instruction names a verb
and the colour of one cube; only the text says which of the 4 verbs x 2 cubes it is:

  reach  "reach the red cube"              the closed gripper hovers over the cube (TCP within
                                           2 cm of the point 8 cm above its centre and slower
                                           than 5 cm/s, gap < 1 cm)
  push   "push the red cube onto the square"   the cube slid onto the square (centre within
                                           2.5 cm in xy, on the table, not held, fingers closed)
  pick   "pick up the red cube and lift it to the ball"   held, within 2.5 cm of the ball
  place  "place the red cube on the square"    resting on the square, released (fingers open), still

Variants: 4 verbs x 4 cube colours (red, blue, yellow, purple) = 16, three phrasings each
(PHRASES). HELD_OUT, 4 combinations that no demo and no RL episode of `Compose` shows (each verb
and each colour appears in 3 seen ones): `ComposeHeldOut` runs only them, in the same scene and
observation layout, for evaluating generalisation to unseen combinations.

The four success events are mutually exclusive along the experts' paths (gripper closed and high
for reach, closed and on the table for push, holding the cube at the ball for pick, open for
place), and the same events on the other cube, or a cube off the table, end the episode as a
failure: a policy succeeds only by doing the one variant asked. Blind to the text but not to the
scene, a policy still learns something from the cubes' colours: the named cube has the variant's
colour, so the pair in the scene rules out the variants of the other two colours. The best such
policy, `text_blind_chance(variants)`, succeeds in 1/6 of Compose's episodes and 1/2 of
ComposeHeldOut's (where each colour has exactly one variant): that, not 1/8, is the chance level
(tests/sims/test_sims_compose.py checks it against the sampler and with blind experts). 60 steps.
Progress (base.py's rewards): the verb's own staged progress (Reach's, PushCube's, PickCube's,
PlaceCube's) on the named cube.

privileged [49] (COMPOSE_LAYOUT): state (9); cube a and cube b (position, quaternion, velocity,
angular velocity: 13 each, in scene order, not in instruction order); the square's centre and the
ball's; the verb one-hot (4) and which cube is named (2): the instruction's content, for critics
and experts; whether each cube is grasped (2).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
from array_api_compat import array_namespace
from array_api_compat import device as array_device

from sims.mujoco.control import expert_action
from sims.mujoco.handles import SimView
from sims.mujoco.scene import COLOR_NAMES, CUBE_HALF, FINGER_MAX, SceneOptions
from sims.mujoco.tasks.base import CUBE_PRIV_DIM, Episode, Task, copy, norm, off_table, shaped, state_obs, yaw_quat
from sims.mujoco.tasks.grasping import is_grasped
from sims.mujoco.tasks.pick_cube import PickCube
from sims.mujoco.tasks.place_cube import PlaceCube
from sims.mujoco.tasks.push_cube import PushCube
from sims.mujoco.tasks.registry import register_task

VERBS = ("reach", "push", "pick", "place")
COLORS = ("red", "blue", "yellow", "purple")  # the cubes' colours (the square is green)
PHRASES: dict[str, tuple[str, ...]] = {
    "reach": ("reach the {c} cube", "move the closed gripper above the {c} cube", "hover over the {c} cube"),
    "push": ("push the {c} cube onto the square", "slide the {c} cube to the green square",
             "shove the {c} cube onto the green square"),
    "pick": ("pick up the {c} cube and lift it to the ball", "lift the {c} cube up to the ball",
             "grab the {c} cube and raise it to the ball"),
    "place": ("place the {c} cube on the square", "put the {c} cube down on the green square",
              "set the {c} cube on the square and let go"),
}
VARIANTS = tuple((v, c) for v in VERBS for c in COLORS)  # 16
HELD_OUT = (("reach", "yellow"), ("push", "purple"), ("pick", "red"), ("place", "blue"))  # a Latin square
SEEN = tuple(vc for vc in VARIANTS if vc not in HELD_OUT)  # 12

HOVER_Z = 0.08  # reach: the TCP's point above the cube centre (m)
RADIUS = 0.025
COMPOSE_LAYOUT: dict[str, slice] = {
    "tcp": slice(0, 3), "tcp_vel": slice(3, 6), "gap": slice(6, 7), "gap_vel": slice(7, 8), "grip_cmd": slice(8, 9),
    "cube_a": slice(9, 12), "cube_a_quat": slice(12, 16), "cube_a_vel": slice(16, 19), "cube_a_angvel": slice(19, 22),
    "cube_b": slice(22, 25), "cube_b_quat": slice(25, 29), "cube_b_vel": slice(29, 32), "cube_b_angvel": slice(32, 35),
    "square": slice(35, 38), "ball": slice(38, 41), "verb": slice(41, 45), "named": slice(45, 47),
    "grasped": slice(47, 49),
}
COMPOSE_PRIV_DIM = 49


def _seg_dist(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Distance [n] from points p to segments a -> b (xy or xyz, [n, d] each)."""
    ab = b - a
    t = np.clip(np.sum((p - a) * ab, axis=1) / np.maximum(np.sum(ab * ab, axis=1), 1e-12), 0.0, 1.0)
    return np.linalg.norm(a + t[:, None] * ab - p, axis=1)


def _cube_view(s: SimView, slot: np.ndarray) -> SimView:
    """s with the cube of `slot` (int [n]: 0 cube a, 1 cube b) as its `cube`."""
    xp, b = array_namespace(s.tcp), (slot == 1)[:, None]
    return dataclasses.replace(s, cube=xp.where(b, s.cube_b, s.cube), cube_quat=xp.where(b, s.cube_b_quat, s.cube_quat),
                               cube_vel=xp.where(b, s.cube_b_vel, s.cube_vel),
                               cube_angvel=xp.where(b, s.cube_b_angvel, s.cube_angvel))


def _above(p, dz: float):
    """p [n, 3] raised by dz (m)."""
    out = copy(p)
    out[:, 2] += dz
    return out


def events(s: SimView, grasped: np.ndarray) -> np.ndarray:
    """bool [n, 4]: the success event of each verb (VERBS' order) on s's `cube`."""
    cube, sq = s.cube, s.target
    hover = _above(cube, HOVER_Z)
    on_square = (norm(cube[:, :2] - sq[:, :2]) < RADIUS) & (cube[:, 2] < CUBE_HALF + 0.005)
    released = (s.gap > 2 * CUBE_HALF + 0.01) & ~grasped
    return array_namespace(cube).stack([
        (norm(s.tcp - hover) < 0.02) & (s.gap < 0.01) & (norm(s.tcp_vel) < 0.05),
        on_square & ~grasped & (s.gap < 0.015),
        grasped & (norm(cube - s.goal) < RADIUS),
        on_square & released & (norm(s.cube_vel) < 0.05),
    ], axis=1)


@register_task("Compose")
class Compose(Task):
    variants: ClassVar[tuple[tuple[str, str], ...]] = SEEN
    max_episode_steps = 60
    privileged_dim = COMPOSE_PRIV_DIM
    layout = COMPOSE_LAYOUT
    differences = {}
    unit_quaternions = ("cube_a_quat", "cube_b_quat")
    scene = SceneOptions(cube=True, second_cube=True, markers=("square", "sphere"), pole=True,
                         goal_rgba=(0.95, 0.95, 0.95, 1.0))

    def _layout(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        tcp = np.stack([rng.uniform(-0.05, 0.05, n), rng.uniform(-0.05, 0.05, n), rng.uniform(0.12, 0.18, n)], axis=1)
        a, b, sq = (np.stack([rng.uniform(-lx, lx, n), rng.uniform(-ly, ly, n), np.full(n, z)], axis=1)
                    for lx, ly, z in ((0.13, 0.11, CUBE_HALF), (0.13, 0.11, CUBE_HALF), (0.15, 0.12, 0.0)))
        ball = np.stack([rng.uniform(-0.1, 0.1, n), rng.uniform(-0.1, 0.1, n), rng.uniform(0.10, 0.16, n)], axis=1)
        return {"tcp": tcp, "a": a, "b": b, "square": sq, "ball": ball}

    @staticmethod
    def _bad(L: dict[str, np.ndarray]) -> np.ndarray:
        """bool [n]: layouts where a cube or its path is in the way of the other's task."""
        a, b, sq, tcp = L["a"][:, :2], L["b"][:, :2], L["square"][:, :2], L["tcp"]
        bad = np.linalg.norm(a - b, axis=1) < 0.09
        for c, o in ((a, b), (b, a)):
            d = np.linalg.norm(sq - c, axis=1)
            u = (sq - c) / np.maximum(d, 1e-6)[:, None]
            bad |= (d < 0.10) | (d > 0.18)  # the square 10-18 cm from each cube
            bad |= _seg_dist(c - 0.07 * u, sq, o) < 0.075  # the push line (from behind the cube) clear
        hover = {k: np.concatenate([L[k][:, :2], np.full((len(a), 1), CUBE_HALF + HOVER_Z)], axis=1) for k in "ab"}
        bad |= _seg_dist(tcp, hover["a"], hover["b"]) < 0.05  # reaching one passes clear of the other
        bad |= _seg_dist(tcp, hover["b"], hover["a"]) < 0.05
        bad |= np.linalg.norm(L["ball"][:, :2] - sq, axis=1) < 0.08
        return bad

    def sample_episode(self, rng: np.random.Generator, n: int) -> Episode:
        L = self._layout(rng, n)
        while (bad := self._bad(L)).any():
            rows = np.flatnonzero(bad)
            for k, v in self._layout(rng, len(rows)).items():
                L[k][rows] = v
        var = rng.integers(0, len(self.variants), n)
        verb = np.array([VERBS.index(self.variants[k][0]) for k in var])
        color = np.array([COLOR_NAMES.index(self.variants[k][1]) for k in var])
        other = np.array([COLOR_NAMES.index(c) for c in COLORS])
        other = np.array([rng.choice(other[other != c]) for c in color]).reshape(n)
        named = rng.integers(0, 2, n)
        return {"tcp": L["tcp"], "gap": np.full(n, 2 * FINGER_MAX), "cube_pos": L["a"], "cube_b_pos": L["b"],
                "cube_quat": yaw_quat(rng.uniform(-0.3, 0.3, n)), "cube_b_quat": yaw_quat(rng.uniform(-0.3, 0.3, n)),
                "target": L["square"], "goal": L["ball"], "verb": verb, "named": named, "color": color,
                "cube_color": np.where(named == 0, color, other), "cube_b_color": np.where(named == 1, color, other),
                "phrase": rng.integers(0, 3, n)}

    def instruction(self, ep: Episode, i: int) -> str:
        return PHRASES[VERBS[ep["verb"][i]]][ep["phrase"][i]].format(c=COLOR_NAMES[ep["color"][i]])

    def label(self, ep: Episode, i: int) -> str:
        """"push red": the variant (per-variant success in logs and evaluations)."""
        return f"{VERBS[ep['verb'][i]]} {COLOR_NAMES[ep['color'][i]]}"

    def evaluate(self, s: SimView, ep: Episode) -> dict[str, np.ndarray]:
        xp, named, n = array_namespace(s.tcp), ep["named"], s.tcp.shape[0]
        sn, so = _cube_view(s, named), _cube_view(s, 1 - named)
        gn, go = is_grasped(sn), is_grasped(so)
        ev_n, ev_o = events(sn, gn), events(so, go)
        success = ev_n[xp.arange(n, device=array_device(s.tcp)), ep["verb"]]
        fail = (xp.any(ev_o, axis=1) | off_table(s.cube) | off_table(s.cube_b)) & ~success
        return {"success": success, "fail": fail, "grasped": gn, "grasped_a": xp.where(named == 0, gn, go),
                "grasped_b": xp.where(named == 1, gn, go),
                "dist_to_goal": norm(sn.cube[:, :2] - s.target[:, :2])}

    def progress(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        xp = array_namespace(s.tcp)
        sn = _cube_view(s, ep["named"])
        g = ev["grasped"]
        hover = _above(sn.cube, HOVER_Z)
        rest = copy(s.target)
        rest[:, 2] = CUBE_HALF
        on_sq = (norm(sn.cube[:, :2] - s.target[:, :2]) < RADIUS) & (sn.cube[:, 2] < CUBE_HALF + 0.005)
        by_verb = xp.stack([
            shaped(norm(s.tcp - hover)) * (0.5 + 0.5 * xp.astype(s.gap < 0.01, s.gap.dtype)),
            PushCube().progress(sn, ep, {"dist_to_goal": ev["dist_to_goal"]}),
            PickCube().progress(dataclasses.replace(sn, goal=s.goal), ep,
                                {"grasped": g, "dist_to_goal": norm(s.goal - sn.cube)}),
            PlaceCube().progress(sn, ep, {"grasped": g, "placed": on_sq,
                                          "dist_to_goal": norm(sn.cube - rest)}),
        ], axis=1)
        return by_verb[xp.arange(s.tcp.shape[0], device=array_device(s.tcp)), ep["verb"]]

    def privileged(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        xp, n, dev = array_namespace(s.tcp), s.tcp.shape[0], array_device(s.tcp)
        out = xp.zeros((n, COMPOSE_PRIV_DIM), dtype=xp.float32, device=dev)
        out[:, :9] = state_obs(s)
        for key, pos, quat, vel, ang in (("a", s.cube, s.cube_quat, s.cube_vel, s.cube_angvel),
                                         ("b", s.cube_b, s.cube_b_quat, s.cube_b_vel, s.cube_b_angvel)):
            L = COMPOSE_LAYOUT
            out[:, L[f"cube_{key}"]] = pos
            out[:, L[f"cube_{key}_quat"]] = quat * xp.where(quat[:, :1] < 0, -1.0, 1.0)
            out[:, L[f"cube_{key}_vel"]] = vel
            out[:, L[f"cube_{key}_angvel"]] = ang
        out[:, 35:38] = s.target
        out[:, 38:41] = s.goal
        rows = xp.arange(n, device=dev)
        out[rows, 41 + ep["verb"]] = 1.0
        out[rows, 45 + ep["named"]] = 1.0
        out[:, 47] = xp.astype(ev["grasped_a"], out.dtype)
        out[:, 48] = xp.astype(ev["grasped_b"], out.dtype)
        return out

    @staticmethod
    def expert(priv: np.ndarray) -> np.ndarray:
        """The verb's expert (Reach's line with the gripper closed, PushCube's, PickCube's,
        PlaceCube's) on the named cube, read from the verb and named columns."""
        L, n = COMPOSE_LAYOUT, len(priv)
        verb, named = np.argmax(priv[:, L["verb"]], axis=1), np.argmax(priv[:, L["named"]], axis=1)
        b = (named == 1)[:, None]
        tcp = priv[:, L["tcp"]]
        cube = np.where(b, priv[:, L["cube_b"]], priv[:, L["cube_a"]])
        c32 = np.zeros((n, CUBE_PRIV_DIM), np.float32)  # CUBE_LAYOUT of the named cube
        c32[:, :9] = priv[:, :9]
        c32[:, 9:22] = np.where(b, priv[:, 22:35], priv[:, 9:22])
        c32[:, 25:28] = cube - tcp
        c32[:, 31] = np.where(named == 1, priv[:, 48], priv[:, 47])
        square = priv[:, L["square"]].copy()
        square[:, 2] = CUBE_HALF
        acts = []
        for goal, expert in ((square, PushCube.expert), (priv[:, L["ball"]], PickCube.expert), (square, PlaceCube.expert)):
            c32[:, 22:25] = goal
            c32[:, 28:31] = goal - cube
            acts.append(expert(c32))
        hover = cube + np.array([0.0, 0.0, HOVER_Z])
        acts.insert(0, expert_action(hover - tcp, 1.0))
        return np.stack(acts, axis=1)[np.arange(n), verb]


def text_blind_chance(variants: tuple[tuple[str, str], ...]) -> float:
    """The success rate of the best policy that sees the scene (both cubes' colours) but not the
    instruction, executing any one variant perfectly, over sample_episode's draws: a variant
    uniform over `variants` names a cube of its colour, the other cube one of the other 3
    colours. A scene {x, y} comes from the n_x + n_y variants of colour x or y (n_c: variants
    of colour c), with probability (n_x + n_y) / (3 |V|), each of them equally likely given the
    scene, so the best guess wins 1 / (n_x + n_y) of it: summed, (pairs with n_x + n_y > 0) / (3 |V|)."""
    n = {c: sum(vc[1] == c for vc in variants) for c in COLORS}
    pairs = sum(1 for i, x in enumerate(COLORS) for y in COLORS[i + 1:] if n[x] + n[y] > 0)
    return pairs / (3 * len(variants))


def with_variant(priv: np.ndarray, verb: int, named: int) -> np.ndarray:
    """privileged [n, 49] with its verb and named-cube columns set to one variant for every row:
    what Compose.expert then does ignores the instruction (the blind policy of the tests)."""
    out = np.array(priv, copy=True)
    out[:, COMPOSE_LAYOUT["verb"]] = np.eye(4)[verb]
    out[:, COMPOSE_LAYOUT["named"]] = np.eye(2)[named]
    return out


@register_task("ComposeHeldOut")
class ComposeHeldOut(Compose):
    """Compose's 4 held-out combinations only (HELD_OUT): never in demos or RL of Compose."""

    variants = HELD_OUT

