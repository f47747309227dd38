"""Suite-wide settings: nothing here may reach the network.

The suite needs promtool and prometheus (tests/deploy) and PostgreSQL on 127.0.0.1:5432
(``$SPANJUDGE_TEST_POSTGRES_URL``). Tests that need them fail, never skip, when they are missing;
when a run has failures, the summary also says which of them is missing and the command that
provides it (`bash scripts/test`), since a test that opens PostgreSQL directly fails with the
driver's own connection error.
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
