"""Faithfulness: does the answer stay within what the retrieved context says?

Truths are extracted from the retrieval context and claims from the answer (concurrently); one
call then judges every claim against the truths. Score = claims not contradicted / claims::

    metric = FaithfulnessMetric(threshold=0.7)
    metric.measure(LLMTestCase(input="...", actual_output="...", retrieval_context=["..."]))

Truths depend only on the context text, the extraction limit, the prompt and the judge model,
so they are cached process-wide: the same retrieved documents never cost a second call.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel, field_validator

from spanjudge.evaluators._judge.metrics.base import BaseMetric
from spanjudge.evaluators._judge.metrics.schemas import Reason, expect_count
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import LLMTestCase

# ---------------------------------------------------------------------------- schemas


class Truths(BaseModel):
    truths: list[str]


class Claims(BaseModel):
    claims: list[str]


class FaithfulnessVerdict(BaseModel):
    verdict: Literal["yes", "no", "idk"]
    reason: str | None = None

    @field_validator("verdict", mode="before")
    @classmethod
    def _normalise(cls, value: Any) -> Any:
        # newer judges say "borderline" where older ones said "idk": same meaning
        if isinstance(value, str):
            value = value.strip().lower()
            return "idk" if value == "borderline" else value
        return value


class FaithfulnessVerdicts(BaseModel):
    verdicts: list[FaithfulnessVerdict]


# ---------------------------------------------------------------------------- prompts


class FaithfulnessTemplate:
    """Prompts of :class:`FaithfulnessMetric`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def generate_truths(retrieval_context: str, extraction_limit: int | None = None) -> str:
        amount = (
            f"the {extraction_limit} most important factual statements"
            if extraction_limit is not None
            else "every factual statement"
        )
        return f"""You read reference documents and list the facts they state.

Write down {amount} that the documents below make. Each fact must be a short, self-contained
sentence that is understandable without the documents (replace pronouns by what they refer to).
Copy the facts as stated, even if you believe they are wrong; do not add outside knowledge.

Answer with JSON only, with the single key "truths" holding a list of strings.
Example:
Documents: "The Eiffel Tower is in Paris. It was finished in 1889."
Answer: {{"truths": ["The Eiffel Tower is in Paris.", "The Eiffel Tower was finished in 1889."]}}

{quote("Documents", retrieval_context)}

JSON:"""

    @staticmethod
    def generate_claims(actual_output: str) -> str:
        return f"""You break an answer into the claims it makes.

List every statement of fact made by the answer below, each as a short, self-contained sentence
(replace pronouns by what they refer to). Do not include greetings, questions, or advice that
asserts nothing, and do not add anything the answer does not say.

Answer with JSON only, with the single key "claims" holding a list of strings.
Example:
Answer text: "Sure! Our store opens at 9am and we sell only vegan shoes."
Answer: {{"claims": ["The store opens at 9am.", "The store sells only vegan shoes."]}}

{quote("Answer text", actual_output)}

JSON:"""

    @staticmethod
    def generate_verdicts(claims: list[str], retrieval_context: str) -> str:
        return f"""You check claims against known facts.

For EACH claim below, in the same order, decide whether the facts contradict it:
- "no": the facts directly contradict the claim;
- "yes": the facts support the claim or are consistent with it;
- "idk": the facts say nothing about the claim, so it can be neither confirmed nor refuted.
Judge only against the facts given, not your own knowledge. For a "no", the reason must quote
or name the contradicting fact.

Answer with JSON only: {{"verdicts": [{{"verdict": "yes" | "no" | "idk", "reason": "..."}}]}},
exactly one entry per claim ({len(claims)} in total).
Example:
Facts: "Refunds are possible within 30 days."
Claims: ["Refunds are possible within 60 days.", "Shipping is free."]
Answer: {{"verdicts": [{{"verdict": "no", "reason": "The facts allow refunds within 30 days."}},
{{"verdict": "idk", "reason": "The facts do not mention shipping."}}]}}

{quote("Facts", retrieval_context)}

{quote("Claims", claims)}

JSON:"""

    @staticmethod
    def generate_reason(score: float, contradictions: list[str]) -> str:
        return f"""You explain a faithfulness score in one or two sentences.

The faithfulness score is {score:.2f} (1 means nothing in the answer contradicts the retrieved
context). The contradictions found were:
{quote("Contradictions", contradictions)}

Explain the score concisely, naming the contradictions if any; if there are none, say the answer
is consistent with the context. Answer with JSON only, with the single key "reason".
Example: {{"reason": "The score is 0.50 because the answer gives a 60-day refund window while the
context says 30 days."}}

JSON:"""


# ---------------------------------------------------------------------------- truth cache


TruthKey = tuple[str, str, str, int | None]


