"""Read what an OpenTelemetry ``InMemoryMetricReader`` collected, point by point.

The reader nests points as resource -> scope -> metric -> data points; tests only care about a
metric's name, a point's labels and its value::

    found = labelled_values(reader)
    assert found["spanjudge.evaluations"][(("label", "fail"),)] == 1
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader


def data_points(reader: InMemoryMetricReader) -> Iterator[tuple[str, Any]]:
    """(metric name, data point) for every point the reader holds now."""
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    yield metric.name, point


def labelled_values(reader: InMemoryMetricReader) -> dict[str, dict[tuple[Any, ...], Any]]:
    """metric name -> (sorted label pairs -> value) for every counter or gauge point."""
    found: dict[str, dict[tuple[Any, ...], Any]] = {}
    for name, point in data_points(reader):
        found.setdefault(name, {})[tuple(sorted(point.attributes.items()))] = point.value
    return found
