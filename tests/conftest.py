import os
import random
import shutil
import sys
from pathlib import Path

# Tests mirror the rooms (tests/<room>/test_*.py, basenames unique across rooms). A test may
# import another room's test module for its helpers (tests/world_model/ uses
# tests/sims/test_sims_contract.py's contract checks), so every room folder is importable.
sys.path[1:1] = [str(d) for d in sorted(Path(__file__).resolve().parent.iterdir())
                 if d.is_dir() and not d.name.startswith((".", "_"))]

# No test reaches the network, and rendering is headless.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

import pytest  # noqa: E402
import torch  # noqa: E402
from filelock import FileLock  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Modules with slow tests run first: under pytest-xdist (`--dist loadscope
    --no-loadscope-reorder`) a module is one unit of work, and starting the longest units
    first keeps the workers' finishing times close."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)  # stable: file order otherwise


@pytest.fixture(scope="session")
def build_once(tmp_path_factory):
    """build_once(name, build) -> Path: a directory made once per test session by
    build(path), shared by every pytest-xdist worker (the others wait on a file lock)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' common base directory

    def get(name: str, build) -> Path:
        path = root / "shared" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            if not (path / ".complete").exists():
                shutil.rmtree(path, ignore_errors=True)  # what a failed build left
                build(path)
                (path / ".complete").touch()
        return path

    return get


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def dds_env(tmp_path_factory):
    """Loopback-only Cyclone config and a random ROS domain for one test module's DDS
    participants; the previous environment is restored afterwards."""
    from robot_bridge.transport import loopback_env

    # Under pytest-xdist each of up to 4 workers draws from its own 25 domains, so that modules
    # running at the same time in two workers never see each other's participants.
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    env = loopback_env(100 + 25 * (worker % 4) + random.randrange(25), tmp_path_factory.mktemp("dds"))
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
