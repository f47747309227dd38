"""OTLP in: the wire format, decoding of traces and logs, the receiver app and its serving.

:mod:`.wire` (span bytes as received), :mod:`.decode` (trace requests), :mod:`.logs` (log
requests), :mod:`.receiver` (``/v1/traces``, ``/v1/logs``), :mod:`.feedback_route`
(``/v1/feedback``), :mod:`.serving` (uvicorn in the foreground or a thread).
"""
