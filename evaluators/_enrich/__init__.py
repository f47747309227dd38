"""Enrich mode: spans forwarded downstream with their scores written onto them.

:mod:`.forwarder` (the outbox forwarder), :mod:`.requests` (outbox items cut into OTLP requests).
"""
