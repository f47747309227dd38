"""The direct path to OpenAI-compatible servers: when it is taken, that it answers, prices and
fails exactly as the litellm path does, and that it survives the event loops the online loop
opens and closes."""

from __future__ import annotations

import asyncio
import gc
import warnings
import weakref
from typing import Any

import pytest
from pydantic import BaseModel

from spanjudge.errors import (
    JudgeConnectionError,
    JudgeError,
    JudgeRateLimitError,
    JudgeServerError,
    JudgeTimeoutError,
)
from spanjudge.evaluators._judge.judges.direct import HTTPFailure, _check, direct_body
from spanjudge.evaluators._judge.judges.guarded_http import env_proxy
from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge
from spanjudge.testing import Fault, ScriptedJudgeServer
from tests.support.ports import closed_port


class Reason(BaseModel):
    reason: str


def make(server: ScriptedJudgeServer, transport: str, **options: Any) -> LiteLLMJudge:
    judge: LiteLLMJudge = server.judge(
        transport=transport, timeout=10.0, backoff_base=0.01, max_backoff=0.05, **options
    )
    return judge


def test_which_judges_take_the_direct_path() -> None:
    local: dict[str, Any] = {
        "api_base": "http://127.0.0.1:1/v1",
        "api_key": "k",
        "transport": "auto",
    }
    assert LiteLLMJudge("openai/qwen", **local)._direct_transport() is not None
    litellm_only = {**local, "transport": "litellm"}
    assert LiteLLMJudge("openai/qwen", **litellm_only)._direct_transport() is None
    # an option the direct body cannot carry keeps litellm (auto) or is refused (direct)
    assert LiteLLMJudge("openai/q", drop_params=True, **local)._direct_transport() is None
    with pytest.raises(ValueError, match="cannot send drop_params"):
        direct = {**local, "transport": "direct"}
        LiteLLMJudge("openai/q", drop_params=True, **direct)._direct_transport()
    # other providers go through litellm
    claude = LiteLLMJudge("anthropic/claude-3-5-sonnet-20240620", transport="auto")
    assert claude._direct_transport() is None
    assert LiteLLMJudge("gpt-4o-mini", api_key="k", transport="auto")._direct_transport().url == (
        "https://api.openai.com/v1/chat/completions"
    )
    with pytest.raises(ValueError, match="transport must be"):
        LiteLLMJudge("openai/q", transport="grpc")


def test_the_body_is_the_request_without_litellm_keys() -> None:
    body = direct_body(
        {
            "model": "openai/qwen",
            "messages": [],
            "timeout": 5,
            "num_retries": 0,
            "max_retries": 0,
            "api_base": "x",
            "api_key": "secret",
            "extra_headers": {"x": "y"},
            "temperature": 0,
            "max_tokens": 9,
        }
    )
    assert body == {"model": "qwen", "messages": [], "temperature": 0, "max_tokens": 9}


def test_both_paths_give_the_same_answer_tokens_and_price() -> None:
    with ScriptedJudgeServer() as server:
        server.add_rule({"reason": "ok"}, schema="Reason")
        # a model in litellm's price table, served from a base URL (a proxy, say)
        answers = {
            t: make(server, t, model="openai/gpt-4o-mini").generate("Why?", Reason)
            for t in ("direct", "litellm")
        }
    (d_obj, d_usage), (l_obj, l_usage) = answers["direct"], answers["litellm"]
    assert d_obj == l_obj
    assert (d_usage.input_tokens, d_usage.output_tokens) == (
        l_usage.input_tokens,
        l_usage.output_tokens,
    )
    assert d_usage.cost is not None and d_usage.cost > 0 and d_usage.unpriced_calls == 0
    assert d_usage.cost == pytest.approx(l_usage.cost, rel=1e-6)


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault.status(429, retry_after=0), JudgeRateLimitError),
        (Fault.status(503), JudgeServerError),
        (Fault.status(401), JudgeError),
    ],
)
def test_failures_map_to_the_same_judge_errors(fault: Fault, error: type[Exception]) -> None:
    with ScriptedJudgeServer() as server:
        server.add_rule(fault)
        with pytest.raises(error) as caught:
            make(server, "direct", max_retries=1).generate("x", Reason)
    assert type(caught.value) is error
    with pytest.raises(JudgeConnectionError):
        LiteLLMJudge(
            "openai/q", api_base="http://127.0.0.1:9/v1", transport="direct", max_retries=0
        ).generate("x", Reason)


