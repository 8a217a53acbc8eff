"""The import graph of the toolkit's packages, and the rules it must keep (issues 42, 52).

Nodes are modules (a package is its __init__.py); an edge a -> b is any import of b in a's
source: at module level, inside a function (a lazy import is still a dependency) or under
`if TYPE_CHECKING:` (a type-only import is one too). `from p import x` points at the module p.x
when x is one, else at p.
Rules:
  - no import circles between modules;
  - sims/ and policies/ import nothing of embodied/ (a simulator or a policy knows no learner),
    nor each other (docs/architecture.md: data flows env -> collector -> learner);
  - robot_bridge/ imports neither policies/ nor the learner rooms (embodied.rl,
    embodied.robot_rl, embodied.distributed, embodied.imitation): the bridge runs on the robot
    without them (its recorder writes embodied/data/ datasets; the policy node is embodied/deploy/);
  - evaluating, collecting, deploying, imitation and the rooms they load through (embodied/run/:
    the env, the seeds, checkpoint loading; the config) reach no module of embodied.rl by any
    path of imports: they replay and load without the RL room.

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
NEVER_REACH = {  # importer prefix -> prefixes no chain of its imports may reach
    room: ("embodied.rl",) for room in ("embodied.eval", "embodied.data", "embodied.deploy", "embodied.imitation",
                                        "embodied.run", "embodied.config", "embodied.config_loader")
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


def _imports(tree: ast.AST):
    """Yield every Import / ImportFrom node, wherever it is (functions, `if TYPE_CHECKING:`)."""
    stack = [tree]
    while stack:
        node = stack.pop()
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


def forbidden_reach(edges: dict[str, set[str]]) -> list[list[str]]:
    """A chain of imports [importer, ..., reached] for each module that breaks NEVER_REACH
    (the first chain found, breadth first: a shortest one)."""
    bad = []
    for src in sorted(edges):
        banned = [b for room, bs in NEVER_REACH.items() if _under(src, room) for b in bs]
        if not banned:
            continue
        parent: dict[str, str] = {src: ""}
        queue = [src]
        while queue:
            v = queue.pop(0)
            if v != src and any(_under(v, b) for b in banned):
                chain = [v]
                while parent[chain[-1]]:
                    chain.append(parent[chain[-1]])
                bad.append(chain[::-1])
                break
            for w in sorted(edges.get(v, ())):
                if w not in parent:
                    parent[w] = v
                    queue.append(w)
    return bad


def violations(root: Path = ROOT) -> list[str]:
    """One line per circle, per forbidden arrow and per forbidden reach; empty when the rules hold."""
    edges = graph(root)
    lines = [f"import circle: {' <-> '.join(c)}" for c in cycles(edges)]
    lines += [f"forbidden import: {s} -> {d}" for s, d in forbidden_arrows(edges)]
    lines += [f"forbidden reach: {' -> '.join(c)}" for c in forbidden_reach(edges)]
    return lines


if __name__ == "__main__":
    found = violations()
    print("\n".join(found) or f"import graph ok: {len(graph())} modules, no circles, no forbidden arrows")
    sys.exit(1 if found else 0)
