"""Run directories: checkpoints and logs."""
