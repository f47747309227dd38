"""The scenario as a LangChain RAG chain, shared by the LangChain recorders (one per tracer).

The chain is the usual LCEL shape::

    support-agent = RunnableSequence(
        {"context": ScenarioRetriever | join_texts, "question": RunnablePassthrough()}
        | ChatPromptTemplate([system (template with {context}), human ({question})])
        | ChatOpenAI(gpt-4o-mini at the fake server)
        | StrOutputParser()
    )

so the retriever runs nested under the RunnableParallel, a sibling branch of the LLM call's
chain, as LangChain apps usually are. The outer sequence is named "support-agent": the agent
turn (OpenInference, for one, marks a run whose name contains "agent" as an AGENT span).
"""

from __future__ import annotations

from typing import Any

import scenario
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough
from langchain_openai import ChatOpenAI


class ScenarioRetriever(BaseRetriever):
    """Returns the scenario documents of the turn whose question is the query (score 0.9)."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        turn = scenario.turn_for_question(query)
        docs = turn.documents() if turn else []
        return [
            Document(id=d.id, page_content=d.text, metadata={"id": d.id, "score": d.score})
            for d in docs
        ]


def _join_texts(docs: list[Document]) -> str:
    return "\n".join(d.page_content for d in docs)


def build_chain(openai_base_url: str) -> Runnable[str, str]:
    """The agent turn: question in, answer out."""
    system = scenario.SYSTEM_PROMPT_TEMPLATE  # its "{context}" is the prompt variable
    prompt = ChatPromptTemplate.from_messages([("system", system), ("human", "{question}")])
    llm = ChatOpenAI(
        model=scenario.MODEL,
        base_url=openai_base_url,
        api_key="sk-interop-fake",  # type: ignore[arg-type]
        temperature=0,
    )
    context = ScenarioRetriever() | RunnableLambda(_join_texts, name="join_texts")
    chain: Runnable[Any, str] = (
        {"context": context, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()
    )
    return chain.with_config(run_name=scenario.AGENT_NAME)


def check_outputs(outputs: list[str]) -> None:
    """Stop the recording if the chain did not return the scripted answers."""
    expected = [t.answer for t in scenario.TURNS]
    if outputs != expected:
        raise SystemExit(f"unexpected chain outputs: {outputs}")
