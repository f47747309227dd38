"""Every exception spanjudge raises to your code, under one base, :class:`SpanjudgeError`.

The tree (``docs/reference/errors.md`` says when each is raised and what to catch):

    SpanjudgeError
    ├── ConfigError          (also a ValueError)
    │   └── ParamError
    ├── FeedbackError        (also a ValueError)
    ├── StoreError
    ├── JudgeError
    │   ├── JudgeTimeoutError
    │   ├── JudgeRateLimitError
    │   ├── JudgeConnectionError
    │   ├── JudgeServerError
    │   └── JudgeResponseError
    ├── MetricError          (also a RuntimeError)
    └── MissingFieldError    (also a ValueError)

The classes keep the builtin base they had before the tree existed, so code that catches
``ValueError`` or ``RuntimeError`` still catches them. This module is the bottom layer of the
package (stdlib only): any layer may raise these, and ``import spanjudge`` exports them without
loading anything else.

Example::

    import spanjudge

    try:
        spanjudge.feedback(trace_id="0" * 32, metric="faithfulness", label="maybe")
    except spanjudge.SpanjudgeError as exc:
        print(type(exc).__name__, exc)
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ConfigError",
    "FeedbackError",
    "JudgeConnectionError",
    "JudgeError",
    "JudgeRateLimitError",
    "JudgeResponseError",
    "JudgeServerError",
    "JudgeTimeoutError",
    "MetricError",
    "MissingFieldError",
    "ParamError",
    "SpanjudgeError",
    "StoreError",
]

# a judge's unparseable answer is kept for the message, cut so a runaway answer stays readable
_MAX_RAW_IN_ERROR = 500


class SpanjudgeError(Exception):
    """The base of every exception spanjudge raises; catch it to catch them all."""


# ------------------------------------------------------------------------------ configuration
class ConfigError(SpanjudgeError, ValueError):
    """A setting or an argument is invalid (a worker config key, `Rule(sample_rate=2)`,
    `observe(kind="x")`, a bad dataset file); the message names every bad key."""


class ParamError(ConfigError):
    """A metric parameter is wrong; ``key`` names it (``"evaluation_params"``, ``"name"``...).

    The worker's config loader turns it into ``rules.N.params.<key>: <message>``.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


# ------------------------------------------------------------------------------ feedback
class FeedbackError(SpanjudgeError, ValueError):
    """Feedback refused; the message names the field. ``status``: 400 bad input, 404 unknown
    target (what ``POST /v1/feedback`` answers)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------ store
class StoreError(SpanjudgeError):
    """A store call failed (database locked, disk full, connection lost, file deleted...).

    The original driver exception is chained as ``__cause__``. The store stays usable: the next
    call opens a fresh connection.
    """


# ------------------------------------------------------------------------------ judge
class JudgeError(SpanjudgeError):
    """A judge call failed; ``error_type`` is what evaluation spans carry as ``error.type``."""

    error_type = "judge_error"
    retryable = False

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class JudgeTimeoutError(JudgeError):
    """The judge did not answer within its timeout (retried)."""

    error_type = "judge_timeout"
    retryable = True


class JudgeRateLimitError(JudgeError):
    """The judge's server answered 429 (retried, after its Retry-After when it sends one)."""

    error_type = "judge_rate_limited"
    retryable = True


class JudgeConnectionError(JudgeError):
    """The judge's server could not be reached (retried)."""

    error_type = "judge_connection"
    retryable = True


class JudgeServerError(JudgeError):
    """The judge's server answered 5xx (retried)."""

    error_type = "judge_server_error"
    retryable = True


class JudgeResponseError(JudgeError):
    """The judge kept answering with text that is not valid JSON for the schema."""

    error_type = "judge_invalid_response"

    def __init__(self, message: str, *, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw[:_MAX_RAW_IN_ERROR]


# ------------------------------------------------------------------------------ metrics
class MetricError(SpanjudgeError, RuntimeError):
    """A metric could not produce a score; ``error_type`` says why, ``__cause__`` has the detail.

    Example::

        try:
            metric.measure(case)
        except MetricError as exc:
            print(exc.error_type)   # e.g. "judge_timeout"
    """

    def __init__(self, metric: str, error_type: str, message: str) -> None:
        super().__init__(f"{metric}: {message}")
        self.metric = metric
        self.error_type = error_type


class MissingFieldError(SpanjudgeError, ValueError):
    """The test case lacks a field the metric requires; ``fields`` names them."""

    error_type = "missing_field"

    def __init__(self, metric: str, fields: Sequence[str]) -> None:
        self.metric = metric
        self.fields = list(fields)
        super().__init__(
            f"{metric} needs {', '.join(self.fields)}: missing or empty in the test case"
        )


class ConfigTypeError(ConfigError, TypeError):
    """An argument has the wrong type (a metric where a judge was expected, a number for a name).

    Also a :class:`TypeError`, so code that catches the built-in keeps working.
    """
