#!/usr/bin/env bash
# Re-record interop fixtures: record.sh [LIBRARY[:RECORDING] ...]   (default: every library)
#
# LIBRARY names recorders/LIBRARY.py and requirements/LIBRARY.txt. For each: a venv in
# interop-envs/LIBRARY (made once; INTEROP_FRESH=1 makes it anew), pip installs the pins, runs the
# recorder (all its recordings, or just RECORDING) which writes fixtures/<recording>/*.pb and
# manifest.json, then summarize.py (project venv) writes each recording's SUMMARY.md.
# Overrides: INTEROP_PYTHON (python for new venvs), SUMMARY_PYTHON (python with opentelemetry-proto).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
ENVS="$REPO/interop-envs"
PYTHON="${INTEROP_PYTHON:-python3}"
SUMMARY_PYTHON="${SUMMARY_PYTHON:-$REPO/.ci-venv/bin/python}"

if [ "$#" -eq 0 ]; then
  set -- $(cd "$HERE/requirements" && ls *.txt | sed 's/\.txt$//')
fi

for arg in "$@"; do
  lib="${arg%%:*}"
  rec=""
  [ "$arg" != "$lib" ] && rec="${arg#*:}"
  reqs="$HERE/requirements/$lib.txt"
  [ -f "$reqs" ] || { echo "no $reqs" >&2; exit 2; }
  venv="$ENVS/$lib"
  if [ "${INTEROP_FRESH:-0}" = 1 ]; then rm -rf "$venv"; fi
  [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$reqs"
  echo "== $lib ${rec:-(all recordings)}"
  # PYTHONSAFEPATH: recorders/openinference.py must not shadow the package it records.
  INTEROP_REQUIREMENTS="$reqs" PYTHONPATH="$HERE" PYTHONSAFEPATH=1 \
    "$venv/bin/python" "$HERE/recorders/$lib.py" $rec
  if [ -n "$rec" ]; then
    PYTHONPATH="$HERE" "$SUMMARY_PYTHON" "$HERE/summarize.py" "$rec"
  else
    PYTHONPATH="$HERE" "$SUMMARY_PYTHON" "$HERE/summarize.py" --library "$lib"
  fi
done
