#!/usr/bin/env bash
# Create one virtual environment per peer tracer under bench-envs/ (gitignored).
#
# The peers pin OpenTelemetry and friends differently from each other and from spanjudge, so
# each gets its own venv; benchmarks/overhead.py runs each peer's runner script inside its venv.
# Idempotent: an existing venv whose marker file matches the requested spec is left alone.
# A peer that fails to install is reported and skipped; the benchmark then reports it with the
# error instead of dropping it.
#
# Usage: bash benchmarks/setup_peers.sh [langfuse|traceloop|deepeval ...]
#        PYTHON=python3.11 bash benchmarks/setup_peers.sh
set -u

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
ENVS="${BENCH_ENVS:-$ROOT/bench-envs}"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then
        # Same interpreter version as the project venv, so per-call costs compare fairly.
        PY="$("$ROOT/.venv/bin/python" -c 'import sys; print(sys._base_executable)')"
    else
        PY="python3"
    fi
fi

# name -> pip requirements (space separated), pinned exactly: reruns compare like with like.
# traceloop-sdk asks for six OpenTelemetry contrib instrumentations at ">=0.59b0" each; left
# open, pip backtracks for minutes and then gives up (the registry lacks some releases of some
# of them), so they are pinned to one contrib release that matches its OpenTelemetry 1.45.
OTEL_CONTRIB=0.66b1
TRACELOOP_CONTRIB=""
for inst in "" -logging -redis -requests -sqlalchemy -threading -urllib3; do
    TRACELOOP_CONTRIB="$TRACELOOP_CONTRIB opentelemetry-instrumentation$inst==$OTEL_CONTRIB"
done
declare -A SPEC=(
    [langfuse]="langfuse==5.0.4"
    # traceloop-sdk imports httpx without declaring it.
    [traceloop]="traceloop-sdk==0.62.4 httpx>=0.27$TRACELOOP_CONTRIB"
    [deepeval]="deepeval==4.3.1"
)

if [ "$#" -gt 0 ]; then PEERS=("$@"); else PEERS=(langfuse traceloop deepeval); fi

mkdir -p "$ENVS"
status=0
for peer in "${PEERS[@]}"; do
    spec="${SPEC[$peer]:-}"
    if [ -z "$spec" ]; then echo "unknown peer: $peer" >&2; status=1; continue; fi
    venv="$ENVS/$peer"
    marker="$venv/.spanjudge-spec"
    if [ -f "$marker" ] && [ "$(cat "$marker")" = "$spec" ] && [ -x "$venv/bin/python" ]; then
        echo "[$peer] up to date ($spec)"
        continue
    fi
    echo "[$peer] creating $venv with $spec"
    rm -rf "$venv"
    if ! "$PY" -m venv "$venv"; then echo "[$peer] venv creation failed" >&2; status=1; continue; fi
    # $spec unquoted on purpose: it may hold several requirements.
    # shellcheck disable=SC2086
    if "$venv/bin/python" -m pip install -q --disable-pip-version-check $spec \
        >"$ENVS/$peer.install.log" 2>&1; then
        printf '%s' "$spec" >"$marker"
        echo "[$peer] installed: $("$venv/bin/python" -m pip show "${spec%%[<>=]*}" 2>/dev/null | grep '^Version' )"
    else
        echo "[$peer] install FAILED, see $ENVS/$peer.install.log" >&2
        status=1
    fi
done
exit $status
