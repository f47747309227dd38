"""The public surface: what ``spanjudge`` exports, how a type checker sees it, and the error tree.

The rule (spanjudge/__init__.py's docstring): public = what ``spanjudge`` and
``spanjudge.testing`` export; every other module is internal.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

import spanjudge
import spanjudge.errors
import spanjudge.testing

ROOT = Path(__file__).resolve().parent.parent
ERRORS_DOC = ROOT / "docs" / "reference" / "errors.md"
PUBLIC_ERRORS = list(spanjudge.errors.__all__)


# ------------------------------------------------------------------------------ exports
def test_every_exported_name_resolves_to_a_real_object() -> None:
    for package in (spanjudge, spanjudge.testing):
        for name in package.__all__:
            assert getattr(package, name) is not None, name


def test_lazy_names_are_all_exported_and_seen_by_type_checkers() -> None:
    # the TYPE_CHECKING block is what a user's mypy sees: each lazy name must be imported there,
    # from the very module the run-time loader takes it from
    tree = ast.parse((ROOT / "spanjudge" / "__init__.py").read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    typed = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert typed == spanjudge._LAZY
    assert set(spanjudge._LAZY) <= set(spanjudge.__all__)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="Rul"):
        spanjudge.Rul  # type: ignore[attr-defined]  # noqa: B018


def test_import_spanjudge_loads_neither_evaluation_nor_storage() -> None:
    code = (
        "import sys, spanjudge\n"
        "heavy = [m for m in ('litellm', 'pydantic', 'sqlite3', 'apscheduler', 'psycopg',"
        " 'spanjudge.evaluators', 'spanjudge.exporters', 'spanjudge.settings')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# ------------------------------------------------------------------------------ errors
def test_every_public_exception_is_a_spanjudge_error_exported_from_spanjudge() -> None:
    for name in PUBLIC_ERRORS:
        cls = getattr(spanjudge.errors, name)
        assert issubclass(cls, spanjudge.SpanjudgeError), name
        assert getattr(spanjudge, name) is cls, name


def test_exceptions_keep_the_builtin_base_callers_catch() -> None:
    assert issubclass(spanjudge.ConfigError, ValueError)
    assert issubclass(spanjudge.ParamError, ValueError)
    assert issubclass(spanjudge.FeedbackError, ValueError)
    assert issubclass(spanjudge.MissingFieldError, ValueError)
    assert issubclass(spanjudge.MetricError, RuntimeError)


# ------------------------------------------------------------------------------ one import path
def _module_files() -> dict[str, Path]:
    """Every module of the package by import name; the tracer, exporters and evaluators folders
    are reached through their spanjudge/ symlinks, so each file has exactly one name."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(ROOT / "spanjudge", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for file in files:
            if file.endswith(".py"):
                path = Path(folder, file)
                parts = path.relative_to(ROOT).with_suffix("").parts
                found[".".join(parts[:-1] if file == "__init__.py" else parts)] = path
    return found


MODULE_FILES = _module_files()
# Folders whose imports of the package are checked too: what contributors copy from.
IMPORTERS = ("spanjudge", "tests", "benchmarks", "deploy", "scripts", "examples")


def _re_exports(source: str) -> list[str]:
    """What a module hands on of another spanjudge module's names: imported ``X as X``, listed
    in ``__all__``, or imported and never used in the module itself."""
    tree = ast.parse(source)
    declared: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            declared = [e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)]
    # the source without its import statements: where a use of an imported name would show
    lines = source.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for i in range(node.lineno - 1, node.end_lineno or node.lineno):
                lines[i] = ""
    rest = "\n".join(lines)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("spanjudge"):
            continue
        for alias in node.names:
            name = alias.asname or alias.name
            if alias.asname == alias.name:
                found.append(f"{node.lineno}: {name} imported as itself")
            elif name in declared:
                found.append(f"{node.lineno}: {name} in __all__")
            elif not re.search(rf"\b{re.escape(name)}\b", rest):
                found.append(f"{node.lineno}: {name} imported, never used")
    return found


