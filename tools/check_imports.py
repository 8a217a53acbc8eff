"""The import graph of the toolkit's packages, and the rules it must keep (issue 42).

Nodes are modules (a package is its __init__.py); an edge a -> b is any import of b in a's
source, at module level or inside a function (a lazy import is still a dependency), except
under `if TYPE_CHECKING:`. `from p import x` points at the module p.x when x is one, else at p.
Rules:
  - no import circles between modules;
  - sims/ and policies/ import nothing of embodied/ (a simulator or a policy knows no learner),
    nor each other (docs/architecture.md: data flows env -> collector -> learner);
  - robot_bridge/ imports neither policies/ nor the learner rooms (embodied.rl,
    embodied.robot_rl, embodied.distributed, embodied.imitation): the bridge runs on the robot
    without them (its recorder writes embodied/data/ datasets; the policy node is embodied/deploy/).

    python tools/check_imports.py          # prints every violation; exit 1 if any
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("embodied", "sims", "policies", "robot_bridge")
FORBIDDEN = {  # importer prefix -> imported prefixes it must not reach
    "sims": ("embodied", "policies"),
    "policies": ("embodied", "sims"),
    "robot_bridge": ("policies", "embodied.rl", "embodied.robot_rl", "embodied.distributed", "embodied.imitation"),
}


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of PACKAGES: dotted name -> file."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Yield Import / ImportFrom nodes, skipping `if TYPE_CHECKING:` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the first-party modules it imports."""
    files = module_files(root)
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        here = name if is_pkg else name.rpartition(".")[0]
        targets = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
                continue
            base = node.module or ""
            if node.level:  # relative: from ..x import y
                pkg = here.split(".")
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                targets.add(sub if sub in files else base)
        edges[name] = {t for t in targets if t in files and t != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def forbidden_arrows(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs that break FORBIDDEN."""
    bad = []
    for src, dsts in sorted(edges.items()):
        for room, banned in FORBIDDEN.items():
            if _under(src, room):
                bad += [(src, d) for d in sorted(dsts) if any(_under(d, b) for b in banned)]
    return bad


def violations(root: Path = ROOT) -> list[str]:
    """One line per circle and per forbidden arrow; empty when the rules hold."""
    edges = graph(root)
    lines = [f"import circle: {' <-> '.join(c)}" for c in cycles(edges)]
    lines += [f"forbidden import: {s} -> {d}" for s, d in forbidden_arrows(edges)]
    return lines


if __name__ == "__main__":
    found = violations()
    print("\n".join(found) or f"import graph ok: {len(graph())} modules, no circles, no forbidden arrows")
    sys.exit(1 if found else 0)
