"""README.md and docs/ render as written: every code fence that opens is closed, so no page turns
into one code block after a missing ``` (a new user's README walk found the README's "Command
line" fence open)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def open_fence(text: str) -> int | None:
    """The line number (1-based) of a ``` fence left open at the end of text, or None."""
    opened = None
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            opened = None if opened else n
    return opened


def test_open_fence_is_found():
    assert open_fence("a\n```bash\nx\n") == 2 and open_fence("```\nx\n```\n") is None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_fence_is_closed(page):
    assert open_fence(page.read_text()) is None, f"{page.relative_to(ROOT)}: the fence opened on line " \
                                                 f"{open_fence(page.read_text())} is never closed"