# Re-exports the check found when it was written (issue 36), in modules whose stage is being
# reworked by their owners: each goes when its importers name the home module. The list only
# shrinks: a new re-export fails the test, and so does an entry that is gone (delete it here).
KNOWN_RE_EXPORTS = {
    "spanjudge.evaluators._rebuild.cases": {"MAX_FIELD_CHARS", "MAX_TOOL_CALLS", "MAX_RAW_CHARS"},
    "spanjudge.evaluators._rebuild.targets": {"TARGET_TYPES"},
    "spanjudge.evaluators._rebuild.trajectory": {"ToolDefinition", "ToolRequest"},
}  # fmt: skip


def test_internal_modules_do_not_re_export_names_defined_elsewhere() -> None:
    """A name has one import path: its home module, or a package's ``__init__`` (the surfaces
    ``spanjudge`` and its folders export). An internal module imports another module's name to
    use it, never to hand it on: no ``X as X``, no foreign name in ``__all__``, no unused import
    kept for old callers."""
    found: dict[str, dict[str, str]] = {}
    for name, path in sorted(MODULE_FILES.items()):
        if path.name != "__init__.py":
            for problem in _re_exports(path.read_text(encoding="utf-8")):
                found.setdefault(name, {})[problem.split()[1]] = problem
    new = [
        f"{module}:{problem}"
        for module, problems in found.items()
        for bound, problem in problems.items()
        if bound not in KNOWN_RE_EXPORTS.get(module, set())
    ]
    assert new == [], "\n".join(new)
    gone = {
        f"{module}.{bound}"
        for module, names in KNOWN_RE_EXPORTS.items()
        for bound in names
        if bound not in found.get(module, {})
    }
    assert gone == set(), f"no longer re-exported, delete from KNOWN_RE_EXPORTS: {sorted(gone)}"


def test_exceptions_are_imported_from_the_error_tree() -> None:
    """Every exception of ``spanjudge.errors`` is imported from there (or from ``spanjudge``),
    not through a module that happens to import it: that path ends when the module stops
    needing it."""
    homes = {"spanjudge", "spanjudge.errors"}
    found = []
    for folder in IMPORTERS:
        for dirpath, dirs, files in os.walk(ROOT / folder):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for file in (f for f in files if f.endswith(".py")):
                path = Path(dirpath, file)
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                    if (
                        isinstance(node, ast.ImportFrom)
                        and (node.module or "").startswith("spanjudge")
                        and node.module not in homes
                    ):
                        found += [
                            f"{path.relative_to(ROOT)}:{node.lineno}: {a.name} from {node.module}"
                            for a in node.names
                            if a.name in PUBLIC_ERRORS
                        ]
    assert found == [], "\n".join(found)


def test_the_import_path_checks_see_a_re_export() -> None:
    """Guards the checks above against passing on nothing."""
    source = (
        "from spanjudge.errors import StoreError as StoreError\n"
        "from spanjudge._core.kinds import Kind, TargetType\n"
        "from spanjudge._core.urls import redact_url\n"
        "__all__ = ['Kind', 'Local']\n"
        "class Local:\n"
        "    target: TargetType\n"
    )
    assert _re_exports(source) == [
        "1: StoreError imported as itself",
        "2: Kind in __all__",
        "3: redact_url imported, never used",
    ]
    assert "spanjudge.tracer._observe" in MODULE_FILES  # a symlinked folder is walked
    assert "spanjudge.evaluators._judge.judges.base" in MODULE_FILES
    assert "StoreError" in PUBLIC_ERRORS


def _package_modules() -> list[str]:
    names = []
    for root in ("spanjudge", "spanjudge.tracer", "spanjudge.exporters", "spanjudge.evaluators"):
        package = importlib.import_module(root)
        names.append(root)
        names += [info.name for info in pkgutil.walk_packages(package.__path__, root + ".")]
    return sorted(set(names))


def test_every_exception_class_of_the_package_derives_from_spanjudge_error() -> None:
    found = {}
    for name in _package_modules():
        if name.startswith("spanjudge._demo") or name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{name}.{attr}"] = value
    # the internal signals too (never exported): the receiver's and the judge transport's
    assert {"Backpressure", "Rejected", "OtlpDecodeError", "HTTPFailure"} <= {
        cls.__name__ for cls in found.values()
    }
    outside = [name for name, cls in found.items() if not issubclass(cls, spanjudge.SpanjudgeError)]
    assert outside == []


