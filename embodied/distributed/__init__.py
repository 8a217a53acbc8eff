"""Roles (env workers, rollout, learner) run in one process (`backend: local`, the default) or
as Ray actors (`backend: ray`), placed by config data. See docs/distributed.md."""
