"""OTLP out: evaluation results in their OpenTelemetry forms, and the emitter that ships them.

:mod:`.evaluation_result` (a result as span, event and metric points), :mod:`.emitter` (delivery
without ever raising into the caller), :mod:`.span_forward` (serialized requests sent downstream).
"""
