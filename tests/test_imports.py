"""The import rules (tools/check_imports.py): no circles between modules; sims/ and policies/
import nothing of embodied/ nor each other; robot_bridge/ imports neither policies/ nor a learner room."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from check_imports import cycles, forbidden_arrows, graph, violations  # noqa: E402


def test_the_tree_keeps_the_import_rules():
    assert violations() == []
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "check_imports.py")], capture_output=True, text=True)
    assert out.returncode == 0 and "no circles" in out.stdout, out.stdout


def test_the_graph_sees_real_edges():
    g = graph()
    assert "embodied.rl.train" in g["embodied.cli"]  # a lazy import inside a handler counts
    assert "sims.vecenv" in g["embodied.rl.rollout"]
    assert "embodied.rl.algorithms" in g["embodied.rl.learner"]  # `from pkg import name` of a package's name


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_circle_and_a_forbidden_arrow_are_caught(tmp_path):
    _write(tmp_path, {
        "embodied/__init__.py": "",
        "embodied/a.py": "def f():\n    from embodied import b\n",  # lazy, still an edge
        "embodied/b.py": "from embodied.c import x\n",
        "embodied/c.py": "import embodied.a\nx = 1\n",
        "sims/__init__.py": "",
        "sims/env.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import embodied.a\n",
        "policies/__init__.py": "",
        "policies/p.py": "from ..embodied import c\n",  # relative, resolved
        "robot_bridge/__init__.py": "",
        "robot_bridge/n.py": "from embodied.c import x\n",
    })
    g = graph(tmp_path)
    assert cycles(g) == [["embodied.a", "embodied.b", "embodied.c"]]
    assert forbidden_arrows(g) == [("policies.p", "embodied.c")]  # sims/env.py's import is for type checkers only
    found = violations(tmp_path)
    assert found[0].startswith("import circle: embodied.a") and found[1] == "forbidden import: policies.p -> embodied.c"
    _write(tmp_path, {"embodied/rl/__init__.py": "", "embodied/rl/train.py": "",
                      "robot_bridge/n.py": "from embodied.rl import train\n"})
    assert ("robot_bridge.n", "embodied.rl.train") in forbidden_arrows(graph(tmp_path))