def test_one_judge_across_event_loops_and_threads() -> None:
    # the online loop runs each batch in a fresh asyncio.run(): connections of a closed loop
    # must not be reused
    with ScriptedJudgeServer() as server:
        server.add_rule({"reason": "ok"}, schema="Reason")
        judge = make(server, "direct")

        async def batch() -> list[Any]:
            return list(await asyncio.gather(*(judge.a_generate("x", Reason) for _ in range(5))))

        for _ in range(3):
            assert len(asyncio.run(batch())) == 5
        assert judge.generate("x", Reason)[0].reason == "ok"  # and the sync client
        assert len(server.requests) == 16


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault.status(429, retry_after=0), JudgeRateLimitError),
        (Fault.status(503), JudgeServerError),
        (Fault.status(401), JudgeError),
        (Fault.hang(5), JudgeTimeoutError),
    ],
)
def test_async_calls_fail_as_sync_calls_do(fault: Fault, error: type[Exception]) -> None:
    # async calls take another HTTP client than sync ones: each failure must still become the
    # same judge error, so the engine retries and reports it alike
    with ScriptedJudgeServer() as server:
        server.add_rule(fault)
        judge = make(server, "direct", max_retries=0)
        judge.timeout = 0.5
        with pytest.raises(error) as caught:
            asyncio.run(judge.a_generate("x", Reason))
    assert type(caught.value) is error


def test_async_connection_refused_is_a_connection_error_without_the_key() -> None:
    judge = LiteLLMJudge(
        "openai/q",
        api_base=f"http://127.0.0.1:{closed_port()}/v1",
        api_key="sk-async-secret-value-77",
        transport="direct",
        max_retries=1,
        backoff_base=0.01,
    )
    with pytest.raises(JudgeConnectionError) as caught:
        asyncio.run(judge.a_generate("x", Reason))
    assert "sk-async-secret-value-77" not in str(caught.value)


def test_what_came_back_instead_of_an_answer_is_said() -> None:
    # both clients hand status, headers and body to the same check
    with pytest.raises(HTTPFailure) as caught:
        _check(500, {"retry-after": "3"}, b'{"error": {"message": "overloaded"}}')
    assert (caught.value.status_code, caught.value.retry_after) == (500, 3.0)
    assert str(caught.value) == "HTTP 500: overloaded"
    with pytest.raises(HTTPFailure, match="HTTP 404: no such route"):
        _check(404, {}, b"no such route")
    with pytest.raises(HTTPFailure, match="the answer is not JSON: <html>") as caught:
        _check(200, {}, b"<html>\xff")
    assert caught.value.status_code == 502
    with pytest.raises(HTTPFailure, match="not a JSON object"):
        _check(200, {}, b"[1, 2]")
    assert _check(200, {"retry-after": "soon"}, b'{"choices": []}') == {"choices": []}


def test_async_clients_close_with_their_loops_and_keep_no_loop_alive() -> None:
    # every asyncio.run() of the online loop gets its own client; when the loop ends the client
    # is closed (aiohttp warns about one that is not) and the transport forgets the loop
    with ScriptedJudgeServer() as server:
        server.add_rule({"reason": "ok"}, schema="Reason")
        judge = make(server, "direct")
        loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

        async def batch() -> int:
            loops.append(weakref.ref(asyncio.get_running_loop()))
            return len(await asyncio.gather(*(judge.a_generate("x", Reason) for _ in range(4))))

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert [asyncio.run(batch()) for _ in range(3)] == [4, 4, 4]
            gc.collect()
        unclosed = [w for w in caught if "Unclosed" in str(w.message)]
        assert unclosed == []
        assert all(ref() is None for ref in loops)
        assert judge._direct_transport()._async == {}
        assert len(server.requests) == 12


