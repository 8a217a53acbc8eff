"""TensorBoard scalars under train/, rollout/, eval/, time/, plus a progress bar."""

from __future__ import annotations

from pathlib import Path

from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


class Logger:
    def __init__(self, log_dir: Path, total_steps: int, start_step: int = 0, progress: bool = True):
        # purge_step drops the events a killed run wrote after its last checkpoint (those at steps >= it;
        # the checkpoint's own iteration, at start_step, stays)
        self.writer = SummaryWriter(str(log_dir), purge_step=start_step + 1 if start_step else None)
        self.bar = tqdm(total=total_steps, initial=start_step, unit="step", dynamic_ncols=True,
                        disable=not progress, smoothing=0.1)

    def log(self, section: str, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(f"{section}/{key}", value, step)

    def progress(self, steps: int, **postfix: float) -> None:
        """Advance the bar by `steps` env steps; the last iteration's whole rollout may pass the total,
        the bar stops at it (and keeps its total)."""
        self.bar.update(max(min(steps, self.bar.total - self.bar.n), 0))
        if postfix:
            self.bar.set_postfix({k: f"{v:.3g}" for k, v in postfix.items()}, refresh=False)

    def print(self, msg: str) -> None:
        self.bar.write(msg)

    def close(self) -> None:
        self.bar.close()
        self.writer.close()
