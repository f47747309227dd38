"""Measurement harness shared by every runner script in this folder (stdlib only).

A runner script builds a :class:`Setup` (the variants to time, their shared argument, an
optional flush hook and some facts about itself) and hands it to :func:`main`. The harness
then either

* ``--standalone``: times every variant itself and prints one JSON summary on stdout, or
* (default) serves the orchestrator ``benchmarks/overhead.py`` over a line protocol:
  it prints ``{"event": "ready", ...}``, then answers each ``{"cmd": "run", "n": N,
  "round": R}`` read from stdin with ``{"event": "round", "us": {...}}`` and stops on
  ``{"cmd": "quit"}``. The orchestrator sends one round to each runner in turn, so the
  runners' measurements interleave instead of one runner owning a quiet (or noisy) minute.

Timing within a round is paired and interleaved: the round's N calls per variant are cut
into ``--slices`` chunks, and chunk after chunk every variant runs right after a fresh
undecorated chunk (A B A C A D, A B A C A D, ...). A variant's overhead is its time minus the
time of the undecorated chunks right before it. The order of the variants rotates each round.

Peers print banners and warnings; so that nothing but protocol lines reaches the
orchestrator, the protocol keeps a private duplicate of the real stdout and fd 1 is pointed
at stderr before the runner imports anything.

The ``us`` of a variant is the wall time of its chunks, each including the runner's flush
hook (the exporter draining what the chunk produced), divided by the number of calls.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

UNDECORATED = "undecorated"
WARMUP = 200  # calls per variant before any timing

# What every runner decorates: a trivial function with one short string argument, returning
# a short string, so a tracer's argument/return capture has real (small) content to record.
ARGUMENT = "What is the capital of France?"


def trivial(question: str) -> str:
    """The function every variant wraps; as cheap as a Python call with a result can be."""
    return question


@dataclass
class Setup:
    """What a runner measures. ``variants`` maps a name to a one-argument callable."""

    variants: dict[str, Callable[[str], Any]]
    flush: Callable[[], None] | None = None
    shutdown: Callable[[], dict[str, Any]] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    # Called after each variant's warm-up and flush: what that variant's last span looked like.
    sample: Callable[[], Any] | None = None
    # Variants that could not be set up: name -> error text. Reported, never dropped.
    errors: dict[str, str] = field(default_factory=dict)
    # Calls made per variant (warm-up included), to check exported span counts against.
    calls: dict[str, int] = field(default_factory=dict)


def protect_stdout() -> TextIO:
    """Keep a private handle on the real stdout and send fd 1 (and ``sys.stdout``) to stderr."""
    sys.stdout.flush()
    private = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return private


def package_versions(*names: str) -> dict[str, str | None]:
    """Installed distribution versions, ``None`` for a missing one."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _time_ns(fn: Callable[[str], Any], n: int, flush: Callable[[], None] | None) -> int:
    """Nanoseconds for ``n`` calls of ``fn`` plus one flush."""
    arg = ARGUMENT
    loop = range(n)
    gc.collect()  # start every timed chunk with the same (empty) garbage backlog
    start = time.perf_counter_ns()
    for _ in loop:
        fn(arg)
    if flush is not None:
        flush()
    return time.perf_counter_ns() - start


