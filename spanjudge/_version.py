"""The package version; the tracer owns it (it names the tracer's scope version, and the tracer
imports nothing above itself)."""

from spanjudge.tracer._version import __version__ as __version__
