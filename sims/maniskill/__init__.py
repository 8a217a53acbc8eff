"""ManiSkill3 behind the VecEnv contract (the `maniskill` extra; see docs/maniskill.md).

make_env("ms:PickCube-v1", B, ...) in sims.registry builds a ManiSkillVecEnv: physx_cuda with B
envs on a GPU, or B single-env ManiSkill instances in worker processes on CPU (with Mesa
lavapipe as the Vulkan driver, set up by `make maniskill`). The family is declared in
family.py; importing this package imports nothing heavy (the task table is sims/maniskill/tasks.py).
"""
