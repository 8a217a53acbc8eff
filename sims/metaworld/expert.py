"""MetaWorld's scripted policies (metaworld.policies, one per task) as our experts.

expert_for("metaworld:MT10") returns a ScriptedExpert: privileged obs float [B, 39 + N] ->
actions float32 [B, 4]. Each row's task is its one-hot (columns 39..39+N) for a benchmark, the
task itself for a one-task name ("metaworld:MT10/push-v3", "metaworld:push-v3"). The policies live in the side venv, so the expert runs them in a
worker process of its own (sims/metaworld/worker.py --expert), started at the first call; they
are functions of the current observation (no memory), so `reset` has nothing to clear.
"""

from __future__ import annotations

import numpy as np

from sims.metaworld.proc import OBS_DIM, SIDE, WORKER
from sims.sidevenv.proc import WorkerProc
from sims.metaworld.tasks import parse_name
from sims.vecenv import EnvError


class ScriptedExpert:
    def __init__(self, task: str):
        self.suite, self.tasks = parse_name(task)
        self.proc: WorkerProc | None = None

    def row_tasks(self, priv: np.ndarray) -> list[str]:
        """The task of each row of privileged obs [B, P]."""
        want = OBS_DIM + len(self.suite)
        if priv.ndim != 2 or priv.shape[1] != want:
            raise EnvError(f"privileged: expected [B, {want}] (MetaWorld's 39 columns and a one-hot of "
                           f"{len(self.suite)} tasks), got {list(priv.shape)}")
        if len(self.tasks) == 1:
            return [self.tasks[0]] * len(priv)
        return [self.suite[k] for k in np.argmax(priv[:, OBS_DIM:], axis=1)]

    def __call__(self, privileged: np.ndarray) -> np.ndarray:
        priv = np.asarray(privileged, np.float64)
        if self.proc is None:
            self.proc = WorkerProc(SIDE, "expert", WORKER, ["--expert"])
            self.proc.wait_ready(120.0)
        reply = self.proc.call({"op": "act", "tasks": self.row_tasks(priv), "obs": np.ascontiguousarray(priv[:, :OBS_DIM])})
        return np.asarray(reply["actions"], np.float32)

    def reset(self, env_ids: np.ndarray, privileged: np.ndarray) -> None:
        pass

    def close(self) -> None:
        if self.proc is not None:
            self.proc.close()
            self.proc = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def expert_for(task: str) -> ScriptedExpert:
    return ScriptedExpert(task)
