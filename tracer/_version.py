"""The package version, owned by the tracer so the tracer never imports upward.

``spanjudge.__version__`` and the CLI's ``--version`` read it from here; the instrumentation scope
of every span carries it. A plain literal, so build tools read it without importing anything.
"""

__version__ = "0.1.0"
