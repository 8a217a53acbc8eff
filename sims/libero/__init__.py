"""LIBERO behind the VecEnv contract (see docs/libero.md).

make_env("libero:libero_spatial/0", B, ...) in sims.registry builds a LiberoVecEnv: B worker
processes, each one LIBERO env in the side venv .venv-libero (`make libero`), with observations
in shared memory. Importing this package imports no LIBERO.
"""

from sims.libero.tasks import SUITES, parse_name, suite_names

__all__ = ["SUITES", "parse_name", "suite_names"]