def test_async_calls_go_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the scripted server stands in for an HTTP proxy: the judge's host does not resolve, so an
    # answer can only come through the proxy
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    with ScriptedJudgeServer() as proxy:
        proxy.add_rule({"reason": "via the proxy"}, schema="Reason")
        monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))
        judge = LiteLLMJudge(
            "openai/q",
            api_base="http://judge.invalid/v1",
            api_key="k",
            transport="direct",
            max_retries=0,
        )
        answer, _ = asyncio.run(judge.a_generate("x", Reason))
    assert answer.reason == "via the proxy"
    assert len(proxy.requests) == 1


def test_the_proxy_is_skipped_for_hosts_no_proxy_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ALL_PROXY", "all_proxy", "http_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert env_proxy("http://judge.example/v1/chat/completions") == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "judge.example")
    assert env_proxy("http://judge.example/v1/chat/completions") is None
    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.delenv("NO_PROXY")
    assert env_proxy("http://judge.example/v1/chat/completions") is None


NO_LITELLM_SCRIPT = """
import asyncio, json, sys
from pydantic import BaseModel
from spanjudge.evaluators._judge.judges import LiteLLMJudge

class Reason(BaseModel):
    reason: str

judge = LiteLLMJudge(
    "openai/gpt-4o-mini", api_base=sys.argv[1], api_key="k", transport="direct", max_retries=0
)
value, usage = asyncio.run(judge.a_generate("Why?", Reason))
print(json.dumps({"imported": "litellm" in sys.modules, "reason": value.reason,
                  "cost": usage.cost, "tokens": [usage.input_tokens, usage.output_tokens]}))
"""


def test_the_direct_path_prices_calls_without_importing_litellm() -> None:
    # a worker whose judge speaks the OpenAI API never needs litellm's import (seconds of CPU on
    # its first evaluation, over 100 MB): the price comes from the table litellm ships, and it
    # is the price litellm's own table gives
    import json
    import subprocess
    import sys

    import litellm

    with ScriptedJudgeServer() as server:
        server.add_rule({"reason": "ok"}, schema="Reason")
        done = subprocess.run(
            [sys.executable, "-c", NO_LITELLM_SCRIPT, server.base_url],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["imported"] is False and got["reason"] == "ok"
    rates = litellm.model_cost["gpt-4o-mini"]
    tokens_in, tokens_out = got["tokens"]
    expected = (
        rates["input_cost_per_token"] * tokens_in + rates["output_cost_per_token"] * tokens_out
    )
    assert tokens_in > 0 and got["cost"] == pytest.approx(expected, rel=1e-9)


@pytest.fixture
def tls_judge(tmp_path: Any) -> Any:
    """A judge endpoint over HTTPS on 127.0.0.1 with a self-signed certificate for localhost
    (made by openssl), answering every request with one Reason; yields (base URL, cert path)."""
    import http.server
    import json
    import ssl
    import subprocess
    import threading

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    answer = json.dumps(
        {
            "choices": [{"message": {"role": "assistant", "content": '{"reason": "over tls"}'}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        }
    ).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://localhost:{server.server_address[1]}/v1", cert
    finally:
        server.shutdown()
        server.server_close()


def test_async_calls_trust_the_certificates_sync_calls_trust(
    tls_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # httpx (sync calls, and litellm) trusts certifi's bundle unless SSL_CERT_FILE/SSL_CERT_DIR
    # say otherwise; an async call must trust the same, not only the system's store, or a
    # judge that works from a script fails in the worker of a container without system CAs
    import certifi

    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    base_url, cert = tls_judge

    def judge() -> LiteLLMJudge:
        return LiteLLMJudge(
            "openai/q", api_base=base_url, api_key="k", transport="direct", max_retries=0
        )

    # the certificate is nobody's: both paths refuse the endpoint
    with pytest.raises(JudgeConnectionError):
        asyncio.run(judge().a_generate("x", Reason))
    # in the bundle the sync path trusts: both paths take it
    monkeypatch.setattr(certifi, "where", lambda: str(cert))
    assert judge().generate("x", Reason)[0].reason == "over tls"
    assert asyncio.run(judge().a_generate("x", Reason))[0].reason == "over tls"
    # and SSL_CERT_FILE is honoured as httpx honours it
    monkeypatch.undo()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    assert asyncio.run(judge().a_generate("x", Reason))[0].reason == "over tls"
