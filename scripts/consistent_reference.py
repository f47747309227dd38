"""Ask OpenTelemetry's JavaScript SDK which traces it keeps, to check spanjudge agrees.

    python scripts/consistent_reference.py --rates 0.01,0.02 --ids ids.txt [--prefix DIR]

Installs the pinned npm package ``@opentelemetry/sampler-composite`` (the SDK's consistent
probability sampler, see ``PACKAGE``) into ``--prefix`` (a throwaway directory; a fresh
temporary one by default), then runs a small Node program over the trace ids in ``--ids``
(one a line: ``<trace id>`` or ``<trace id> <tracestate>``). For each rate it builds
``createCompositeSampler(createComposableProbabilitySampler(rate))``, calls its
``shouldSample`` for every id and prints one JSON object on stdout::

    {"package": "@opentelemetry/sampler-composite@0.222.0",
     "rates": {"0.01": {"threshold": "fd70a3d70a3d71", "kept": "0100..."}}}

``threshold`` is the rejection threshold the sampler reports (all 14 hex digits, or ``max``
for a probability too small to express); ``kept`` has one character per id, ``1`` when the SDK
samples the trace. tests/evaluators/online/test_consistent_reference.py compares it with
:mod:`spanjudge.evaluators._plan.consistent`.

Needs ``node`` (20 or later) and ``npm`` on the PATH and the npm registry reachable;
scripts/test must provision them where they are missing. Nothing the script installs is
committed: the package lives only under the prefix.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE = "@opentelemetry/sampler-composite"
VERSION = "0.222.0"
API = "@opentelemetry/api@1.9.0"

# our own program; it uses only the package's public entry points
_PROGRAM = r"""
const fs = require('fs');
const api = require('@opentelemetry/api');
const composite = require('@opentelemetry/sampler-composite');
const { SamplingDecision } = require('@opentelemetry/sdk-trace');

const [idsPath, ratesArg] = process.argv.slice(2);
const rows = fs.readFileSync(idsPath, 'utf8').split('\n').filter((l) => l.length > 0);
const parsed = rows.map((line) => {
  const space = line.indexOf(' ');
  if (space < 0) return { traceId: line, context: api.ROOT_CONTEXT };
  const traceId = line.slice(0, space);
  const parent = {
    traceId,
    spanId: '00f067aa0ba902b7',
    traceFlags: 1,
    isRemote: true,
    traceState: api.createTraceState(line.slice(space + 1)),
  };
  return { traceId, context: api.trace.setSpanContext(api.ROOT_CONTEXT, parent) };
});
const out = { rates: {} };
for (const rateText of ratesArg.split(',')) {
  const rate = Number(rateText);
  const inner = composite.createComposableProbabilitySampler(rate);
  const sampler = composite.createCompositeSampler(inner);
  const match = /threshold=([0-9a-f]+|max)/.exec(inner.toString());
  const threshold = match[1] === 'max' ? 'max' : match[1].padEnd(14, '0');
  const kept = new Array(parsed.length);
  for (let i = 0; i < parsed.length; i++) {
    const r = sampler.shouldSample(parsed[i].context, parsed[i].traceId, 'x', 0, {}, []);
    kept[i] = r.decision === SamplingDecision.RECORD_AND_SAMPLED ? '1' : '0';
  }
  out.rates[rateText] = { threshold, kept: kept.join('') };
}
process.stdout.write(JSON.stringify(out));
"""


def install(prefix: Path) -> None:
    """Install the pinned package (and the API it needs) under ``prefix``."""
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("consistent_reference: npm is not on the PATH (install node 20 + npm)")
    marker = prefix / "node_modules" / "@opentelemetry" / "sampler-composite" / "package.json"
    if marker.exists() and json.loads(marker.read_text()).get("version") == VERSION:
        return
    subprocess.run(
        [
            npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
            "--loglevel=error", f"{PACKAGE}@{VERSION}", API,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


def run(ids_path: Path, rates: list[str], prefix: Path) -> dict[str, object]:
    """Install, run the Node program over ``ids_path`` and return its answer."""
    node = shutil.which("node")
    if node is None:
        raise SystemExit("consistent_reference: node is not on the PATH (install node 20)")
    install(prefix)
    program = prefix / "decide.js"
    program.write_text(_PROGRAM)
    done = subprocess.run(
        [node, str(program), str(ids_path), ",".join(rates)],
        check=True,
        capture_output=True,
        text=True,
        cwd=prefix,
    )
    answer: dict[str, object] = json.loads(done.stdout)
    answer["package"] = f"{PACKAGE}@{VERSION}"
    return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=Path, required=True, help="file of trace ids, one a line")
    parser.add_argument("--rates", required=True, help="comma-separated probabilities")
    parser.add_argument("--prefix", type=Path, help="npm install directory (default: a temp dir)")
    args = parser.parse_args(argv)
    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    if args.prefix is not None:
        args.prefix.mkdir(parents=True, exist_ok=True)
        answer = run(args.ids, rates, args.prefix)
    else:
        with tempfile.TemporaryDirectory(prefix="consistent-ref-") as tmp:
            answer = run(args.ids, rates, Path(tmp))
    json.dump(answer, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
