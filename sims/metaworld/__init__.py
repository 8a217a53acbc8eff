"""MetaWorld behind the VecEnv contract (see docs/metaworld.md).

make_env("metaworld:MT10", B, ...) in sims.registry builds a MetaWorldVecEnv: the envs run in
worker processes in the side venv .venv-metaworld (`make metaworld`; MetaWorld 3.1.1 pins
mujoco 3.3.0), with observations in shared memory. Importing this package imports neither
MetaWorld nor torch.
"""

from sims.metaworld.tasks import BENCHMARKS, INSTRUCTIONS, MT10, MT50, parse_name, suite_names, tasks_of

__all__ = ["BENCHMARKS", "INSTRUCTIONS", "MT10", "MT50", "parse_name", "suite_names", "tasks_of"]
