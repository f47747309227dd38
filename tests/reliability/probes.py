"""Small probes the reliability tests share: a healthy judge answer, a Prometheus reading and
an OTLP sink brought up on a given port."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry

from tests.support.otlp_sink import OtlpSink

# The healthy judge's answer: Bias finds no opinion, so it scores 0.0 (pass) in one call.
NO_OPINIONS = {"opinions": []}


def prom(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """Sum of the scraped samples ``name`` whose labels include ``labels`` (0 when none)."""
    total = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def sink_on_port(port: int) -> OtlpSink:
    """An :class:`OtlpSink` listening on ``port`` (a backend that comes back where it was)."""
    sink = OtlpSink()
    handler = sink._server.RequestHandlerClass
    sink._server.server_close()
    sink._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    sink._thread = threading.Thread(target=sink._server.serve_forever, daemon=True)
    return sink
