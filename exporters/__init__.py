"""Span store, store exporter, score emitter, OTLP/HTTP receiver and metrics."""