def run_round(setup: Setup, n: int, round_index: int, slices: int = 10) -> dict[str, Any]:
    """One round: ``n`` calls per variant, cut into ``slices`` interleaved chunks.

    Chunk after chunk, every variant runs right after an undecorated chunk of the same size
    (A B A C A D, A B A C A D, ...), so all variants sample the same stretches of time and a
    burst of load from a neighbour hits them alike. Returns per-call and paired overhead
    microseconds per variant.
    """
    names = [name for name in setup.variants if name != UNDECORATED]
    if names:
        shift = round_index % len(names)
        names = names[shift:] + names[:shift]
    base_fn = setup.variants[UNDECORATED]
    slices = max(1, min(slices, n))
    chunk = n // slices
    calls = chunk * slices
    spent = dict.fromkeys(names, 0)
    base_spent = dict.fromkeys(names, 0)
    for _ in range(slices):
        for name in names:
            base_spent[name] += _time_ns(base_fn, chunk, None)
            spent[name] += _time_ns(setup.variants[name], chunk, setup.flush)
    if not names:
        base_spent["_"] = _time_ns(base_fn, calls, None)
    for name in names:
        setup.calls[name] = setup.calls.get(name, 0) + calls
    per_call = {name: spent[name] / calls / 1000.0 for name in names}
    overhead = {name: (spent[name] - base_spent[name]) / calls / 1000.0 for name in names}
    per_call[UNDECORATED] = statistics.median(v / calls / 1000.0 for v in base_spent.values())
    return {"us": per_call, "overhead_us": overhead}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians across rounds for every variant (per-call and paired overhead)."""
    names = list(rounds[0]["us"]) if rounds else []
    out: dict[str, Any] = {}
    for name in names:
        values = [r["us"][name] for r in rounds]
        entry: dict[str, Any] = {
            "per_call_us": statistics.median(values),
            "per_call_us_all": [round(v, 4) for v in values],
        }
        if name in rounds[0]["overhead_us"]:
            overheads = [r["overhead_us"][name] for r in rounds]
            entry["overhead_us"] = statistics.median(overheads)
            entry["overhead_us_min"] = min(overheads)
            entry["overhead_us_max"] = max(overheads)
        out[name] = entry
    return out


def profile(setup: Setup, name: str, n: int, top: int = 30) -> dict[str, Any]:
    """Deterministic profile of ``n`` calls of one variant: the functions with most own time.

    cProfile inflates every Python call, so the shares matter, not the absolute figures.
    """
    import cProfile
    import pstats

    fn = setup.variants[name]
    arg = ARGUMENT
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(n):
        fn(arg)
    if setup.flush is not None:
        setup.flush()
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    entries = stats.stats.items()  # type: ignore[attr-defined]
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in entries:
        rows.append(
            {
                "function": f"{func} ({filename}:{line})",
                "calls_per_call": round(nc / n, 2),
                "own_us_per_call": round(tt / n * 1e6, 3),
                "cum_us_per_call": round(ct / n * 1e6, 3),
                "own_share": round(tt / total, 4) if total else None,
            }
        )
    rows.sort(key=lambda r: r["own_us_per_call"], reverse=True)
    return {
        "event": "profile",
        "variant": name,
        "n": n,
        "profiled_us_per_call": round(total / n * 1e6, 3),
        "top_own_time": rows[:top],
        "top_cumulative": sorted(rows, key=lambda r: r["cum_us_per_call"], reverse=True)[:top],
    }


def _emit(stream: TextIO, payload: dict[str, Any]) -> None:
    stream.write(json.dumps(payload) + "\n")
    stream.flush()


def _python_info() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
    }


def main(
    build: Callable[[argparse.Namespace], Setup],
    extra_args: Callable[[argparse.ArgumentParser], None] | None = None,
) -> int:
    """Entry point of a runner script: parse flags, build the setup, serve or run standalone."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--standalone", action="store_true", help="time and print one summary")
    parser.add_argument("--n", type=int, default=20000, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (standalone only)")
    parser.add_argument(
        "--slices",
        type=int,
        default=10,
        help="interleaved chunks per round (each variant gets n/slices calls each)",
    )
    parser.add_argument(
        "--profile",
        metavar="VARIANT",
        help="cProfile N calls of one variant and print where the time goes",
    )
    if extra_args is not None:
        extra_args(parser)
    args = parser.parse_args()

    out = protect_stdout()
    try:
        setup = build(args)
    except Exception as exc:  # a peer that cannot even start is a result, not a crash
        _emit(
            out,
            {
                "event": "error",
                "stage": "setup",
                "error": repr(exc),
                "traceback": traceback.format_exc(limit=8),
                **_python_info(),
            },
        )
        return 2
    setup.info.update(_python_info())

    # Warm up every variant (imports, caches, first-span allocations) outside the timings.
    samples: dict[str, Any] = {}
    for name, fn in list(setup.variants.items()):
        try:
            for _ in range(WARMUP):
                fn(ARGUMENT)
            setup.calls[name] = setup.calls.get(name, 0) + WARMUP
            if setup.flush is not None:
                setup.flush()
            if setup.sample is not None:
                samples[name] = setup.sample()
        except Exception as exc:
            setup.errors[name] = f"warm-up failed: {exc!r}"
            del setup.variants[name]
    if samples:
        setup.info["sample_spans"] = samples

    if args.profile:
        _emit(out, profile(setup, args.profile, args.n))
        return 0

    if args.standalone:
        rounds = [run_round(setup, args.n, i, args.slices) for i in range(args.repeats)]
        extra = setup.shutdown() if setup.shutdown is not None else {}
        extra["calls_by_variant"] = setup.calls
        _emit(
            out,
            {
                "event": "summary",
                "info": setup.info,
                "errors": setup.errors,
                "n": args.n,
                "repeats": args.repeats,
                "variants": summarize(rounds),
                "shutdown": extra,
            },
        )
        return 0

    _emit(
        out,
        {
            "event": "ready",
            "info": setup.info,
            "errors": setup.errors,
            "variants": list(setup.variants),
        },
    )
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "run":
            try:
                result = run_round(
                    setup,
                    int(command["n"]),
                    int(command.get("round", 0)),
                    int(command.get("slices", args.slices)),
                )
            except Exception as exc:
                _emit(
                    out,
                    {
                        "event": "error",
                        "stage": "run",
                        "error": repr(exc),
                        "traceback": traceback.format_exc(limit=8),
                    },
                )
                return 3
            _emit(out, {"event": "round", **result})
        elif command["cmd"] == "quit":
            extra = setup.shutdown() if setup.shutdown is not None else {}
            extra["calls_by_variant"] = setup.calls
            _emit(out, {"event": "done", "shutdown": extra})
            return 0
    return 0
