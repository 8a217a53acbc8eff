"""Where the ManiSkill envs run: batched on a GPU, or single-env instances on CPU.

A backend holds B ManiSkill envs and speaks in rows (torch tensors, leading dim n):
  reset(ids, seeds, grouped) -> rows of the reset envs
  step(actions [n, A], ids)  -> rows of the stepped envs
where a row dict holds "ms_state" float32 [n, D] (ManiSkill's flattened "state" observation:
agent qpos, qvel, then the task's extras), "physics" float32 [n, P] (env.get_state()),
"progress" float32 [n] (ManiSkill's normalized dense reward at the current state),
"success"/"fail" bool [n], other info metrics [n], and "rgb_front" uint8 [n, H, W, 3] in rgb mode.

GpuBackend: one env with num_envs=B on physx_cuda. CPU: physx_cpu allows one env per ManiSkill
instance, so `LocalEnvs` holds k instances stepped one after the other, and `ProcBackend` spreads
them over worker processes (one `LocalEnvs` each) behind the same calls.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
from typing import Any

import numpy as np
import torch

from sims.vecenv import EnvError

Rows = dict[str, torch.Tensor]
CAMERA = "base_camera"  # ManiSkill's default task camera, our "front"


_PHYSX_GPU: list[str | None] = []  # cached physx_gpu_error()


def physx_gpu_error() -> str | None:
    """None when SAPIEN's GPU PhysX can start here; else one line saying why not. SAPIEN loads
    libPhysXGpu_64.so from ~/.sapien/physx/<version>/ and downloads it from github.com on first
    use: a machine without it and without that network cannot run physx_cuda
    (benchmarks/gpu_bundle.sh carries it to such machines)."""
    if not _PHYSX_GPU:
        import sapien.physx as physx

        try:
            physx.enable_gpu()
            _PHYSX_GPU.append(None)
        except Exception as e:  # noqa: BLE001 - requests / zipfile / OSError from SAPIEN's download
            where = f"~/.sapien/physx/{physx.version()}/libPhysXGpu_64.so"
            _PHYSX_GPU.append(f"SAPIEN's PhysX GPU library {where} is not on this machine and its download from "
                              f"github.com failed ({type(e).__name__}); unzip sapien-sim/physx-precompiled's "
                              f"release {physx.version()} linux-so.zip there (make gpu-bundle carries it)")
    return _PHYSX_GPU[0]


def _make(env_id: str, num_envs: int, opts: dict[str, Any]):
    """gym.make a ManiSkill env; ManiSkill errors become one-line EnvErrors."""
    import gymnasium as gym

    import mani_skill.envs  # noqa: F401  (registers the envs)

    kw = dict(num_envs=num_envs, obs_mode="rgb+state" if opts["rgb"] else "state",
              control_mode=opts["control_mode"], sim_backend=opts["sim_backend"],
              render_backend=opts["render_backend"], reward_mode="normalized_dense")
    if opts["rgb"]:
        h, w = opts["image_size"]
        kw["sensor_configs"] = dict(width=w, height=h)
    if opts.get("render_size"):
        h, w = opts["render_size"]
        kw.update(render_mode="rgb_array", human_render_camera_configs=dict(width=w, height=h))
    try:
        return gym.make(env_id, **kw)
    except Exception as e:  # noqa: BLE001 - SAPIEN raises RuntimeError/AssertionError
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise EnvError(f"task: ManiSkill could not make {env_id}: {msg}") from None


def _rows(env, obs: Any, info: dict, rgb: bool, progress: torch.Tensor | None = None) -> Rows:
    """Rows of all envs of one ManiSkill env from its flattened obs and info; progress: the
    normalized dense reward a step just computed (None: compute it for the current state)."""
    u = env.unwrapped
    state = obs["state"] if rgb else obs
    n = state.shape[0]
    out = {"ms_state": state.float(), "physics": u.get_state().float()}
    if rgb:
        out["rgb_front"] = obs["sensor_data"][CAMERA]["rgb"][..., :3].to(torch.uint8)
    if progress is None:
        zeros = torch.zeros(n, *u.single_action_space.shape, device=state.device)
        progress = u.compute_normalized_dense_reward(obs=obs, action=zeros, info=info)
    out["progress"] = progress.float().reshape(n)
    out["fail"] = torch.zeros(n, dtype=torch.bool, device=state.device)
    for k, v in info.items():
        if k == "elapsed_steps" or not torch.is_tensor(v) or v.shape[:1] != (n,) or v.dim() != 1:
            continue
        out[k] = v.bool() if v.dtype == torch.bool else v.float()
    return out


def spec_of(env) -> dict[str, Any]:
    u = env.unwrapped
    space = u.single_action_space
    from mani_skill.utils.registration import REGISTERED_ENVS

    grip = u.agent.controller.controllers["gripper"].config  # absolute finger targets, last action dim
    return {"action_dim": int(space.shape[0]), "low": float(space.low.min()), "high": float(space.high.max()),
            "max_episode_steps": int(REGISTERED_ENVS[u.spec.id].max_episode_steps),
            "control_hz": float(u.control_freq), "gripper_range": (float(grip.lower), float(grip.upper))}


class LocalEnvs:
    """k single ManiSkill envs (physx_cpu, num_envs=1) in this process."""

    def __init__(self, env_id: str, k: int, opts: dict[str, Any]):
        self.rgb = opts["rgb"]
        self.envs = [_make(env_id, 1, opts) for _ in range(k)]
        self._nominal: dict[int, dict] = {}  # env -> its physics before any change (_physics_of)

    def spec(self) -> dict[str, Any]:
        return spec_of(self.envs[0])

    def reset(self, ids: list[int], seeds: list[int]) -> dict[str, np.ndarray]:
        rows = []
        for i, s in zip(ids, seeds):
            obs, _ = self.envs[i].reset(seed=int(s))
            rows.append(_rows(self.envs[i], obs, self.envs[i].unwrapped.get_info(), self.rgb))
        return _stack(rows)

    def step(self, actions: np.ndarray, ids: list[int]) -> dict[str, np.ndarray]:
        rows = []
        for a, i in zip(actions, ids):
            obs, reward, _, _, info = self.envs[i].step(torch.from_numpy(a[None]))
            rows.append(_rows(self.envs[i], obs, info, self.rgb, progress=reward))
        return _stack(rows)

    def restore(self, states: np.ndarray, ids: list[int]) -> dict[str, np.ndarray]:
        """Set envs ids to physics states float32 [n, P] (env.set_state); their rows."""
        rows = []
        for st, i in zip(states, ids):
            u = self.envs[i].unwrapped
            u.set_state(torch.from_numpy(st[None]))
            info = u.get_info()
            rows.append(_rows(self.envs[i], u.get_obs(info), info, self.rgb))
        return _stack(rows)

    def render(self, ids: list[int]) -> np.ndarray:
        return np.concatenate([self.envs[i].render()[..., :3].cpu().numpy() for i in ids])

    def set_physics(self, values: dict[str, np.ndarray], ids: list[int]) -> dict:
        """Scale envs ids' physics from nominal (sims/maniskill/randomization.py): values is knob ->
        [n] with friction (every collision shape's friction), mass (mass and inertia of every
        loose object: dynamic, not kinematic, not the robot), actuator_gain (every robot joint
        drive's stiffness, its damping by the square root)."""
        for j, i in enumerate(ids):
            nominal = self._nominal.setdefault(i, _physics_of(self.envs[i].unwrapped))
            _set_physics(nominal, {k: float(v[j]) for k, v in values.items()})
        return {}

    def close(self) -> None:
        for e in self.envs:
            e.close()


def _physics_of(u) -> dict[str, list]:
    """The nominal physics of one physx_cpu ManiSkill env: (shape, static, dynamic, restitution)
    of every collision shape, (body, mass, inertia) of every loose object, (joint, stiffness,
    damping, force limit, mode) of every robot joint drive."""
    bodies = [b for a in u.scene.actors.values() for b in a._bodies]
    bodies += [b for link in u.agent.robot.links for b in link._bodies]
    shapes = [(s, s.physical_material) for b in bodies for s in b.collision_shapes]
    loose = [b for a in u.scene.actors.values() for b in a._bodies
             if hasattr(b, "kinematic") and not b.kinematic]
    joints = [j for joint in u.agent.robot.active_joints for j in joint._objs]
    return {"friction": [(s, m.static_friction, m.dynamic_friction, m.restitution) for s, m in shapes],
            "mass": [(b, b.mass, np.array(b.inertia)) for b in loose],
            "actuator_gain": [(j, j.stiffness, j.damping, j.force_limit, j.drive_mode) for j in joints]}


def _set_physics(nominal: dict[str, list], scale: dict[str, float]) -> None:
    import sapien

    if "friction" in scale:
        for shape, static, dynamic, restitution in nominal["friction"]:
            s = scale["friction"]
            shape.set_physical_material(sapien.physx.PhysxMaterial(static * s, dynamic * s, restitution))
    if "mass" in scale:
        for body, mass, inertia in nominal["mass"]:
            body.set_mass(mass * scale["mass"])
            body.set_inertia(inertia * scale["mass"])
    if "actuator_gain" in scale:
        s = scale["actuator_gain"]
        for joint, stiffness, damping, force_limit, mode in nominal["actuator_gain"]:
            joint.set_drive_properties(stiffness * s, damping * np.sqrt(s), force_limit, mode)


def _stack(rows: list[Rows]) -> dict[str, np.ndarray]:
    return {k: torch.cat([r[k] for r in rows]).cpu().numpy() for k in rows[0]}


def _worker(conn, env_id: str, k: int, opts: dict[str, Any]) -> None:
    from sims.maniskill import lavapipe

    # A Ctrl-C reaches this process too; the parent stops after its step and closes us. SIGTERM
    # stays: multiprocessing ends daemonic workers with it (sims/frames.py's workers ignore both).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lavapipe.configure()
    torch.set_num_threads(1)
    try:
        envs = LocalEnvs(env_id, k, opts)
        conn.send(("ok", envs.spec()))
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("err", str(e)))
        return
    while True:
        cmd, args = conn.recv()
        if cmd == "close":
            envs.close()
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", getattr(envs, cmd)(*args)))
        except Exception as e:  # noqa: BLE001
            conn.send(("err", f"{type(e).__name__}: {e}"))


