"""Backoff schedules, from tenacity: the judge's retries, the loop's job retries and enrich
mode's forwarding retries all wait by a tenacity ``wait`` strategy.

The judge retries inline with tenacity's ``Retrying``/``AsyncRetrying``. The online loop retries
across ticks (a job is released and claimed again later; an outbox entry is due again later), so
there is no call to wrap: :func:`delay_after` asks the same strategy objects for the delay
before attempt ``attempt + 1``.

Example::

    from tenacity import wait_exponential

    delay_after(wait_exponential(multiplier=1, max=60), attempt=3)   # 4.0
"""

from __future__ import annotations

from tenacity import RetryCallState
from tenacity.wait import wait_base


def delay_after(wait: wait_base, attempt: int) -> float:
    """Seconds ``wait`` prescribes after failed attempt number ``attempt`` (1-based)."""
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = max(1, attempt)
    return float(wait(state))
