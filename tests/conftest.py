import os

# No test reaches the network, and rendering is headless.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def dds_env(tmp_path_factory):
    """Loopback-only Cyclone config and a random ROS domain for one test module's DDS
    participants; the previous environment is restored afterwards."""
    from robot_bridge.transport import loopback_env

    env = loopback_env(directory=tmp_path_factory.mktemp("dds"))
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
