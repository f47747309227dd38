"""The machinery of the agent recorders (``recorders/agent-<framework>.py``), beside ``harness.py``.

An agent recorder runs ``agent_scenario.TURNS`` in its framework against the scripted agent model
(``spanjudge.testing.agent_model``, started as a process of the project's venv, so it need not be
installed in the framework's venv) and exports its spans to ``harness.Capture``::

    import agent_harness
    import agent_scenario

    MODES = {"agent-mylib": harness.Mode(content_capture="on")}

    def record(rec: agent_harness.AgentRecording) -> None:
        # rec.openai_base_url: the scripted model; rec.traces_url: the capture server
        ... run every turn, check rec.outputs(...), flush the providers ...

    if __name__ == "__main__":
        agent_harness.main("agent-mylib", MODES, record)

Recordings land in ``tests/interop/fixtures/agents/<recording>/`` (one folder below the scenario
recordings, so the scenario's conformance tests, which read every ``fixtures/*/manifest.json``,
do not take them for theirs), with the same ``NNN-traces.pb`` bodies and a ``manifest.json``
that says ``"scenario": "agent"`` and counts the model calls made and expected.
The model's process is ``$AGENT_MODEL_PYTHON`` (default: the first of ``.ci-venv``, ``.venv`` in
the repository and ``/work/venv`` that exists).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import agent_scenario
import harness

REPO = harness.RECORD_DIR.parents[2]
FIXTURES_DIR = harness.FIXTURES_DIR / "agents"


def _model_python() -> str:
    if os.environ.get("AGENT_MODEL_PYTHON"):
        return os.environ["AGENT_MODEL_PYTHON"]
    for candidate in (REPO / ".ci-venv", REPO / ".venv", Path("/work/venv")):
        if (candidate / "bin" / "python").exists():
            return str(candidate / "bin" / "python")
    raise SystemExit("set AGENT_MODEL_PYTHON to a python with spanjudge installed")


class AgentModel:
    """``python -m spanjudge.testing.agent_model`` playing ``agent_scenario.script()``."""

    def __init__(self, workdir: Path, handoff: agent_scenario.HandOffShape | None = None) -> None:
        self.script_path = workdir / "script.json"
        self.log_path = workdir / "calls.jsonl"
        self.script_path.write_text(json.dumps(agent_scenario.script(handoff)))
        self._process = subprocess.Popen(
            [
                _model_python(),
                # runpy warns that the package __init__ imported the module it runs: harmless
                "-W",
                "ignore::RuntimeWarning",
                "-m",
                "spanjudge.testing.agent_model",
                "--script",
                str(self.script_path),
                "--port",
                "0",
                "--log",
                str(self.log_path),
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert self._process.stdout is not None
        self.base_url = self._process.stdout.readline().strip()
        if not self.base_url.startswith("http"):
            self.stop()
            raise SystemExit(f"the agent model did not start: {self.base_url!r}")

    @property
    def calls(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line]

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(10)


@dataclass
class AgentRecording:
    """What an agent recorder's ``record`` gets: the model, the capture server, a notebook."""

    recording: str
    library: str
    model: AgentModel
    capture: harness.Capture
    notes: list[str] = field(default_factory=list)

    @property
    def openai_base_url(self) -> str:
        return self.model.base_url

    @property
    def traces_url(self) -> str:
        return self.capture.endpoint + "/v1/traces"

    @property
    def logs_url(self) -> str:
        return self.capture.endpoint + "/v1/logs"

    def note(self, text: str) -> None:
        self.notes.append(text)

    def check_outputs(self, outputs: list[str]) -> None:
        """Raise unless each turn ended with the scenario's answer."""
        expected = [t.answer for t in agent_scenario.TURNS]
        if [o.strip() for o in outputs] != expected:
            raise SystemExit(f"unexpected agent outputs: {json.dumps(outputs, indent=1)}")


@contextmanager
def _servers(
    out_dir: Path, handoff: agent_scenario.HandOffShape | None
) -> Iterator[tuple[AgentModel, harness.Capture]]:
    with tempfile.TemporaryDirectory() as workdir:
        model = AgentModel(Path(workdir), handoff)
        capture = harness.Capture(out_dir).start()
        try:
            yield model, capture
        finally:
            capture.stop()
            model.stop()


def run_one(
    library: str,
    name: str,
    mode: harness.Mode,
    record: Callable[[AgentRecording], None],
    handoff: agent_scenario.HandOffShape | None = None,
) -> None:
    """Record ``name`` in this process (its env already set) and write the manifest."""
    out_dir = FIXTURES_DIR / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    with _servers(out_dir, handoff) as (model, capture):
        os.environ["OPENAI_BASE_URL"] = model.base_url
        os.environ.setdefault("OPENAI_API_KEY", "sk-interop-fake")
        rec = AgentRecording(name, library, model, capture)
        record(rec)
        capture.wait_quiet()
        calls = model.calls
    installed = {
        d.metadata["Name"]: d.version
        for d in metadata.distributions()
        if d.metadata["Name"] not in ("pip", "setuptools", "wheel")
    }
    expected_calls = sum(len(t.expected(handoff).model_calls) for t in agent_scenario.TURNS)
    manifest = {
        "recording": name,
        "library": library,
        "scenario": "agent",
        "content_capture": mode.content_capture,
        "env": mode.env,
        "packages": {n: harness._version(n) for n in harness._pinned_names()},
        "installed": dict(sorted(installed.items(), key=lambda kv: kv[0].lower())),
        "python": platform.python_version(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "bodies": {"traces": capture.counts["traces"], "logs": capture.counts["logs"]},
        "metrics_bodies_ignored": capture.counts["metrics_ignored"],
        "chat_completion_calls": len(calls),
        "model_calls_expected": expected_calls,
        "handoff": (handoff or agent_scenario.HandOffShape()).to_dict(),
        "streamed_calls": sum(1 for c in calls if c.get("stream")),
        "turns": len(agent_scenario.TURNS),
        "notes": rec.notes,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(
        f"{name}: {capture.counts['traces']} trace bodies, {capture.counts['logs']} log bodies, "
        f"{len(calls)} chat calls ({expected_calls} expected) -> {out_dir}"
    )
    if capture.counts["traces"] == 0:
        raise SystemExit(f"{name}: no trace body arrived")


def main(
    library: str,
    modes: dict[str, harness.Mode],
    record: Callable[[AgentRecording], None],
    handoff: agent_scenario.HandOffShape | None = None,
) -> None:
    """CLI of an agent recorder: ``agent-<framework>.py [RECORDING ...]``, as ``harness.main``;
    ``handoff``: the framework's shape of the hand-off (``agent_scenario.HandOffShape``)."""
    names = sys.argv[1:] or list(modes)
    unknown = [n for n in names if n not in modes]
    if unknown:
        raise SystemExit(f"unknown recording(s) {unknown}; {library} has {list(modes)}")
    if os.environ.get("INTEROP_CHILD") == names[0] and len(names) == 1:
        run_one(library, names[0], modes[names[0]], record, handoff)
        return
    for name in names:
        env = dict(os.environ, **modes[name].env, INTEROP_CHILD=name, PYTHONSAFEPATH="1")
        if subprocess.run([sys.executable, sys.argv[0], name], env=env).returncode != 0:
            raise SystemExit(f"recording {name} failed")
