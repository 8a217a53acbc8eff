"""The import rules (tools/check_imports.py), counted from the text of every import (lazy and
type-only included): no circles between modules; sims/ and policies/ import nothing of embodied/
nor each other; robot_bridge/ imports neither policies/ nor a learner room; eval/, data/,
deploy/, imitation/ and the rooms they load through (run/, the config) reach no module of
embodied.rl by any chain of imports."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from check_imports import cycles, forbidden_arrows, forbidden_reach, graph, violations  # noqa: E402


def test_the_tree_keeps_the_import_rules():
    assert violations() == []
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "check_imports.py")], capture_output=True, text=True)
    assert out.returncode == 0 and "no circles" in out.stdout, out.stdout


def test_the_graph_sees_real_edges():
    g = graph()
    assert "embodied.rl.train" in g["embodied.cli"]  # a lazy import inside a handler counts
    assert "sims.vecenv" in g["embodied.rl.rollout"]
    assert "embodied.rl.algorithms" in g["embodied.rl.learner"]  # `from pkg import name` of a package's name
    assert "sims.vecenv" in g["sims.registry"]  # under `if TYPE_CHECKING:`: still an edge
    # what replaying needs lives in embodied/run/, and the eval room loads through it
    assert {"embodied.run.env", "embodied.run.load"} <= g["embodied.deploy.serve"]
    assert "embodied.run.env" in g["embodied.eval.evaluate"]


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
    assert forbidden_arrows(g) == [("policies.p", "embodied.c"), ("sims.env", "embodied.a")]  # type-only counts
    found = violations(tmp_path)
    assert found[0].startswith("import circle: embodied.a") and found[1] == "forbidden import: policies.p -> embodied.c"
    _write(tmp_path, {"embodied/rl/__init__.py": "", "embodied/rl/train.py": "",
                      "robot_bridge/n.py": "from embodied.rl import train\n"})
    assert ("robot_bridge.n", "embodied.rl.train") in forbidden_arrows(graph(tmp_path))


def test_a_replaying_room_that_reaches_the_rl_room_is_caught(tmp_path):
    """eval -> run -> config -> rl, the last import lazy inside a function: the whole chain is named."""
    _write(tmp_path, {
        "embodied/__init__.py": "", "embodied/rl/__init__.py": "", "embodied/rl/registry.py": "",
        "embodied/config.py": "def check():\n    from embodied.rl import registry\n",
        "embodied/run/__init__.py": "", "embodied/run/load.py": "from embodied.config import check\n",
        "embodied/eval/__init__.py": "", "embodied/eval/evaluate.py": "import embodied.run.load\n",
        "embodied/rl/train.py": "from embodied.eval.evaluate import x\n",  # rl -> eval: allowed
    })
    g = graph(tmp_path)
    assert cycles(g) == [] and forbidden_arrows(g) == []
    assert forbidden_reach(g) == [["embodied.config", "embodied.rl.registry"],
                                  ["embodied.eval.evaluate", "embodied.run.load", "embodied.config", "embodied.rl.registry"],
                                  ["embodied.run.load", "embodied.config", "embodied.rl.registry"]]
    assert "forbidden reach: embodied.eval.evaluate -> embodied.run.load -> embodied.config -> embodied.rl.registry" \
        in violations(tmp_path)

