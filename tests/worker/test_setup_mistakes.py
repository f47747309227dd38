"""A hurried operator's mistakes: ``spanjudge worker --config <toml>`` stops before it listens,
with one line on stderr naming the setting to fix, no traceback, and the exit code
docs/reference/cli.md gives (2: the settings must change; 1: what they name is not available
now, such as PostgreSQL down or the port taken). A judge that does not answer is a warning: the
worker starts, since the judge may come up later (issue 30 item 8).

Each case is a real process started from a real file, as an operator starts it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.support.ports import closed_port, free_port
from tests.support.stores import POSTGRES_URL

pytestmark = pytest.mark.slow  # a process per case (about a second each)

ROOT = Path(__file__).resolve().parents[2]
RULE = '[[rules]]\nmetric = "bias"\ntarget = "llm"\n'
# environment variables that would change what a case checks: no judge key, no base URL
CLEARED = (
    "OPENAI_API_KEY",
    "OPENAI_API_BASE",
    "OPENAI_BASE_URL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


@dataclass(frozen=True)
class Mistake:
    """A valid worker file with ``keys`` changed (None removes one) and ``rules`` instead of one
    bias rule; the worker must exit ``code`` with a line containing each of ``named``."""

    keys: dict[str, str | None] = field(default_factory=dict)
    rules: str = RULE
    code: int = 2
    named: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def _mistakes() -> dict[str, Mistake]:
    unknown_db = POSTGRES_URL.rsplit("/", 1)[0] + "/spanjudge_no_such_database"
    return {
        "no rules": Mistake(rules="", named=("rules:", "no rules")),
        "an unknown metric parameter": Mistake(
            rules=RULE + "params = { thresold = 0.7 }\n", named=("rules.0.params.thresold",)
        ),
        "threshold 5": Mistake(
            rules=RULE + "params = { threshold = 5 }\n",
            named=("rules.0.params: threshold must be",),
        ),
        "an unknown filter key": Mistake(
            rules=RULE + 'filter = { servce = "bot" }\n', named=("rules.0.filter", "servce")
        ),
        "a conversation target for a single-turn metric": Mistake(
            rules='[[rules]]\nmetric = "faithfulness"\ntarget = "conversation"\n',
            named=("rules.0.target",),
        ),
        "duplicate rule names": Mistake(rules=RULE + RULE, named=("rules.1.name", "bias-llm")),
        "a bad rules_entrypoint": Mistake(
            keys={"rules_entrypoint": '"no_such_module:rules"'},
            rules="",
            named=("rules_entrypoint", "no_such_module"),
        ),
        "a rules_entrypoint returning no Rule objects": Mistake(
            keys={"rules_entrypoint": '"os:getcwd"'},
            rules="",
            named=("rules_entrypoint", "expected a list of Rule objects"),
        ),
        "a missing API-key variable": Mistake(
            keys={"judge_api_key_env": '"SPANJUDGE_TEST_NO_SUCH_KEY"'},
            named=("judge_api_key_env", "SPANJUDGE_TEST_NO_SUCH_KEY"),
        ),
        "an OpenAI judge without OPENAI_API_KEY": Mistake(
            keys={"judge_model": '"gpt-4o-mini"', "judge_base_url": None},
            named=("judge_api_key_env", "OPENAI_API_KEY"),
        ),
        "an empty judge_model": Mistake(keys={"judge_model": '""'}, named=("judge_model:",)),
        "a typo in judge_options": Mistake(
            keys={"judge_options": "{ temprature = 0 }"}, named=("judge_options", "temperature")
        ),
        "judge_options holding a key of its own": Mistake(
            keys={"judge_options": "{ timeout = 5 }"}, named=("judge_options", "judge_timeout")
        ),
        "judge_base_url without a scheme": Mistake(
            keys={"judge_base_url": '"localhost:8000/v1"'}, named=("judge_base_url:",)
        ),
        "downstream_endpoint not a URL": Mistake(
            keys={"downstream_endpoint": '"not a url"'}, named=("downstream_endpoint:",)
        ),
        "settle_seconds 1e308": Mistake(
            keys={"settle_seconds": "1e308"}, named=("settle_seconds:", "86400")
        ),
        "interval_seconds 1e308": Mistake(
            keys={"interval_seconds": "1e308"}, named=("interval_seconds:",)
        ),
        "a misspelt key": Mistake(
            keys={"recever_port": "4318"}, named=("recever_port: unknown key",)
        ),
        "an empty bearer_token": Mistake(keys={"bearer_token": '""'}, named=("bearer_token:",)),
        "an unsupported store scheme": Mistake(
            keys={"store_url": '"mysql://db/spans"'}, named=("store_url:", "mysql")
        ),
        "an empty store_url": Mistake(keys={"store_url": '""'}, named=("store_url:",)),
        "store_schema with SQLite": Mistake(
            keys={"store_schema": '"spans"'}, named=("store_schema:",)
        ),
        "an unwritable store URL": Mistake(
            keys={"store_url": '"sqlite:///{tmp}/a-file/spans.db"'}, named=("store_url:",)
        ),
        "a store file that is no database": Mistake(
            keys={"store_url": '"sqlite:///{tmp}/a-file"'}, named=("store_url:",)
        ),
        "PostgreSQL down": Mistake(
            keys={"store_url": '"postgresql://app:pg-secret@127.0.0.1:{closed}/test"'},
            code=1,
            named=("store_url:", "PostgreSQL"),
        ),
        "a PostgreSQL database that does not exist": Mistake(
            keys={"store_url": f'"{unknown_db}"'}, named=("store_url:", "does not exist")
        ),
        "a taken port": Mistake(
            keys={"receiver_port": "{taken}"}, code=1, named=("receiver_port:", "in use")
        ),
        "a host that is not this machine's": Mistake(
            # 192.0.2.0/24 is reserved for documentation: never a local address
            keys={"receiver_host": '"192.0.2.1"', "bearer_token": '"a-token"'},
            named=("receiver_host:",),
        ),
        "a SPANJUDGE_ variable that is not JSON": Mistake(
            env={"SPANJUDGE_OUTPUTS": "span"}, named=("SPANJUDGE_OUTPUTS",)
        ),
    }


MISTAKES = _mistakes()


@dataclass(frozen=True)
class Outcome:
    code: int | None  # None: still running when the cases were given up on (it started)
    out: str
    err: str
    port: int  # the case's receiver_port
    listened: bool  # something answered on it while the worker ran


# A mistake stops the worker within seconds; one still running after this long has started
# (the regression the test looks for), and is stopped.
GIVE_UP_SECONDS = 90


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every case's worker run, started all at once (each is a process that imports the
    package: about a second of CPU) while a stand-in judge and a program on the taken port
    listen."""
    with socket.socket() as judge, socket.socket() as taken:
        for sock in (judge, taken):
            sock.bind(("127.0.0.1", 0))
            sock.listen()
        judge_port, taken_port = judge.getsockname()[1], taken.getsockname()[1]
        started = {}
        for name, mistake in MISTAKES.items():
            port = free_port()
            folder = tmp_path_factory.mktemp("mistake")
            path = worker_file(folder, judge_port, mistake, port, taken_port)
            started[name] = (run_worker(path, mistake.env), port)
        deadline = time.monotonic() + GIVE_UP_SECONDS
        found = {}
        for name, (process, port) in started.items():
            try:
                out, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
                found[name] = Outcome(process.returncode, out, err, port, listened=False)
            except subprocess.TimeoutExpired:
                listened = accepts(port)
                process.kill()
                out, err = process.communicate()
                found[name] = Outcome(None, out, err, port, listened=listened)
        yield found


