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


# ---------------------------------------------------------------------- skips
# A test may skip only for a capability this machine lacks; any other skip (a missing venv, a
# package, a failed set-up) is reported as a failure, since `make test` builds everything else.
CAPABILITY_SKIPS = ("needs root", "network namespaces", "needs a CUDA device", "needs /dev/net/tun",
                    "needs iproute2")


def pytest_addoption(parser):
    parser.addoption("--max-skips-from-readme", action="store_true",
                     help="fail the session if more tests skip than README.md's 'at most N skipped' states")


def pytest_configure(config):
    config.addinivalue_line("markers", "bench_cluster: the longer Ray host runs; `make bench-cluster` runs "
                                       "them, `make test` deselects them")


def _capability_reason(reason: str) -> bool:
    return any(c in reason for c in CAPABILITY_SKIPS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    if rep.skipped and not hasattr(rep, "wasxfail") and isinstance(rep.longrepr, tuple):
        reason = rep.longrepr[2]
        if not _capability_reason(reason):
            rep.outcome = "failed"
            rep.longrepr = f"skipped for a reason that is not a missing capability (root, namespaces, CUDA): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    rep = (yield).get_result()
    if rep.skipped and isinstance(rep.longrepr, tuple) and not _capability_reason(rep.longrepr[2]):
        rep.outcome = "failed"
        rep.longrepr = ("module skipped for a reason that is not a missing capability (root, namespaces, CUDA): "
                        f"{rep.longrepr[2]}")


def readme_max_skips() -> int:
    """README.md's 'at most N skipped' (the test command's line)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    m = re.search(r"at most (\d+) skipped", text)
    assert m, "README.md states no 'at most N skipped'"
    return int(m[1])


def pytest_sessionfinish(session, exitstatus):
    if not session.config.getoption("--max-skips-from-readme") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", []))  # as pytest's summary counts them
    allowed = readme_max_skips()
    if skipped > allowed:
        reporter.write_line(f"{skipped} tests skipped, more than README.md's 'at most {allowed} skipped': "
                            "a capability went missing, or a new skip needs the README's count", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
