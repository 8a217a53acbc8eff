"""Client of the mplib planning worker (sims/maniskill/mplib_worker.py in .venv-mplib).

mplib cannot be imported next to the project's numpy 2 (its wheels need numpy < 2 and crash
under numpy 2), so `make maniskill` builds a small second venv, `.venv-mplib`, with the pins
of sims/maniskill/mplib-requirements.txt, and MplibPlanner runs the worker there as a child
process speaking length-prefixed JSON over its stdin/stdout (see the worker's docstring).

    planner = MplibPlanner()                       # the Panda of ManiSkill (panda_v2), TCP link
    base = planner.base_pose(qpos, tcp_pose)        # robot base in the world, [7]
    path, how = planner.plan(qpos, goal, base, time_step=0.05, vel=0.7, acc=3.0)
    # path: [T, 7] arm joint positions every time_step (None on failure, then `how` says why)
    planner.close()

Poses are float [7] = [x, y, z, qw, qx, qy, qz] (ManiSkill's raw pose layout); qpos is the
Panda's [9] (7 arm joints, 2 fingers).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from sims.frames import read_frame, write_frame
from sims.vecenv import EnvError

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-mplib"
WORKER = Path(__file__).with_name("mplib_worker.py")


def venv_python() -> Path:
    """The planner venv's interpreter; EnvError (one line) if it has not been built."""
    py = VENV / "bin" / "python"
    if not py.exists():
        raise EnvError(f"mplib planner: no planner venv ({py} is missing); run `make maniskill`")
    return py


def panda_files() -> tuple[Path, Path]:
    """URDF and SRDF of ManiSkill's Panda (panda_v2) from the installed mani_skill package."""
    import mani_skill

    d = Path(mani_skill.__file__).parent / "assets" / "robots" / "panda"
    return d / "panda_v2.urdf", d / "panda_v2.srdf"


def _matrix(pose: np.ndarray) -> np.ndarray:
    """[7] pose (p, wxyz) -> 4x4 transform."""
    m = np.eye(4)
    m[:3, :3] = Rotation.from_quat(np.asarray(pose[[4, 5, 6, 3]], np.float64)).as_matrix()
    m[:3, 3] = pose[:3]
    return m


def _pose(m: np.ndarray) -> np.ndarray:
    """4x4 transform -> [7] pose (p, wxyz)."""
    x, y, z, w = Rotation.from_matrix(m[:3, :3]).as_quat()
    return np.array([*m[:3, 3], w, x, y, z])


class MplibPlanner:
    """One mplib worker process with a Planner for ManiSkill's Panda (move group: the TCP).

    table_z: height (world) of the table top the sampling-based planner avoids (None: no table).
    """

    def __init__(self, urdf: str | Path | None = None, srdf: str | Path | None = None,
                 move_group: str = "panda_hand_tcp", table_z: float | None = -0.005):
        py = venv_python()
        if urdf is None or srdf is None:
            urdf, srdf = panda_files()
        cmd = [str(py), str(WORKER), "--urdf", str(urdf), "--srdf", str(srdf), "--move-group", move_group]
        if table_z is not None:
            cmd += ["--table-z", str(table_z)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        hello = self._recv()
        if not hello.get("ok"):
            self.close()
            raise EnvError(f"mplib planner: {hello.get('reason', 'worker failed')}")

    def _recv(self) -> dict[str, Any]:
        reply = read_frame(self.proc.stdout)
        if reply is None:
            code = self.proc.poll()
            raise EnvError(f"mplib planner: the worker exited (code {code}); see its stderr above")
        return reply

    def request(self, **req: Any) -> dict[str, Any]:
        """Send one request (see mplib_worker.py) and return the reply dict."""
        if self.proc.poll() is not None:
            raise EnvError(f"mplib planner: the worker is not running (code {self.proc.returncode})")
        write_frame(self.proc.stdin, req)
        return self._recv()

    def fk(self, qpos: np.ndarray) -> np.ndarray:
        """Pose [7] of the move-group link in the robot base frame at qpos [9]."""
        return np.asarray(self.request(op="fk", qpos=np.asarray(qpos, float).tolist())["pose"])

    def base_pose(self, qpos: np.ndarray, tcp_pose: np.ndarray) -> np.ndarray:
        """The robot base pose [7] in the world, from qpos [9] and the observed TCP pose [7]:
        T_world_base = T_world_tcp @ inv(T_base_tcp(qpos))."""
        m = _matrix(np.asarray(tcp_pose, np.float64)) @ np.linalg.inv(_matrix(self.fk(qpos)))
        return _pose(m)

    def plan(self, qpos: np.ndarray, goal: np.ndarray, base: np.ndarray, method: str = "auto",
             time_step: float = 0.05, vel: float = 1.0, acc: float = 1.0, planning_time: float = 1.0,
             seed: int = 1) -> tuple[np.ndarray | None, str]:
        """Joint path [T, 7] from qpos [9] to the TCP at goal [7] (world), sampled every
        time_step under joint speed `vel` and acceleration `acc`; (None, reason) on failure.
        method: "screw", "pose" (IK + RRTConnect) or "auto" (screw, then pose); seed: mplib's
        global seed, set before planning (OMPL needs it > 0)."""
        r = self.request(op="plan", qpos=np.asarray(qpos, float).tolist(), goal=np.asarray(goal, float).tolist(),
                         base=np.asarray(base, float).tolist(), method=method, time_step=time_step, vel=vel,
                         acc=acc, planning_time=planning_time, seed=int(seed))
        if not r.get("ok"):
            return None, r.get("reason", "failed")
        return np.asarray(r["path"], np.float64), r["method"]

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is None:
            return
        if proc.poll() is None:
            try:
                write_frame(proc.stdin, {"op": "quit"})
            except (BrokenPipeError, OSError):
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for s in (proc.stdin, proc.stdout):
            if s:
                s.close()
        self.proc = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
