"""Ending a long command on SIGINT or SIGTERM with what was kept and the command that continues.

A long command (train, sft, collect, finetune-robot, world-model train, sim2real) runs its
loop inside `stoppable()`. The first SIGINT or SIGTERM only sets the flag; the loop checks it
at its next consistent point (the end of an iteration, a gradient step, an episode, a
condition), keeps what it has (a checkpoint, the episodes so far) and raises `Stopped`. The
CLI prints `Stopped`'s one line and exits 128 + the signal: 130 for SIGINT, 143 for SIGTERM.
A second signal stops at once; what the last consistent point wrote stays (checkpoints and
episodes are written atomically).
"""

from __future__ import annotations

import shlex
import shutil
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """A signal ended the command. BaseException, as KeyboardInterrupt: no `except Exception`
    between the loop and the CLI swallows it."""

    def __init__(self, signum: int, kept: str, resume: str | None = None, **info):
        self.signum, self.kept, self.resume, self.info = int(signum), kept, resume, info
        super().__init__(kept)

    def line(self) -> str:
        name = signal.Signals(self.signum).name
        return f"stopped by {name}; kept {self.kept}" + (f"; continue with: {self.resume}" if self.resume else "")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopFlag:
    """Truthy once a signal arrived; `signum` says which."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    def check(self, kept: str, resume: str | None = None, **info) -> None:
        """Raise Stopped(kept, resume, **info) if a signal arrived."""
        if self.signum is not None:
            raise Stopped(self.signum, kept, resume, **info)


@contextmanager
def stoppable(what: str = "the current step") -> Iterator[StopFlag]:
    """Install the SIGINT/SIGTERM handlers for the block (main thread only; elsewhere the flag
    never sets) and restore the previous ones after it."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame) -> None:
        if flag.signum is not None:
            raise Stopped(signum, "what the last checkpoint holds (a second signal stopped at once)")
        flag.signum = signum
        print(f"{signal.Signals(signum).name}: stopping after {what} (again to stop at once)",
              file=sys.stderr, flush=True)

    old = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield flag
    finally:
        for s, h in old.items():
            signal.signal(s, h)


ARGV: list[str] | None = None  # the command's words as embodied.cli.main received them


def _typed(path: Path) -> str:
    """A path as a user can type it here: relative to the working directory when inside it."""
    try:
        rel = path.absolute().relative_to(Path.cwd())
        return shlex.quote(str(rel) if rel.parent != Path(".") else f"./{rel}")
    except ValueError:
        return shlex.quote(str(path.absolute()))


def program() -> str:
    """The words that run `embodied` again from here, as the command was started: `embodied`
    when that is on PATH and is the script that runs now; else that script's path (a venv's
    `.venv/bin/embodied` not activated); for `python -m embodied` that interpreter and module."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    on_path = shutil.which("embodied")
    if argv0.name == "embodied":
        same = on_path is not None and Path(on_path).resolve() == argv0.resolve()
        return "embodied" if same else _typed(argv0)
    if argv0.parent.name == "embodied" and argv0.name in ("cli.py", "__main__.py"):
        module = "embodied" if (argv0.parent / "__main__.py").exists() else "embodied.cli"
        return f"{_typed(Path(sys.executable))} -m {module}"
    return "embodied"  # called in process (embodied.cli.main from Python)


def command_line(drop: Sequence[str] = (), add: Sequence[str] = (), options: dict[str, str] | None = None,
                 argv: Sequence[str] | None = None) -> str:
    """`embodied ARGS...` as typed (program() and embodied.cli.main's words), without the words starting with
    one of `drop` (e.g. "steps="), with `options` ({"--episodes": "7"}) set to new values and
    `add` appended: the command that continues a run."""
    words = list(argv if argv is not None else ARGV if ARGV is not None else sys.argv[1:])
    words = [w for w in words if not any(w.startswith(d) for d in drop)]
    for opt, value in (options or {}).items():
        for i, w in enumerate(words):
            if w == opt and i + 1 < len(words):
                words[i + 1] = value
                break
            if w.startswith(opt + "="):
                words[i] = f"{opt}={value}"
                break
        else:
            words += [opt, value]
    return " ".join([program(), *(shlex.quote(w) for w in words + list(add))])


@contextmanager
def no_empty_dirs(*paths: str | Path | None) -> Iterator[None]:
    """If the block fails, remove those of `paths` it created that hold no file (folders only):
    a failed command leaves no empty run directory behind."""
    new = [Path(p) for p in paths if p is not None and not Path(p).exists()]
    try:
        yield
    except BaseException:
        for p in new:
            if p.is_dir() and not any(f.is_file() or f.is_symlink() for f in p.rglob("*")):
                shutil.rmtree(p, ignore_errors=True)
        raise