class TruthCache:
    """Bounded, thread-safe LRU of extracted truths, with in-flight de-duplication.

    Keyed by (judge model, template, sha256 of the context text, extraction limit). Concurrent
    cases on one event loop that need the same truths wait for the first extraction instead of
    each calling the judge.
    """

    def __init__(self, maxsize: int = 2048) -> None:
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self.shared = 0  # misses answered by another case's in-flight extraction
        self._data: OrderedDict[TruthKey, tuple[str, ...]] = OrderedDict()
        self._inflight: dict[tuple[int, TruthKey], asyncio.Future[tuple[str, ...] | None]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(model: str, template: type, context: str, limit: int | None) -> TruthKey:
        digest = hashlib.sha256(context.encode("utf-8")).hexdigest()
        return (model, f"{template.__module__}.{template.__qualname__}", digest, limit)

    def get(self, key: TruthKey) -> list[str] | None:
        with self._lock:
            found = self._data.get(key)
            if found is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return list(found)

    def put(self, key: TruthKey, truths: list[str]) -> None:
        with self._lock:
            self._data[key] = tuple(truths)
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = self.shared = 0

    def __len__(self) -> int:
        return len(self._data)

    def _claim(self, key: TruthKey) -> tuple[asyncio.Future[tuple[str, ...] | None], bool]:
        """The in-flight future for ``key`` on this loop, and whether the caller owns it."""
        loop = asyncio.get_running_loop()
        slot = (id(loop), key)
        with self._lock:
            fut = self._inflight.get(slot)
            if fut is not None and not fut.done():
                return fut, False
            fut = loop.create_future()
            self._inflight[slot] = fut
            return fut, True

    def _release(self, key: TruthKey, fut: asyncio.Future[tuple[str, ...] | None]) -> None:
        slot = (id(asyncio.get_running_loop()), key)
        with self._lock:
            if self._inflight.get(slot) is fut:
                del self._inflight[slot]


truth_cache = TruthCache()
"""The process-wide truth cache (``truth_cache.clear()`` empties it)."""


# ---------------------------------------------------------------------------- metric


class FaithfulnessMetric(BaseMetric):
    """Share of the answer's claims that the retrieval context does not contradict.

    Example::

        metric = FaithfulnessMetric(threshold=0.7, model="gpt-4o-mini")
        metric.measure(LLMTestCase(input="Refunds?", actual_output="30 days, free.",
                                   retrieval_context=["Refunds within 30 days at no cost."]))
        metric.score, metric.claims, metric.truths, metric.verdicts
    """

    name = "faithfulness"
    display_name = "Faithfulness"
    required_fields = ("input", "actual_output", "retrieval_context")

    def __init__(
        self,
        threshold: float = 0.5,
        model: Any = None,
        include_reason: bool = True,
        strict_mode: bool = False,
        async_mode: bool = True,
        verbose_mode: bool = False,
        truths_extraction_limit: int | None = None,
        penalize_ambiguous_claims: bool = False,
        evaluation_template: type[FaithfulnessTemplate] = FaithfulnessTemplate,
    ) -> None:
        self.truths_extraction_limit = (
            None if truths_extraction_limit is None else max(int(truths_extraction_limit), 0)
        )
        self.penalize_ambiguous_claims = penalize_ambiguous_claims
        super().__init__(
            threshold,
            model,
            include_reason,
            strict_mode,
            async_mode,
            verbose_mode,
            evaluation_template,
        )

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "truths_extraction_limit": self.truths_extraction_limit,
            "penalize_ambiguous_claims": self.penalize_ambiguous_claims,
        }

    def _reset_intermediate(self) -> None:
        self.truths: list[str] = []
        self.claims: list[str] = []
        self.verdicts: list[FaithfulnessVerdict] = []
        self.truths_cache_hit: bool = False

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        return [
            {"claim": claim, **verdict.model_dump()}
            for claim, verdict in zip(self.claims, self.verdicts, strict=False)
        ]

    async def _a_compute(self, test_case: LLMTestCase) -> float:
        context = "\n\n".join(test_case.retrieval_context or [])
        truths, claims = await self._gather(
            self._a_truths(context), self._a_claims(test_case.actual_output)
        )
        self.truths, self.claims = truths, claims
        if not claims:
            # nothing asserted, nothing contradicted: faithful by definition, no verdict call
            self._log("Verdicts", "no claims: nothing to judge")
            return 1.0
        prompt = self.evaluation_template.generate_verdicts(claims, "\n\n".join(truths))
        schema = expect_count(FaithfulnessVerdicts, "verdicts", len(claims))
        answer = await self._ask("Verdicts", prompt, schema)
        self.verdicts = list(answer.verdicts)
        faithful = sum(
            1
            for v in self.verdicts
            if v.verdict != "no" and not (self.penalize_ambiguous_claims and v.verdict == "idk")
        )
        return faithful / len(self.verdicts)

    async def _a_claims(self, actual_output: str) -> list[str]:
        prompt = self.evaluation_template.generate_claims(actual_output)
        return list((await self._ask("Claims", prompt, Claims)).claims)

    async def _a_truths(self, context: str) -> list[str]:
        limit = self.truths_extraction_limit
        if limit == 0:
            return []
        key = TruthCache.key(self.evaluation_model, self.evaluation_template, context, limit)
        cached = truth_cache.get(key)
        if cached is not None:
            self.truths_cache_hit = True
            self._log("Truths (cached)", json.dumps(cached, indent=2, ensure_ascii=False))
            return cached
        fut, owner = truth_cache._claim(key)
        if not owner:
            shared = await asyncio.shield(fut)
            if shared is not None:  # None: the owner failed, so try ourselves
                with truth_cache._lock:
                    truth_cache.shared += 1
                self.truths_cache_hit = True
                self._log("Truths (shared)", json.dumps(shared, indent=2, ensure_ascii=False))
                return list(shared)
            return await self._a_truths(context)
        truths: list[str] | None = None
        try:
            prompt = self.evaluation_template.generate_truths(context, limit)
            truths = list((await self._ask("Truths", prompt, Truths)).truths)
            if limit is not None:
                truths = truths[:limit]
            truth_cache.put(key, truths)
            return truths
        finally:
            if not fut.done():
                fut.set_result(tuple(truths) if truths is not None else None)
            truth_cache._release(key, fut)

    async def _a_reason(self, score: float) -> str | None:
        if not self.claims:
            return "The score is 1.00 because the answer makes no factual claims to contradict."
        contradictions = [v.reason or "" for v in self.verdicts if v.verdict == "no"]
        prompt = self.evaluation_template.generate_reason(score, contradictions)
        return (await self._ask("Reason", prompt, Reason)).reason
