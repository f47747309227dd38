"""Capture side: ``@observe``, ``conversation()``, the current-span handle and capture policy.

Imports only OpenTelemetry and the standard library: this package sits on every request.
"""