class ProcBackend:
    """B single-env ManiSkill instances on CPU, spread over `workers` processes (0: in process)."""

    def __init__(self, env_id: str, num_envs: int, workers: int, opts: dict[str, Any]):
        self.num_envs = num_envs
        self.local = None
        if workers == 0:
            self.local = LocalEnvs(env_id, num_envs, opts)
            self.spec = self.local.spec()
            self.owner = [(0, i) for i in range(num_envs)]
            return
        workers = min(workers, num_envs)
        split = np.array_split(np.arange(num_envs), workers)
        self.owner = [(w, j) for w, part in enumerate(split) for j in range(len(part))]
        ctx = mp.get_context("spawn")  # no fork after torch and SAPIEN are loaded
        self.conns, self.procs = [], []
        for part in split:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, env_id, len(part), opts), daemon=True)
            p.start()
            self.conns.append(parent)
            self.procs.append(p)
        replies = [self._recv(c) for c in self.conns]
        self.spec = replies[0]

    def _recv(self, conn) -> Any:
        status, value = conn.recv()
        if status != "ok":
            self.close()
            raise EnvError(value.splitlines()[0] if value else "ManiSkill worker failed")
        return value

    def _call(self, cmd: str, ids: np.ndarray, extra: Any) -> dict[str, torch.Tensor]:
        """Run cmd on the envs ids (global, int64 [n]); rows come back in the order of ids."""
        if self.local is not None:
            args = (ids.tolist(), extra) if cmd == "reset" else (extra, ids.tolist())
            return _to_torch(getattr(self.local, cmd)(*args))
        per: dict[int, list[int]] = {}
        for n, i in enumerate(ids):
            per.setdefault(self.owner[i][0], []).append(n)
        for w, ns in per.items():
            local = [self.owner[ids[n]][1] for n in ns]
            if cmd == "reset":
                args = (local, [extra[n] for n in ns])
            elif isinstance(extra, dict):
                args = ({k: v[ns] for k, v in extra.items()}, local)
            else:
                args = (extra[ns], local)
            self.conns[w].send((cmd, args))
        parts = {w: self._recv(self.conns[w]) for w in per}
        out: dict[str, np.ndarray] = {}
        if cmd == "set_physics":
            return {}
        for w, ns in per.items():
            for key, v in parts[w].items():
                if key not in out:
                    out[key] = np.empty((len(ids), *v.shape[1:]), v.dtype)
                out[key][ns] = v
        return _to_torch(out)

    def reset(self, ids: np.ndarray, seeds: list[int], grouped: bool = True) -> Rows:
        return self._call("reset", ids, list(seeds))

    def step(self, actions: torch.Tensor, ids: np.ndarray) -> Rows:
        """actions float32 [n, A] for envs ids [n]."""
        return self._call("step", ids, actions.detach().cpu().numpy())

    def restore(self, states: torch.Tensor, ids: np.ndarray) -> Rows:
        """Set envs ids to physics states [n, P]; rows of ids."""
        return self._call("restore", ids, states.detach().cpu().numpy())

    def set_physics(self, ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Scale envs ids' friction, loose-object mass, joint drives: knob -> float64 [n]."""
        if self.local is not None:
            self.local.set_physics(values, ids.tolist())
        else:
            self._call("set_physics", np.asarray(ids), values)

    def render(self, ids: np.ndarray) -> torch.Tensor:
        if self.local is not None:
            return torch.from_numpy(self.local.render(ids.tolist()))
        frames = []
        for i in ids:  # rare (videos): one env at a time keeps the order simple
            w, j = self.owner[i]
            self.conns[w].send(("render", ([j],)))
            frames.append(self._recv(self.conns[w]))
        return torch.from_numpy(np.concatenate(frames))

    def close(self) -> None:
        if self.local is not None:
            self.local.close()
            self.local = None
        for c, p in zip(getattr(self, "conns", []), getattr(self, "procs", [])):
            try:
                c.send(("close", None))
                c.recv()
            except (OSError, EOFError, BrokenPipeError):
                pass
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self.conns, self.procs = [], []


def _to_torch(rows: dict[str, np.ndarray]) -> Rows:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in rows.items()}


