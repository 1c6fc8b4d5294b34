"""The package's layers, as its docstring lays them out, hold in its imports: each layer
imports only the layers below it, and no module imports itself back through others."""

from __future__ import annotations

import ast
from pathlib import Path

import state_store

PACKAGE = Path(state_store.__file__).resolve().parent

# Each layer, and the layers it may import (besides itself).
LAYERS = {
    "base": set(),  # errors.py, options.py
    "format": {"base"},  # the durable format
    "runtime": {"base", "format"},  # the worker process
    "driver": {"base"},  # the driver JVM, the shim's build
    "tools": {"base", "format", "driver"},  # savepoint/, results/, tools/, spark.py, cli.py
}


def layer_of(module: str) -> str:
    parts = module.split(".")[1:]
    top = parts[0] if parts else ""
    if top in ("errors", "options"):
        return "base"
    if top in ("format", "runtime", "driver"):
        return top
    return "tools"


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module of the package `path` imports, at any depth of its code."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("state_store"):
                for alias in node.names:  # `from . import x` may name a module
                    candidate = f"{target}.{alias.name}"
                    found.add(candidate if _is_module(candidate) else target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("state_store")}
    return found - {module}


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = [f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
             for module, targets in graph().items() for target in targets
             if layer_of(target) != layer_of(module)
             and layer_of(target) not in LAYERS[layer_of(module)]]
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_back() -> None:
    edges = graph()
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        for target in sorted(edges.get(node, ())):
            if target == path[0]:
                cycles.append(" -> ".join([*path, target]))
            elif target not in path and len(path) < 8:
                visit(target, [*path, target])

    for start in sorted(edges):
        visit(start, [start])
    # a package's __init__ re-exporting its modules is not a cycle of code
    cycles = [c for c in cycles if not any(
        a.startswith(b + ".") or b.startswith(a + ".")
        for a, b in zip(c.split(" -> "), c.split(" -> ")[1:], strict=False))]
    assert not cycles, "\n".join(sorted(set(cycles))[:20])


def test_no_package_exports_a_name_one_of_its_modules_has() -> None:
    """`from package import name` must always give the package's `name`, never a submodule
    that an import elsewhere bound over it (savepoint.restore was once both)."""
    clashes = []
    for init in PACKAGE.rglob("__init__.py"):
        modules = {p.stem for p in init.parent.glob("*.py")} | \
            {p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()}
        for node in ast.walk(ast.parse(init.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:  # from .x import name
                clashes += [f"{module_name(init)}.{alias.asname or alias.name}"
                            for alias in node.names if (alias.asname or alias.name) in modules]
    assert not clashes, clashes
