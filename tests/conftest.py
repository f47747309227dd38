"""Suite-wide settings: nothing here may reach the network.

The suite needs promtool and prometheus (tests/deploy) and PostgreSQL on 127.0.0.1:5432
(``$SPANJUDGE_TEST_POSTGRES_URL``). Tests that need them fail, never skip, when they are missing;
when a run has failures, the summary also says which of them is missing and the command that
provides it (`bash scripts/test`), since a test that opens PostgreSQL directly fails with the
driver's own connection error.

The fast lane, ``bash scripts/test --fast`` (``pytest -m "not slow"``), leaves out the tests
``pytest_collection_modifyitems`` below marks slow: every test that starts a worker process
or a user's mypy (``SLOW_FIXTURES``), the PostgreSQL twin of every test run on both store backends,
and those in ``SLOW``. CI and plain ``bash scripts/test`` run them all.
"""

import os
import shutil

import pytest

# litellm must never fetch its cost map from the internet.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
# deepeval (the test extra) must never send telemetry or look for a hosted account.
os.environ["DEEPEVAL_TELEMETRY_OPT_OUT"] = "YES"
os.environ["DEEPEVAL_UPDATE_WARNING_OPT_IN"] = "NO"
os.environ["DEEPEVAL_GRPC_LOGGING"] = "NO"
# An OTLP endpoint inherited from the developer's shell must not receive test spans.
for _name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
    os.environ.pop(_name, None)

PROVIDED_BY = "run `bash scripts/test`, which installs and starts what the tests need"

# The slow lane, by folder, file or test (a node-id prefix), each with why; the local LLM test
# marks itself (tests/evaluators/judges/test_local_llm.py). Times from `pytest --durations` per
# folder on the shared 2-core machine: whatever took over ~5 s, or a suite of real servers.
SLOW = {
    "tests/reliability": "the kill matrix and the fault suites: real subprocesses and servers",
    "tests/deploy/test_prometheus_live.py": "a live Prometheus scraping a worker (~25 s)",
    "tests/feedback/test_prometheus.py": "a live Prometheus reading the agreement gauges (~10 s)",
    "tests/interop/test_conformance.py": "every recording through a real worker (~120 s)",
    "tests/worker/test_setup_mistakes.py": "29 real worker processes refusing their setup (~75 s)",
    "tests/worker/test_phoenix.py": "a real Phoenix started fresh, workers, Chromium (~75 s)",
    "tests/worker/test_mlflow.py": "a real MLflow started fresh, two workers, Chromium (~85 s)",
    "tests/feedback/test_export.py::test_deepeval_loads_both_files": "imports deepeval (~9 s)",
    "tests/worker/test_geval_rule.py::"
    "test_worker_from_a_toml_file_with_only_geval_rules_scores_demo_traffic": "a worker (~6 s)",
    "tests/worker/test_enrich.py::"
    "test_the_readme_example_runs_offline_and_prints_scores_on_spans": "a subprocess (~6 s)",
    "tests/security/test_injection_and_secrets.py::"
    "test_judge_api_key_never_leaks[scored-litellm]": "a subprocess importing litellm (~28 s)",
    "tests/security/test_injection_and_secrets.py::"
    "test_worker_log_and_config_errors_never_show_secrets": "a worker process (~6 s)",
    "tests/security/test_hostile_capture.py::"
    "test_every_hostile_atom_once_per_kind": "every hostile value through every capture (~5 s)",
    "tests/evaluators/loop/test_demo_and_scheduler.py::"
    "test_demo_exits_non_zero_when_the_judge_fails": "the demo retrying a dead judge (~19 s)",
    "tests/evaluators/loop/test_exactly_once.py::"
    "test_sigkill_mid_evaluation_loses_and_duplicates_nothing": "kills an evaluator (~7 s)",
    "tests/evaluators/cache/test_cache_key.py::"
    "test_the_key_is_the_same_in_every_process": "fresh interpreters, other hash seeds (~5 s)",
    "tests/evaluators/metrics/test_geval.py::"
    "test_processes_writing_at_once_lose_no_entry": "several writer processes (~8 s)",
    "tests/evaluators/judges/test_direct.py::"
    "test_the_direct_path_prices_calls_without_importing_litellm": "a subprocess (3-5 s)",
    # the scripts run three at a time in a pool, so the whole file goes: 28-52 s measured
    "tests/benchmarks/test_smoke.py": "every benchmark script's smoke run in a subprocess",
}
# A test that takes one of these fixtures is slow whatever its name: fixture -> why.
SLOW_FIXTURES = {
    "start_worker": "runs the worker as a child process (4-18 s each)",
    "mypy_report": "runs a user's mypy --strict on the installed package (~70 s, once)",
}
# The PostgreSQL twin of a test run on both backends (tests/support/stores.py BACKENDS): 46 s of
# the 77 s the store suite took; the fast lane keeps the SQLite twin, the full run both.
SLOW_BACKEND = "postgresql"


def _is_slow(item: pytest.Item) -> bool:
    if any(name in SLOW_FIXTURES for name in getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and SLOW_BACKEND in callspec.params.values():
        return True
    return any(_matches(item.nodeid, prefix) for prefix in SLOW)


def _matches(nodeid: str, prefix: str) -> bool:
    # a folder, a file, a test or one parametrisation of it: the prefix ends where a part does
    return nodeid == prefix or nodeid.startswith((prefix + "/", prefix + "::", prefix + "["))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
    # A renamed test would drop out of the slow lane unnoticed and slow the fast one down.
    # Checked only when whole files were collected: a run of chosen tests (node ids or -k)
    # leaves the others of their file out on purpose.
    if config.getoption("keyword") or any("::" in arg for arg in config.args):
        return
    for prefix in SLOW:
        in_file = [i for i in items if _matches(i.nodeid, prefix.split("::")[0])]
        if in_file and not any(_matches(i.nodeid, prefix) for i in in_file):
            raise pytest.UsageError(f"tests/conftest.py SLOW names no collected test: {prefix}")


def _missing_tools() -> list[str]:
    missing = [
        f"{tool} not found (Debian's prometheus package)"
        for tool in ("promtool", "prometheus")
        if shutil.which(tool) is None
    ]
    # imported here, not at the top: the environment above must be set before spanjudge loads
    from tests.support.stores import POSTGRES_URL

    try:
        import psycopg

        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except Exception as exc:
        reason = " ".join(str(exc).split())
        missing.append(f"PostgreSQL not reachable at {POSTGRES_URL}: {reason}")
    return missing


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    if exitstatus != pytest.ExitCode.TESTS_FAILED:
        return
    missing = _missing_tools()
    if missing:
        terminalreporter.section("missing test tools")
        for line in missing:
            terminalreporter.write_line(f"- {line}")
        terminalreporter.write_line(PROVIDED_BY)
