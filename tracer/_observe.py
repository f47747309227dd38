"""``@observe``: one GenAI span per call of a function, method, coroutine or (async) generator.

Everything that depends only on the function (span name, static attributes, which argument holds
the query or the messages) is worked out once, at decoration time, in a
:class:`~spanjudge.tracer._decoration_plan.Plan`; the wrappers in
:mod:`spanjudge.tracer._wrappers` start a span per call, and only if it is recording do they
capture anything.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from opentelemetry.util.types import AttributeValue

from spanjudge.tracer._attributes import Kind
from spanjudge.tracer._decoration_plan import Options, Plan, check_kind
from spanjudge.tracer._wrappers import (
    wrap_async_generator,
    wrap_coroutine,
    wrap_function,
    wrap_generator,
)

F = TypeVar("F", bound=Callable[..., Any])


def _decorate(fn: Any, kind: Kind, name: str | None, options: Options) -> Any:
    if isinstance(fn, (classmethod, staticmethod)):
        # @observe above @classmethod/@staticmethod: wrap the function, keep the descriptor.
        return type(fn)(_decorate(fn.__func__, kind, name, options))
    plan = Plan(fn, kind, name, options)
    if inspect.isasyncgenfunction(fn):
        wrapped = wrap_async_generator(fn, plan)
    elif inspect.iscoroutinefunction(fn):
        wrapped = wrap_coroutine(fn, plan)
    elif inspect.isgeneratorfunction(fn):
        wrapped = wrap_generator(fn, plan)
    else:
        wrapped = wrap_function(fn, plan)
    wrapped.__spanjudge_kind__ = kind  # type: ignore[attr-defined]
    return wrapped


@overload
def observe(kind: F, /) -> F: ...


@overload
def observe(
    kind: Kind = "chain",
    name: str | None = None,
    *,
    model: str | None = None,
    provider: str | None = None,
    description: str | None = None,
    tool_call_id: str | None = None,
    conversation_id_arg: str | None = None,
    input_arg: str | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
    capture_input: bool = True,
    capture_output: bool = True,
) -> Callable[[F], F]: ...


def observe(
    kind: Kind | Callable[..., Any] = "chain",
    name: str | None = None,
    *,
    model: str | None = None,
    provider: str | None = None,
    description: str | None = None,
    tool_call_id: str | None = None,
    conversation_id_arg: str | None = None,
    input_arg: str | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
    capture_input: bool = True,
    capture_output: bool = True,
) -> Any:
    """Record each call of the decorated function as an OpenTelemetry GenAI span.

    ``kind`` (a :data:`Kind`) is ``"agent"``, ``"llm"``, ``"retriever"``, ``"tool"`` or
    ``"chain"`` (the default); ``name`` defaults to the function's name. Keyword options:

    - ``model``, ``provider``: the request model and provider (an ``llm`` span is named
      ``chat {model}``; a litellm-style ``"openai/gpt-4o"`` also gives the provider). Without
      ``model``, an ``llm`` function's own ``model`` argument names each call's span.
    - ``description`` and ``tool_call_id`` (``tool``): a fixed description and call id; without
      an id, a ``tool_call_id`` argument or a fresh random id is used.
    - ``conversation_id_arg`` (``agent``): the argument holding the conversation id (default:
      ``conversation_id`` or ``session_id``).
    - ``input_arg``: the argument holding the input text or query (default: the first of
      ``input``, ``query``, ``question``, ``message``, ``prompt``, ``user_input``, ``text``).
    - ``attributes``: static extra span attributes.
    - ``capture_input`` / ``capture_output``: ``False`` keeps that payload off the span.

    An unknown option or kind raises at decoration time. The function behaves exactly as before:
    same results, same exceptions, same generator protocol::

        @observe(kind="retriever")
        def search(query: str) -> list[dict]:
            return [{"id": "d1", "score": 0.9, "content": "Refunds take 5 days."}]

        @observe  # a plain "chain" step
        def pipeline(question: str) -> str: ...
    """
    options = Options(
        model=model,
        provider=provider,
        conversation_id_arg=conversation_id_arg,
        input_arg=input_arg,
        tool_call_id=tool_call_id,
        description=description,
        attributes=attributes,
        capture_input=capture_input,
        capture_output=capture_output,
    )
    if callable(kind) or isinstance(kind, (classmethod, staticmethod)):
        return _decorate(kind, "chain", name, options)  # bare @observe: kind is the function
    check_kind(kind)  # a typo fails at import time rather than on the first call

    def decorator(fn: F) -> F:
        return _decorate(fn, kind, name, options)  # type: ignore[no-any-return]

    return decorator