def _doc_tree(text: str) -> dict[str, str | None]:
    """``{class: parent}`` from a drawn tree (``├── X``, ``│   └── Y``, 4 columns a level)."""
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "SpanjudgeError")
    indent = len(lines[start]) - len(lines[start].lstrip())
    for line in lines[start:]:
        if not line.strip():
            break
        line = line[indent:]
        match = re.match(r"^([│├└─ ]*)([A-Z]\w*)", line)
        if not match:
            continue
        depth = len(match.group(1)) // 4
        del stack[depth:]
        parents[match.group(2)] = stack[-1] if stack else None
        stack.append(match.group(2))
    return parents


def test_the_documented_tree_is_the_class_tree() -> None:
    doc = ERRORS_DOC.read_text()
    block = re.search(r"## The tree\n.*?```text\n(.*?)```", doc, re.S)
    assert block is not None, "docs/reference/errors.md lost its tree block"
    documented = _doc_tree(block.group(1))
    actual: dict[str, str | None] = {}
    for name in PUBLIC_ERRORS:
        cls = getattr(spanjudge.errors, name)
        bases = [b.__name__ for b in cls.__bases__ if issubclass(b, spanjudge.SpanjudgeError)]
        actual[name] = bases[0] if bases else None
    assert documented == actual
    # the module docstring draws the same tree
    assert _doc_tree(spanjudge.errors.__doc__ or "") == actual


def test_documented_builtin_bases_are_the_real_ones() -> None:
    for line in ERRORS_DOC.read_text().splitlines():
        match = re.search(r"([A-Z]\w+)\s+\(also a (\w+)\)", line)
        if match:
            cls = getattr(spanjudge, match.group(1))
            assert issubclass(cls, getattr(builtins, match.group(2))), line


# ------------------------------------------------------------------------------ user's mypy
CORRECT = """\
import spanjudge


@spanjudge.observe
def answer(question: str) -> str:
    return "Paris"


def start(store_url: str) -> spanjudge.Monitor:
    rule = spanjudge.Rule(spanjudge.FaithfulnessMetric(), target="llm", sample_rate=0.5)
    return spanjudge.monitor([rule], store=store_url, start=False)


print(answer("What is the capital of France?"))
"""

# mistake -> (a fragment of the correct script, what replaces it, what mypy's message must name)
MISTAKES = {
    "wrong_target": ('target="llm"', 'target="llmm"', "target"),
    "wrong_sample_rate_type": ("sample_rate=0.5", 'sample_rate="x"', "sample_rate"),
    "misspelt_name": ("spanjudge.Rule(", "spanjudge.Rul(", "Rul"),
    "observe_keeps_the_signature": (
        'answer("What is the capital of France?")',
        "answer(42)",
        "answer",
    ),
}