def worker_file(tmp_path: Path, judge_port: int, mistake: Mistake, port: int, taken: int) -> Path:
    keys: dict[str, str | None] = {
        "store_url": f'"sqlite:///{tmp_path}/spans.db"',
        "receiver_port": str(port),
        "judge_model": '"openai/scripted-judge"',
        "judge_base_url": f'"http://127.0.0.1:{judge_port}/v1"',
        "outputs": '["span"]',
        "downstream_endpoint": f'"http://127.0.0.1:{closed_port()}"',
    }
    keys.update(mistake.keys)
    lines = [f"{key} = {value}" for key, value in keys.items() if value is not None]
    text = "\n".join(lines) + "\n\n" + mistake.rules
    text = text.replace("{tmp}", str(tmp_path)).replace("{closed}", str(closed_port()))
    path = tmp_path / "worker.toml"
    path.write_text(text.replace("{taken}", str(taken)), encoding="utf-8")
    (tmp_path / "a-file").write_text("not a database\n", encoding="utf-8")
    return path


def run_worker(path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    environment = {k: v for k, v in os.environ.items() if k not in CLEARED}
    environment.update(env)
    return subprocess.Popen(
        [sys.executable, "-m", "spanjudge.cli", "worker", "--config", str(path)],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_at_least_the_nineteen_mistakes_of_the_report_are_covered() -> None:
    assert len(MISTAKES) >= 19


@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_setup_mistake_is_one_line_naming_the_key_before_anything_listens(
    name: str, outcomes: dict[str, Outcome]
) -> None:
    mistake, outcome = MISTAKES[name], outcomes[name]
    err = outcome.err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err + outcome.out, err
    assert outcome.code is not None, f"the worker started and kept running: {err}"
    assert not outcome.listened
    assert outcome.code == mistake.code, err
    assert len(lines) == 1, err  # one line: nothing logged before it, no hint on a second line
    assert lines[0].startswith("error: "), err
    for part in mistake.named:
        assert part in lines[0], err
    assert "listening" not in err
    assert not accepts(outcome.port)  # never listened: nothing is there now
    assert "pg-secret" not in err  # a password in store_url stays out of the message


def test_a_judge_that_does_not_answer_is_a_warning_and_the_worker_starts(
    tmp_path: Path,
) -> None:
    """Not fatal (the judge may come up later): one WARNING naming judge_base_url, then the
    worker serves; an option spanjudge does not know (provider-specific) is a warning too."""
    port = free_port()
    judge = closed_port()
    mistake = Mistake(keys={"judge_options": '{ vertex_project = "p" }'})
    path = worker_file(tmp_path, judge, mistake, port, taken=0)
    process = run_worker(path, {})
    try:
        assert process.stderr is not None
        seen: list[str] = []
        for line in process.stderr:
            seen.append(line)
            if "listening on" in line or process.poll() is not None:
                break
        assert any("listening on" in line for line in seen), "".join(seen)
        warnings = [line for line in seen if " WARNING " in line and "listening" not in line]
        assert len(warnings) == 2, "".join(seen)
        unreachable, unknown = sorted(warnings, key=lambda line: "judge_options" in line)
        assert f"judge_base_url: the judge at http://127.0.0.1:{judge}/v1 does not answer" in (
            unreachable
        )
        assert "judge_options: vertex_project" in unknown
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
    assert process.returncode == 0, rest
    assert "Traceback" not in rest
