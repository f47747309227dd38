"""The Python examples of README.md and docs/ stay true: every ```python block compiles, imports
spanjudge only through its public surface (``spanjudge``, ``spanjudge.testing``), imports names
that exist and passes keyword arguments the spanjudge callables accept; and every block that is
self-contained runs, offline, in a fresh interpreter.

A block that cannot run here (it calls a hosted model, or reads a file an earlier command wrote)
opts out with a comment on the line right before its fence::

    <!-- skip-check: needs a hosted judge model -->

The opt-outs are listed in ``OPT_OUTS`` below, so adding one shows in review. The docstring
examples of the package are checked the same way by ``test_docstring_examples.py``, whose
call checker this file reuses.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import spanjudge
from tests.docs.test_docstring_examples import check_call_keywords
from tests.support.otlp_sink import OtlpSink

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = ("spanjudge", "spanjudge.testing")
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"^<!--\s*skip-check:\s*(.+?)\s*-->$")
RUN_TIMEOUT_SECONDS = 90

# Every block that does not run, and why: (file, reason). Keep in step with the markers.
OPT_OUTS = [
    (
        "docs/trust.md",
        "reads failing.json, written by `spanjudge export` above, and calls a hosted judge model",
    ),
    ("docs/trust.md", "reads the store that `spanjudge demo --store sqlite:///demo.db` wrote"),
]


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # of the opening fence
    code: str
    skip: str | None  # the opt-out's reason

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _blocks() -> Iterator[Block]:
    for document in _documents():
        text = document.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            marker = MARKER.match(before)
            yield Block(
                path=document.relative_to(ROOT).as_posix(),
                line=line,
                code=match.group(1),
                skip=marker.group(1) if marker else None,
            )


BLOCKS = list(_blocks())
RUNNABLE = [b for b in BLOCKS if b.skip is None]


def test_the_collector_finds_the_examples() -> None:
    paths = {b.path for b in BLOCKS}
    assert "README.md" in paths, "the README's quick start was not found: the collector is broken"
    assert len(BLOCKS) >= 9, f"only {len(BLOCKS)} python blocks found: the collector is broken"
    assert len(RUNNABLE) >= 6, "most examples must run; too few are left to run"


def test_the_opt_outs_are_the_listed_ones() -> None:
    found = sorted((b.path, b.skip) for b in BLOCKS if b.skip is not None)
    assert found == sorted(OPT_OUTS), (
        "a <!-- skip-check: ... --> marker was added, removed or reworded: update OPT_OUTS so the "
        f"blocks that do not run stay visible. Found: {found}"
    )


def test_a_marker_not_right_before_a_fence_is_refused() -> None:
    # a marker separated from its block by prose would silently stop applying
    for document in _documents():
        lines = document.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if MARKER.match(line.strip()):
                following = lines[number + 1] if number + 1 < len(lines) else ""
                assert following.startswith("```python"), (
                    f"{document.relative_to(ROOT)}:{number + 1}: skip-check marker not followed "
                    "by a ```python fence"
                )


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_example_compiles_and_matches_the_public_api(block: Block) -> None:
    tree = ast.parse(compile(block.code, block.where, "exec", flags=ast.PyCF_ONLY_AST))
    imported: dict[str, Any] = {"spanjudge": spanjudge}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        for name in names:
            if name.split(".")[0] == "spanjudge":
                assert name in PUBLIC_MODULES, (
                    f"{block.where}: imports {name}; examples import only from "
                    f"{' and '.join(PUBLIC_MODULES)}"
                )
        if isinstance(node, ast.ImportFrom) and (node.module or "") in PUBLIC_MODULES:
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(module, alias.name), (
                    f"{block.where}: {node.module} has no {alias.name!r}"
                )
                imported[alias.asname or alias.name] = getattr(module, alias.name)
    check_call_keywords(tree, imported, block.where)


@pytest.fixture(scope="module")
def otlp_sink() -> Iterator[OtlpSink]:
    # examples that configure tracing export to this local receiver, never to a real backend
    with OtlpSink() as sink:
        yield sink


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_self_contained_example_runs(block: Block, otlp_sink: OtlpSink, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DEEPEVAL_TELEMETRY_OPT_OUT": "YES",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_sink.endpoint,
        "SPANJUDGE_CACHE_DIR": str(tmp_path / "cache"),
        # no judge key: an example that reached a hosted model would fail, not pass silently
        "OPENAI_API_KEY": "",
    }
    result = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=tmp_path,  # files an example writes (spanjudge.db) land here
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    assert result.returncode == 0, f"{block.where} failed:\n{result.stderr[-3000:]}"


TOML_FENCE = re.compile(r"^```toml[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
TOML_BLOCKS = [
    (
        f"{document.relative_to(ROOT).as_posix()}:{text.count(chr(10), 0, match.start()) + 1}",
        match.group(1),
    )
    for document in _documents()
    for text in [document.read_text(encoding="utf-8")]
    for match in TOML_FENCE.finditer(text)
]


def test_the_toml_examples_were_found() -> None:
    assert len(TOML_BLOCKS) >= 3, (
        "the worker config examples were not found: the collector is broken"
    )


@pytest.mark.parametrize(("where", "config"), TOML_BLOCKS, ids=[w for w, _ in TOML_BLOCKS])
def test_toml_example_is_a_valid_worker_config(where: str, config: str, tmp_path: Path) -> None:
    # every TOML example is a worker config file (or a part of one): the worker must accept it
    from spanjudge.settings import load_settings

    path = tmp_path / "worker.toml"
    path.write_text(config, encoding="utf-8")
    load_settings(path)


def test_the_public_api_page_lists_every_public_name() -> None:
    page = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([A-Za-z_]\w*)` \|", page, re.M))
    missing = sorted(set(spanjudge.__all__) - listed - {"__version__"})
    assert not missing, f"docs/reference/api.md does not list {missing}"


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"])
def test_relative_links_of_the_root_documents_resolve(name: str) -> None:
    # the docs build checks docs/; these three live outside it and are read on the forge
    text = (ROOT / name).read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert local or name == "CHANGELOG.md", f"{name}: no relative link found: the pattern is broken"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"{name} links to files that do not exist: {missing}"
