"""Helpers shared by the test suites, one concept per module; a suite imports them from here
rather than keeping its own copy:

- ``clock``: ``Clock``, the time a component reads, moved by hand;
- ``ports``: ``free_port`` / ``closed_port`` on 127.0.0.1;
- ``stores``: the test PostgreSQL URL, fresh schemas and ``stores_on`` (SQLite or PostgreSQL);
- ``sqlite_lock``: a SQLite file locked by another process;
- ``metrics``: the points an ``InMemoryMetricReader`` collected;
- ``otlp_sink``: a real OTLP/HTTP receiver that keeps what it was sent;
- ``span_switch``: one span processor on the global provider, pointed at the current test's.
"""
