"""``spanjudge worker``: OTLP/HTTP in, spans stored, rules evaluated, scores out.

:mod:`.service` (the worker process), :mod:`.ingest` (the ingest gate with backpressure),
:mod:`.rule_config` (rules and the judge from settings).
"""
