"""Docstring examples stay true to the API: every example block in a public docstring of the
package parses, its ``spanjudge`` imports resolve, and its calls of spanjudge callables use
keyword arguments those callables accept.

(They are checked, not run: many examples call a hosted judge model or a backend on purpose.)
The bug this guards against: the ``monitor()`` example imported ``Rule`` from a package that did
not export it and passed ``configure(store=...)``, which does not exist.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import spanjudge

SKIP_MODULES = ("spanjudge._demo", "spanjudge.cli.app")


def _modules() -> Iterator[ModuleType]:
    # the sub-packages live in their own top-level folders: walk each one
    roots = ["spanjudge", "spanjudge.tracer", "spanjudge.exporters", "spanjudge.evaluators"]
    seen: set[str] = set()
    for root in roots:
        package = importlib.import_module(root)
        yield package
        for info in pkgutil.walk_packages(package.__path__, root + "."):
            if info.name.startswith(SKIP_MODULES) or info.name in seen:
                continue
            seen.add(info.name)
            yield importlib.import_module(info.name)


def _blocks(doc: str) -> list[str]:
    """The literal blocks (``Example::`` / ``::``) of a docstring, dedented."""
    lines = doc.expandtabs().splitlines()
    blocks: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].rstrip().endswith("::"):
            base = len(lines[i]) - len(lines[i].lstrip())
            body: list[str] = []
            i += 1
            while i < len(lines) and (
                not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > base
            ):
                body.append(lines[i])
                i += 1
            code = textwrap.dedent("\n".join(body)).strip("\n")
            if code:
                blocks.append(code)
            continue
        i += 1
    return blocks


def _examples() -> Iterator[tuple[str, str]]:
    seen: set[int] = set()
    for module in _modules():
        owners: list[tuple[str, Any]] = [(module.__name__, module)]
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            owners.append((f"{module.__name__}.{name}", obj))
            if inspect.isclass(obj):
                owners.extend(
                    (f"{module.__name__}.{name}.{m}", f)
                    for m, f in vars(obj).items()
                    if not m.startswith("_") and callable(f)
                )
        for where, obj in owners:
            doc = inspect.getdoc(obj) if obj is not module else module.__doc__
            if not doc or id(obj) in seen:
                continue
            seen.add(id(obj))
            for number, block in enumerate(_blocks(doc)):
                yield f"{where}#{number}", block


EXAMPLES = list(_examples())


def _looks_like_python(block: str) -> bool:
    first = block.lstrip().split("\n", 1)[0]
    return not first.startswith(("#", "{", "[", "$", "=", "invoke_", "spanjudge ", "-"))


def test_examples_were_found() -> None:
    assert len(EXAMPLES) > 40, "the collector found too few examples: it is broken"


@pytest.mark.parametrize(("where", "block"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_docstring_example_matches_the_api(where: str, block: str) -> None:
    if not _looks_like_python(block):
        return
    try:
        tree = ast.parse(block)
    except SyntaxError:
        # prose-like blocks (tables, shell, TOML) are not Python; Python blocks must parse
        if any(k in block for k in ("import spanjudge", "from spanjudge")):
            raise
        return
    imported: dict[str, Any] = {"spanjudge": spanjudge}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spanjudge"):
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(module, alias.name), f"{where}: {node.module} has no {alias.name!r}"
                imported[alias.asname or alias.name] = getattr(module, alias.name)
    check_call_keywords(tree, imported, where)


def check_call_keywords(tree: ast.AST, imported: dict[str, Any], where: str) -> None:
    """Every call of an imported spanjudge callable in ``tree`` passes only keywords that its
    signature accepts (the markdown examples' test uses it too)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target = _resolve(node.func, imported)
        if target is None or not callable(target):
            continue
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):
            continue
        params = signature.parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            continue
        names = {p.name for p in params if p.kind is not p.POSITIONAL_ONLY}
        for keyword in node.keywords:
            if keyword.arg is not None:
                assert keyword.arg in names, (
                    f"{where}: {ast.unparse(node.func)}() takes no keyword {keyword.arg!r}"
                )


def _resolve(func: ast.expr, imported: dict[str, Any]) -> Any:
    if isinstance(func, ast.Name):
        return imported.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = imported.get(func.value.id)
        if owner is spanjudge:
            return getattr(spanjudge, func.attr, None)
    return None
