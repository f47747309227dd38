"""Test support for spanjudge users and for spanjudge's own tests.

:class:`ScriptedJudgeServer` is an OpenAI-compatible chat-completions server on 127.0.0.1 that
answers by rules (and injects faults), so a test drives the real judge path (litellm, HTTP, JSON
parsing, retries) without a network or a model. It is not a language model.
:class:`AgentModelServer` plays an agent's model from an :class:`AgentScript`: scripted tool
calls per turn, then the final answer once the tool results are in the messages, so agent
frameworks run their real loop offline.

Example::

    from spanjudge.testing import Fault, ScriptedJudgeServer

    with ScriptedJudgeServer() as server:
        server.add_rule({"claims": ["The sky is blue."]}, schema="Claims")
        server.add_rule(Fault.status(429, retry_after=0), times=1)
        judge = server.judge()
"""

from spanjudge.testing.agent_model import (
    AgentConversation,
    AgentModelServer,
    AgentReply,
    AgentScript,
    ScriptedToolCall,
)
from spanjudge.testing.judge_server import Fault, ScriptedJudgeServer, ScriptedRequest

__all__ = [
    "AgentConversation",
    "AgentModelServer",
    "AgentReply",
    "AgentScript",
    "Fault",
    "ScriptedJudgeServer",
    "ScriptedRequest",
    "ScriptedToolCall",
]
