"""Decorate a tiny RAG agent with @observe and print the spans it produces.

Runs offline: the "LLM" is a function that returns an OpenAI-style response dict, and the spans
go to an in-memory exporter instead of a backend.

    python examples/capture_spans.py
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanjudge import conversation, current_span, observe

DOCS = {
    "refunds": "Items can be returned within 30 days of delivery for a full refund.",
    "shipping": "Standard shipping takes 3 to 5 business days.",
}


@observe(kind="retriever")
def search(query: str) -> list[dict[str, Any]]:
    words = set(query.lower().split())
    return [
        {"id": doc_id, "score": float(len(words & set(text.lower().split()))), "content": text}
        for doc_id, text in DOCS.items()
    ]


@observe(kind="tool")
def lookup_order(order_id: str) -> dict[str, str]:
    return {"order_id": order_id, "status": "shipped"}


@observe(kind="llm", model="openai/gpt-4o-mini")
def chat(messages: list[dict[str, str]]) -> dict[str, Any]:
    answer = "You can return it within 30 days of delivery."
    return {
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 42, "completion_tokens": 11},
    }


@observe(kind="agent", name="support")
def support(question: str) -> str:
    context = "\n".join(d["content"] for d in search(question))
    lookup_order("1042")
    current_span().set_metadata(channel="example")
    response = chat(
        [
            {"role": "system", "content": f"Answer from this context:\n{context}"},
            {"role": "user", "content": question},
        ]
    )
    return str(response["choices"][0]["message"]["content"])


def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # in production: spanjudge.configure(...) instead

    with conversation("demo-conversation", user_id="u-1"):
        print("answer:", support("Can I return my blender?"))

    for span in exporter.get_finished_spans():
        parent = f" (child of {span.parent.span_id:016x})" if span.parent else ""
        print(f"\n{span.name}  span {span.context.span_id:016x}{parent}")
        for key, value in sorted(span.attributes.items()):
            if isinstance(value, str) and value[:1] in "[{":
                value = json.dumps(json.loads(value), ensure_ascii=False)
            print(f"    {key} = {value}")


if __name__ == "__main__":
    main()