def run_shown(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """A subprocess whose output is part of the failure message when it fails."""
    out = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert out.returncode == 0, f"{args} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy --strict on the correct script and on one copy per mistake, against the package as
    the README installs it (``pip install -e ".[test]"``), from a folder outside the checkout:
    what a contributor's editor and a user's type checker see. No pip run here: the suite never
    starts a registry fetch of its own."""
    work = tmp_path_factory.mktemp("user_mypy")
    scripts = {"correct": CORRECT}
    for name, (fragment, mistake, _) in MISTAKES.items():
        scripts[name] = CORRECT.replace(fragment, mistake)
    files = []
    for name, text in scripts.items():
        (work / f"{name}.py").write_text(text)
        files.append(f"{name}.py")
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    # --follow-imports=silent: a user's mypy reports their code, not the library's internals
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--no-incremental", "--config-file", "/dev/null", *files],
        cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    report: dict[str, list[str]] = {name: [] for name in scripts}
    for line in out.stdout.splitlines():
        name = line.split(".py:", 1)[0]
        if name in report and ": error:" in line:
            report[name].append(line)
    assert out.returncode in (0, 1), out.stdout + out.stderr
    return report


def test_users_mypy_strict_accepts_the_correct_script(mypy_report: dict[str, list[str]]) -> None:
    assert mypy_report["correct"] == []


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_users_mypy_strict_reports_the_mistake(
    mypy_report: dict[str, list[str]], mistake: str
) -> None:
    errors = mypy_report[mistake]
    assert errors, f"mypy --strict accepted {MISTAKES[mistake][1]}"
    assert any(MISTAKES[mistake][2] in line for line in errors), errors


def test_each_mistake_changes_the_correct_script_in_one_place() -> None:
    # guards the test itself: a fragment that is not in the script would test nothing
    for fragment, _, _ in MISTAKES.values():
        assert CORRECT.count(fragment) == 1, fragment


PROBE = "spanjudge.tracer._observe"


def test_the_editable_install_is_a_path_entry_type_checkers_follow(tmp_path: Path) -> None:
    """``pip install -e .`` must put the source folder on sys.path through a plain .pth line (an
    import-hook finder is invisible to mypy and pyright), and mypy run outside the checkout must
    resolve the package's own modules to the checkout's files."""
    where = run_shown(
        [sys.executable, "-c", f"import sys, {PROBE}; print(sys.modules[{PROBE!r}].__file__)"],
        cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.strip()  # fmt: skip
    assert Path(where).resolve() == (ROOT / "tracer" / "_observe.py").resolve(), where
    pth = [p for p in Path(sysconfig.get_paths()["purelib"]).glob("__editable__*spanjudge*.pth")]
    assert pth, "no editable .pth for spanjudge: install with pip install -e ."
    lines = pth[0].read_text(encoding="utf-8").split()
    assert [Path(line).resolve() for line in lines] == [(ROOT / "src").resolve()], lines
    (tmp_path / "probe.py").write_text(
        "from spanjudge.tracer._observe import observe\n"
        "from spanjudge._store.base import SpanStore\n"
        "reveal_type(observe)\nreveal_type(SpanStore)\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
         "--config-file", "/dev/null", "probe.py"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert "Cannot find implementation" not in out.stdout, out.stdout
    assert "import-not-found" not in out.stdout, out.stdout
    assert out.stdout.count("Revealed type") == 2, out.stdout + out.stderr


# --------------------------------------------------------------- public functions, public types
def _our_classes(hint: Any, seen: set[int]) -> set[type]:
    """The classes of this package a type hint names, at any depth (unions, generics)."""
    if id(hint) in seen:
        return set()
    seen.add(id(hint))
    found: set[type] = set()
    if isinstance(hint, type) and hint.__module__.split(".")[0] == "spanjudge":
        found.add(hint)
    for arg in getattr(hint, "__args__", ()) or ():
        found |= _our_classes(arg, seen)
    return found


def _names_in_package() -> dict[str, Any]:
    """Every class the package defines, by name: the namespace that resolves annotations written
    as strings under ``TYPE_CHECKING`` imports."""
    names: dict[str, Any] = {}
    for info in pkgutil.walk_packages(spanjudge.__path__, "spanjudge."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__.startswith("spanjudge"):
                names.setdefault(value.__name__, value)
    return names


def _hints_of(obj: Any, names: dict[str, Any], *, returns_only: bool = False) -> dict[str, Any]:
    import typing

    target = obj.__init__ if isinstance(obj, type) and "__init__" in vars(obj) else obj
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    try:
        hints = typing.get_type_hints(target, vars(module) if module else None, names)
    except (NameError, TypeError):
        hints = {}
    if returns_only:
        return {k: v for k, v in hints.items() if k == "return"}
    if isinstance(obj, type):
        fields = getattr(obj, "model_fields", None)
        if fields:
            hints |= {name: field.annotation for name, field in fields.items()}
    return hints


def test_every_type_a_public_name_takes_or_returns_is_public() -> None:
    """A user's mypy must be able to name what they get: every class of ours in the signature of
    a public function or constructor (or a public model's fields, or what a public class's
    methods return) is importable from ``spanjudge`` itself."""
    public = {id(getattr(spanjudge, name)) for name in spanjudge.__all__}
    names = _names_in_package()
    missing: dict[str, set[str]] = {}
    for name in spanjudge.__all__:
        obj = getattr(spanjudge, name)
        hints = dict(_hints_of(obj, names))
        if isinstance(obj, type):  # what its public methods return
            for attr, member in vars(obj).items():
                if callable(member) and not attr.startswith("_"):
                    got = _hints_of(member, names, returns_only=True)
                    hints |= {f"{attr}.{k}": v for k, v in got.items()}
        for where, hint in hints.items():
            for cls in _our_classes(hint, set()):
                if id(cls) not in public:
                    missing.setdefault(f"{cls.__module__}.{cls.__qualname__}", set()).add(
                        f"{name}: {where}"
                    )
    assert not missing, "\n".join(f"{k} <- {sorted(v)}" for k, v in sorted(missing.items()))
