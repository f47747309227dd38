"""Enrich mode: spans forwarded downstream with their scores written onto them.

:mod:`.forwarder` (the outbox forwarder), :mod:`.requests` (outbox items cut into OTLP requests).
"""

__all__ = ["MAX_HOLD_SECONDS"]

# The longest a span waits for its scores, by default: the worker's ``max_hold_seconds`` setting
# and the Enricher both name it (the settings sit above the stages, so the value lives here).
MAX_HOLD_SECONDS = 120.0