class GpuBackend:
    """One ManiSkill env with num_envs=B on physx_cuda; rows stay on the GPU."""

    def __init__(self, env_id: str, num_envs: int, opts: dict[str, Any]):
        self.num_envs = num_envs
        self.rgb = opts["rgb"]
        self.env = _make(env_id, num_envs, opts)
        self.spec = spec_of(self.env)
        self.device = self.env.unwrapped.device
        self._last: Rows | None = None

    def reset(self, ids: np.ndarray, seeds: list[int], grouped: bool = True) -> Rows:
        """grouped: one reset call per distinct seed (equal seeds, equal states, as on CPU);
        otherwise one call for all ids seeded with seeds[0] (auto-resets)."""
        groups = ([(s, [i for i, t in zip(ids, seeds) if t == s]) for s in dict.fromkeys(seeds)]
                  if grouped else [(seeds[0], list(ids))])
        for s, members in groups:
            idx = torch.as_tensor(members, dtype=torch.long, device=self.device)
            obs, _ = self.env.reset(seed=int(s), options={"env_idx": idx})
        rows = _rows(self.env, obs, self.env.unwrapped.get_info(), self.rgb)
        sel = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        return {k: v[sel] for k, v in rows.items()}

    def step(self, actions: torch.Tensor, ids: np.ndarray) -> Rows:
        """All B envs step (envs not in ids hold still with zero actions); rows of ids."""
        if len(ids) == self.num_envs:
            full = actions.to(self.device)
        else:
            full = torch.zeros(self.num_envs, actions.shape[1], device=self.device)
            full[torch.as_tensor(ids, device=self.device)] = actions.to(self.device)
        obs, reward, _, _, info = self.env.step(full)
        rows = _rows(self.env, obs, info, self.rgb, progress=reward)
        if len(ids) == self.num_envs:
            return rows
        sel = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        return {k: v[sel] for k, v in rows.items()}

    def restore(self, states: torch.Tensor, ids: np.ndarray) -> Rows:
        """Physics states [B, P] of all envs (ids must be all of them)."""
        u = self.env.unwrapped
        u.set_state(states.to(self.device))
        info = u.get_info()
        return _rows(self.env, u.get_obs(info), info, self.rgb)

    def render(self, ids: np.ndarray) -> torch.Tensor:
        frames = self.env.render()[..., :3]
        return frames[torch.as_tensor(ids, device=frames.device)].cpu()

    def close(self) -> None:
        self.env.close()
