"""Segments: the few values a result is grouped by (service, version, model, agent, ...).

A result carries them in ``EvaluationRecord.segments`` so a pass rate can be read per service
version or per agent without going back to the spans (gone after retention). They are taken once,
when the result is made, from the evaluated target: ``service`` and ``service.version`` from its
resource, ``model`` and ``agent`` from the span's GenAI view (any dialect), and each attribute a
rule names in ``segment_keys`` (span attribute first, else resource attribute). Values are text,
cut to :data:`MAX_VALUE_CHARS`; a missing value is left out, never stored as ``""``.

Example::

    result_segments(target)                       # {"service": "shop", "model": "gpt-4o-mini"}
    result_segments(target, ("tenant.tier",))     # ... plus {"tenant.tier": "gold"}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from spanjudge.evaluators._rebuild.targets import Target

__all__ = [
    "AGENT",
    "BUILT_IN_KEYS",
    "MAX_VALUE_CHARS",
    "MODEL",
    "SERVICE",
    "SERVICE_VERSION",
    "result_segments",
    "segment_value",
]

SERVICE: Final = "service"
SERVICE_VERSION: Final = "service.version"
MODEL: Final = "model"
AGENT: Final = "agent"
BUILT_IN_KEYS: Final = (SERVICE, SERVICE_VERSION, MODEL, AGENT)
# a segment is a label value on a dashboard: a version, a model name, a tier, not a document
MAX_VALUE_CHARS: Final = 128
# at most this many rule-named keys are kept per result (the column stays small)
MAX_RULE_KEYS: Final = 8


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, (list, dict, tuple)):
        return None
    text = str(value).strip()
    return text[:MAX_VALUE_CHARS] if text else None


def result_segments(target: Target | None, segment_keys: Iterable[str] = ()) -> dict[str, str]:
    """The segment values of a result on ``target`` (empty without a target). Never raises:
    a value that cannot be read is left out."""
    if target is None:
        return {}
    out: dict[str, str] = {}
    span = target.span
    resource = span.resource if span is not None else {}
    values: list[tuple[str, Any]] = [
        (SERVICE, target.service_name),
        (SERVICE_VERSION, resource.get("service.version")),
    ]
    if span is not None:
        try:
            from spanjudge.evaluators._rebuild.dialects import read_span

            view = read_span(span)
            values += [(MODEL, view.model), (AGENT, view.agent_name)]
        except Exception:  # a segment is a nicety: the result is stored without it
            pass
        for key in list(segment_keys)[:MAX_RULE_KEYS]:
            found = span.attributes.get(key)
            values.append((key, found if found is not None else resource.get(key)))
    for key, value in values:
        text = _text(value)
        if text is not None:
            out[key] = text
    return out


def segment_value(segments: dict[str, str] | None, key: str) -> str | None:
    """The value of ``key`` in a result's segments (None when the result has none)."""
    return (segments or {}).get(key)
