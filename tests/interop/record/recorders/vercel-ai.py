"""Record the scenario traced by the Vercel AI SDK's built-in telemetry (Node: ``vercel-ai/``).

``record.sh vercel-ai`` runs this in a venv that installs nothing (the harness is stdlib only).
It installs the Node recorder with ``npm ci`` from ``vercel-ai/package.json`` +
``package-lock.json`` (exact pins) into ``interop-envs/vercel-ai/node`` (outside the repo tree,
so no node_modules lands beside the sources), copies ``record.mjs`` there and runs it with
``node``, passing the fake OpenAI server, the capture server and the scenario (as JSON) in its
environment. The manifest's ``packages`` are then the npm pins as installed (package-lock).

AI SDK 5 keeps OpenTelemetry built in: ``generateText({..., experimental_telemetry: {isEnabled:
true, functionId, metadata}})`` traces through the global ``@opentelemetry/api`` tracer provider
(ai 7 moved this to ``@ai-sdk/otel``). Session and user are telemetry ``metadata`` (``sessionId``,
``userId``), the documented way; turn 5 passes no ``sessionId``. Content capture is the
``recordInputs`` / ``recordOutputs`` default (true).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import harness
import scenario

LIBRARY = "vercel-ai"
HERE = Path(__file__).resolve().parent / "vercel-ai"
NODE_DIR = Path(__file__).resolve().parents[4] / "interop-envs" / "vercel-ai" / "node"
FILES = ("package.json", "package-lock.json", "record.mjs")

MODES = {
    "vercel-ai": harness.Mode(
        content_capture="on: experimental_telemetry recordInputs/recordOutputs default (true)"
    ),
}


def _scenario_json() -> str:
    return json.dumps(
        {
            "model": scenario.MODEL,
            "agent_name": scenario.AGENT_NAME,
            "user_id": scenario.USER_ID,
            "system_template": scenario.SYSTEM_PROMPT_TEMPLATE,
            "turns": [
                {
                    "question": t.question,
                    "session_id": t.session_id,
                    "documents": [
                        {"id": d.id, "score": d.score, "text": d.text} for d in t.documents()
                    ],
                }
                for t in scenario.TURNS
            ],
        }
    )


def _install() -> None:
    NODE_DIR.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy(HERE / name, NODE_DIR / name)
    subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_DIR, check=True
    )


def _npm_versions() -> dict[str, str]:
    """The pinned npm packages (package.json) with the versions package-lock installed."""
    wanted = json.loads((HERE / "package.json").read_text())["dependencies"]
    locked = json.loads((HERE / "package-lock.json").read_text())["packages"]
    return {name: locked[f"node_modules/{name}"]["version"] for name in sorted(wanted)}


def _node_version() -> str:
    return subprocess.run(
        ["node", "--version"], check=True, capture_output=True, text=True
    ).stdout.strip()


def record(rec: harness.Recording) -> None:
    _install()
    env = dict(
        os.environ,
        OPENAI_BASE_URL=rec.openai_base_url,
        INTEROP_TRACES_URL=rec.traces_url,
        INTEROP_SCENARIO=_scenario_json(),
    )
    done = subprocess.run(
        ["node", "record.mjs"], cwd=NODE_DIR, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"record.mjs failed ({done.returncode}):\n{done.stderr}")
    outputs = json.loads(done.stdout.strip().splitlines()[-1])
    if outputs != [t.answer for t in scenario.TURNS]:
        raise SystemExit(f"unexpected outputs: {outputs}\n{done.stderr}")
    rec.note(f"Node {_node_version()}; npm packages from package-lock: {_npm_versions()}")
    rec.note(
        "AI SDK 5 built-in telemetry: generateText(experimental_telemetry: {isEnabled: true,"
        " functionId: 'support-agent', metadata: {sessionId, userId}}); turn 5 has no sessionId"
    )
    rec.note(
        "no retrieval span: the app retrieves by itself and the AI SDK has no retrieval notion;"
        " the retrieved texts reach the trace only in the system prompt (generateText system)"
    )
    rec.note(
        "@opentelemetry/api pinned to 1.9.0, the exact version ai@5 depends on, so the"
        " registered NodeTracerProvider is the one ai's tracer uses (one API instance)"
    )


def _pin_npm_packages(recording: str) -> None:
    """The manifest's ``packages`` are the npm pins (the venv's pip pins are none)."""
    path = harness.FIXTURES_DIR / recording / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["packages"] = _npm_versions()
    path.write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    harness.main(LIBRARY, MODES, record)
    for name in sys.argv[1:] or list(MODES):
        _pin_npm_packages(name)
