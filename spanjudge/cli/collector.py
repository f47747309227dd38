"""``spanjudge collector-config``: the Collector pipeline in front of one or more worker groups.

:func:`render` writes an OpenTelemetry Collector (contrib) configuration from the worker's
rules: a ``traces/spanjudge`` pipeline that pre-samples with ``probabilistic_sampler`` in
proportional mode at :func:`~spanjudge.evaluators._plan.sampler.upstream_rate` (so
the Collector drops what no rule can ever pick; left out, with the reason, when a rule samples
otherwise) and hands the rest to the ``loadbalancing`` exporter, which sends every span of a
trace (or of a conversation) to the same worker group.

Two facts of the Collector shape the output (both cited in docs/deploy.md):

* the ``loadbalancing`` exporter speaks OTLP/gRPC only, and the worker receives OTLP/HTTP, so
  each worker group is reached through a Collector of its own (``--workers`` lists those
  Collectors' gRPC endpoints), which forwards to its workers with ``otlphttp`` as
  deploy/collector/child-span.yaml does;
* ``sampling_percentage`` is a 32-bit float: :func:`percentage` checks that the percentage
  written gives the Collector the threshold the rules use.

Example::

    from spanjudge.cli.collector import render
    print(render(rules, ["group-a:4317", "group-b:4317"]))
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Literal

from spanjudge.errors import ConfigError
from spanjudge.evaluators._plan.consistent import (
    DEFAULT_PRECISION,
    MIN_PROBABILITY,
    threshold_for,
)
from spanjudge.evaluators._plan.sampler import (
    SamplingRule,
    presample_blockers,
    upstream_rate,
)
from spanjudge.tracer._attributes import GEN_AI_CONVERSATION_ID

RouteBy = Literal["auto", "trace", "conversation"]
ROUTE_BY: tuple[RouteBy, ...] = ("auto", "trace", "conversation")
DEFAULT_WORKERS = ("spanjudge-group-a:4317",)


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _next_float32(value: float) -> float:
    bits = struct.unpack("I", struct.pack("f", value))[0]
    return float(struct.unpack("f", struct.pack("I", bits + 1))[0])


def collector_threshold(text: str) -> int:
    """The rejection threshold the Collector's proportional sampler computes from a
    ``sampling_percentage`` written as ``text`` (float32, over 100, 4 hex digits)."""
    # like the processor: over 100% is 100%, under 2**-56 is 2**-56
    ratio = min(1.0, max(MIN_PROBABILITY, _float32(float(text)) / 100))
    return threshold_for(ratio, DEFAULT_PRECISION)


def percentage(rate: float) -> str:
    """``rate`` (in (0, 1]) as the Collector's ``sampling_percentage`` text.

    The processor reads the percentage into a float32 and computes its threshold from
    ``float64(percent) / 100``; the shortest decimal whose threshold there equals the one the
    rules use for ``rate`` is returned. Where float32 cannot give it (rates within about 1e-7
    of 100%), the smallest float32 percentage whose threshold is lower (so the Collector keeps
    at least every trace the rules can pick) is returned: compare with
    :func:`collector_threshold`.

    Example::

        >>> percentage(0.02), percentage(1 / 3), percentage(1.0)
        ('2', '33.333', '100')
    """
    if not 0.0 < rate <= 1.0:
        raise ConfigError(f"rate must be in (0, 1], got {rate!r}")
    want = threshold_for(max(rate, MIN_PROBABILITY), DEFAULT_PRECISION)
    for digits in range(1, 10):
        text = format(Decimal(f"{rate * 100:.{digits}g}"), "f")
        # the processor refuses a percentage under 2**-56 (as a ratio) at start-up
        if _float32(float(text)) / 100 >= MIN_PROBABILITY and collector_threshold(text) == want:
            return text
    value = _float32(max(rate, MIN_PROBABILITY) * 100)
    while value / 100 < MIN_PROBABILITY or collector_threshold(f"{value:.9g}") > want:
        value = _next_float32(value)
    return format(Decimal(f"{value:.9g}"), "f")


def _conversational(rules: Sequence[SamplingRule]) -> list[str]:
    return [r.name for r in rules if r.target == "conversation" or r.sample_by == "conversation"]


def _sampler_lines(rules: Sequence[SamplingRule]) -> tuple[list[str], list[str]]:
    """(processor definition lines, pipeline processor names) for the pre-sampler."""
    blockers = presample_blockers(rules)
    if blockers:
        lines = [
            "  # No probabilistic_sampler: the Collector cannot drop traces for these rules,",
            "  # which do not sample by trace at a fixed rate:",
            *[f"  #   {name}: {why}" for name, why in blockers],
            '  # Give every rule sample_by = "trace" (and a sample_rate, no budget target) to',
            "  # let the Collector pre-sample.",
        ]
        return lines, []
    rate = upstream_rate(rules)
    if rate <= 0.0:
        return ["  # Every rule samples at rate 0: nothing is sent to the workers."], []
    text = percentage(rate)
    inexact = collector_threshold(text) != threshold_for(rate, DEFAULT_PRECISION)
    lines = [
        f"  # Keeps {text}% of the traces: the highest rate of the rules, all of which",
        "  # sample by trace, so every trace a rule can pick still reaches its worker. Spans",
        "  # should arrive without an SDK sampler's th (AlwaysOn / ParentBased(AlwaysOn)):",
        "  # proportional mode multiplies an arriving probability by this one.",
        *(
            ["  # (float32 cannot hold the exact rate: this keeps slightly more traces)"]
            if inexact
            else []
        ),
        "  probabilistic_sampler/spanjudge:",
        "    mode: proportional",
        f"    sampling_percentage: {text}",
        f"    sampling_precision: {DEFAULT_PRECISION}",
        "    # a span whose tracestate it cannot read passes; the worker decides it by trace id",
        "    fail_closed: false",
    ]
    return lines, ["probabilistic_sampler/spanjudge"]


def _routing_lines(rules: Sequence[SamplingRule], route_by: RouteBy) -> list[str]:
    conversational = _conversational(rules)
    by_conversation = route_by == "conversation" or (route_by == "auto" and conversational)
    if not by_conversation:
        return [
            "    # every span of a trace goes to the same worker group",
            "    routing_key: traceID",
        ]
    why = ", ".join(conversational) if conversational else "--route-by conversation"
    return [
        f"    # wanted by: {why}",
        "    # Conversation rules need every turn of a conversation in one group, so spans are",
        "    # routed by the conversation id (routing_key: attributes, in recent releases). Every",
        "    # span must carry it, or its trace is split across groups: spanjudge's",
        "    # conversation() block sets it on each span started inside; with other tracers",
        "    # copy it onto every span (e.g. from baggage). Otherwise use routing_key: traceID",
        "    # and give conversation rules a single group.",
        "    routing_key: attributes",
        f"    routing_attributes: [{GEN_AI_CONVERSATION_ID}]",
    ]


def render(
    rules: Sequence[SamplingRule],
    workers: Sequence[str] = DEFAULT_WORKERS,
    route_by: RouteBy = "auto",
) -> str:
    """The Collector configuration (YAML text with comments) for ``rules`` and the worker
    groups' OTLP/gRPC endpoints ``workers``."""
    if not workers or any(not w or ":" not in w or " " in w for w in workers):
        raise ConfigError(f"workers must be host:port endpoints, got {list(workers)!r}")
    if route_by not in ROUTE_BY:
        raise ConfigError(f"route_by must be one of {', '.join(ROUTE_BY)}, got {route_by!r}")
    sampler, sampler_names = _sampler_lines(rules)
    processors = ["memory_limiter", *sampler_names, "batch"]
    lines = [
        "# OpenTelemetry Collector (contrib) in front of spanjudge worker groups, written by",
        "# `spanjudge collector-config`. Merge the traces/spanjudge pipeline into your",
        "# Collector; your other pipelines (to Jaeger, Tempo...) keep every span.",
        "#",
        "#   app --OTLP--> collector --traces/spanjudge: pre-sample, route by trace-->",
        "#       worker group Collector (OTLP/gRPC) --otlphttp--> its workers and store",
        "#",
        "# The loadbalancing exporter speaks OTLP/gRPC only; each group's Collector receives",
        "# on 4317 and forwards with otlphttp (see deploy/collector/child-span.yaml).",
        "receivers:",
        "  otlp:",
        "    protocols:",
        "      grpc:",
        "        endpoint: 0.0.0.0:4317",
        "      http:",
        "        endpoint: 0.0.0.0:4318",
        "",
        "processors:",
        "  memory_limiter:",
        "    check_interval: 1s",
        "    limit_percentage: 80",
        "    spike_limit_percentage: 20",
        *sampler,
        "  batch:",
        "    send_batch_size: 512",
        "    timeout: 2s",
        "",
        "exporters:",
        "  # renamed load_balancing in recent releases; loadbalancing stays a working alias",
        "  loadbalancing/spanjudge:",
        *_routing_lines(rules, route_by),
        "    protocol:",
        "      otlp:",
        "        compression: gzip",
        "        tls:",
        "          insecure: true",
        "        retry_on_failure:",
        "          enabled: true",
        "          max_elapsed_time: 300s",
        "        sending_queue:",
        "          enabled: true",
        "          queue_size: 5000",
        "    resolver:",
        "      static:",
        "        hostnames:",
        *[f"          - {worker}" for worker in workers],
        "",
        "service:",
        "  pipelines:",
        "    traces/spanjudge:",
        "      receivers: [otlp]",
        f"      processors: [{', '.join(processors)}]",
        "      exporters: [loadbalancing/spanjudge]",
        "",
        "# Each group's Collector (one per hostname above), in short; a group's workers share",
        "# its store, and the otlphttp exporter retries on the worker's 503 + Retry-After:",
        "#   receivers: {otlp: {protocols: {grpc: {endpoint: 0.0.0.0:4317}}}}",
        "#   exporters: {otlphttp/spanjudge: {endpoint: http://<its worker>:4318}}",
        "#   service: {pipelines: {traces: {receivers: [otlp], exporters: [otlphttp/spanjudge]}}}",
    ]
    return "\n".join(lines) + "\n"


def parse_workers(text: str | None) -> list[str]:
    """``--workers`` (``host:port,host:port``) as a list; the default group when unset."""
    if text is None:
        return list(DEFAULT_WORKERS)
    workers = [w.strip() for w in text.split(",") if w.strip()]
    for worker in workers:
        host, sep, port = worker.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"--workers: {worker!r} is not host:port")
    if not workers:
        raise ConfigError("--workers: give at least one host:port")
    return workers
