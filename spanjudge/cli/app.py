"""The ``spanjudge`` command line: ``demo``, ``worker``, ``backfill``, ``explain``,
``collector-config``, and the review commands of :mod:`spanjudge.cli.review` (``feedback``,
``calibration``, ``export``, ``scores``).

Each command imports what it needs when it runs, so ``spanjudge --version`` stays instant.
Every command follows one exit-code convention (:mod:`spanjudge.cli.common`): 0 done, 1 the
command ran and failed, 2 usage or configuration error.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

import click

from spanjudge.cli.common import (
    EXIT_CODES_HELP,
    SpanjudgeGroup,
    load_cli_settings,
    opened_store,
    parse_since,
    resolve_trace_id,
    usage_error,
)
from spanjudge.cli.review import COMMANDS as REVIEW_COMMANDS
from spanjudge.tracer._version import __version__

if TYPE_CHECKING:
    from rich.tree import Tree

    from spanjudge.evaluators._review.explain import Explanation, RuleVerdict


@click.group(
    cls=SpanjudgeGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EXIT_CODES_HELP,
)
@click.version_option(__version__, prog_name="spanjudge")
def cli() -> None:
    """LLM-as-a-judge scores for production traces."""


@cli.command()
@click.option(
    "--judge",
    "judge_model",
    default=None,
    metavar="MODEL",
    help="A litellm model string (e.g. gpt-4o-mini). Default: the offline scripted judge.",
)
@click.option(
    "--otlp-endpoint",
    default=None,
    metavar="URL",
    help="Send traces and evaluation spans to this OTLP/HTTP endpoint "
    "(default: OTEL_EXPORTER_OTLP_ENDPOINT if set, else nowhere).",
)
@click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="Span store (default: a fresh SQLite file in a temporary folder).",
)
@click.option(
    "--judge-base-url",
    default=None,
    metavar="URL",
    help="The judge's OpenAI-compatible server (vLLM, llama.cpp, Ollama, LM Studio), e.g. "
    "http://127.0.0.1:8080/v1; use with --judge openai/<model name>.",
)
@click.option(
    "--judge-api-key-env",
    default=None,
    metavar="NAME",
    help="The environment variable that holds the judge's API key (the key is never printed).",
)
@click.option(
    "--structured-output",
    type=click.Choice(["auto", "json_schema", "json_object", "tools", "prompt"]),
    default="auto",
    show_default=True,
    help="How the judge is asked for JSON; auto tries each form the server accepts.",
)
@click.option(
    "--judge-timeout",
    type=float,
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Timeout of one judge call (raise it for a slow local model).",
)
def demo(
    judge_model: str | None,
    otlp_endpoint: str | None,
    store_url: str | None,
    judge_base_url: str | None,
    judge_api_key_env: str | None,
    structured_output: str,
    judge_timeout: float,
) -> None:
    """Trace a small support agent, evaluate it with all three metrics, print the scores."""
    from spanjudge._demo.run import run_demo

    if (judge_base_url or judge_api_key_env) and not judge_model:
        raise click.UsageError("--judge-base-url and --judge-api-key-env need --judge MODEL")
    options: dict[str, object] = {
        "structured_output": structured_output,
        "timeout": judge_timeout,
        "api_key_env": judge_api_key_env,
    }
    if judge_api_key_env and not os.environ.get(judge_api_key_env):
        raise click.UsageError(f"--judge-api-key-env {judge_api_key_env}: that variable is not set")
    if judge_base_url:
        options["api_base"] = judge_base_url
    sys.exit(
        run_demo(
            judge_model=judge_model,
            otlp_endpoint=otlp_endpoint,
            store_url=store_url,
            judge_options=options,
        )
    )


@cli.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="TOML, YAML or JSON settings file; SPANJUDGE_* environment variables override it.",
)
def worker(config_path: str | None) -> None:
    """Receive OTLP/HTTP spans, evaluate them under the configured rules, emit the scores.

    Settings, rules, judge, store and port are checked before the worker listens: a mistake is
    one line naming the key (exit 2; 1 when PostgreSQL is down or the port is in use)."""
    from spanjudge.worker.service import run_worker

    settings = load_cli_settings(config_path)  # ConfigError: exit 2
    sys.exit(run_worker(settings))


@cli.command()
@click.option(
    "--since", required=True, help="How far back: a duration (30m, 6h, 2d) or a Unix time."
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Worker settings file with the store and the rules to apply.",
)
@click.option(
    "--retry-errors",
    is_flag=True,
    help="Also evaluate again every result that is an error, recorded since --since (a judge "
    "outage longer than the retry schedule); the errored result is kept as superseded.",
)
def backfill(since: str, config_path: str | None, retry_errors: bool) -> None:
    """Evaluate stored spans from the past under the current rules.

    A target evaluated before is not evaluated again, unless its result is an error and
    --retry-errors is given.
    """
    from spanjudge.worker.service import run_backfill

    settings = load_cli_settings(config_path)  # ConfigError: exit 2
    try:
        start = parse_since(since, now=time.time())
    except ValueError as exc:
        usage_error(str(exc))
    sys.exit(run_backfill(settings, since=start, retry_errors=retry_errors))


@cli.command()
@click.argument("trace_id")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Worker settings file with the store and the rules to explain.",
)
@click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="Span store to read (default: the settings' store_url).",
)
@click.option(
    "--suggest-reader",
    "suggest",
    is_flag=True,
    default=False,
    help="Print a starting [[readers]] block for the spans no dialect reads (or whose fields "
    "were refused), to edit and paste into the worker's file.",
)
def explain(trace_id: str, config_path: str | None, store_url: str | None, suggest: bool) -> None:
    """Show how each span of a stored trace is read and what the rules would evaluate.

    TRACE_ID may be its first characters, as the demo's table prints it, when only one
    stored trace starts with them. Never calls the judge. Exit code 2 when the trace is not
    in the store. The settings' [[readers]] are read before the dialects, as in the worker.
    """
    from spanjudge._core.urls import redact_url
    from spanjudge.evaluators._plan.allocation import Allocation
    from spanjudge.evaluators._rebuild.dialects.declared import install as install_readers
    from spanjudge.evaluators._rebuild.loading import load_conversation, load_trace
    from spanjudge.evaluators._review.explain import OfflineJudge, explain_trace
    from spanjudge.evaluators._review.suggest_reader import suggest_readers
    from spanjudge.worker.rule_config import build_rules

    settings = load_cli_settings(config_path, store_url)  # ConfigError: exit 2
    configured = bool(settings.rules or settings.rules_entrypoint)
    install_readers(settings.readers)
    # the metrics need a judge object; this one refuses every call
    judge = OfflineJudge(settings.judge_model)
    rules = build_rules(settings, judge) if configured else []
    with opened_store(
        settings.store_url, hint="pass --store or --config", schema=settings.store_schema
    ) as store:
        trace_id = resolve_trace_id(store, trace_id, where=redact_url(settings.store_url))
        spans = load_trace(store, trace_id)
        if not spans:
            usage_error(
                f"trace {trace_id} is not in the store {redact_url(settings.store_url)} "
                "(wrong id or store, not arrived yet, or deleted by retention)"
            )
        conversations = {
            cid: load_conversation(store, cid)
            for cid in sorted({s.conversation_id for s in spans if s.conversation_id})
        }
        # a budget/precision rule's probability comes from the store's sums, as the planner's
        allocation = Allocation(store) if any(r.has_target for r in rules) else None
        explanation = explain_trace(
            trace_id, spans, rules, conversations=conversations, allocation=allocation
        )
    if suggest:
        refused = [line.span_id for line in explanation.spans if any(v.refusal for v in line.rules)]
        block = suggest_readers(spans, refused)
        click.echo(block or f"# every span of trace {trace_id} is read: no reader to suggest")
        return
    _print_explanation(explanation, configured)


@cli.command("collector-config")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Worker settings file with the rules the Collector must feed.",
)
@click.option(
    "--workers",
    default=None,
    metavar="HOST:PORT,...",
    help="OTLP/gRPC endpoints of the worker groups' Collectors (default: spanjudge-group-a:4317).",
)
@click.option(
    "--route-by",
    type=click.Choice(["auto", "trace", "conversation"]),
    default="auto",
    show_default=True,
    help="Route whole traces, or whole conversations (auto: conversations when a rule needs it).",
)
def collector_config(config_path: str | None, workers: str | None, route_by: str) -> None:
    """Print the Collector pipeline that pre-samples what the rules can pick and routes it to
    the worker groups (probabilistic_sampler + loadbalancing). Never opens the store."""
    from spanjudge.cli.collector import parse_workers, render
    from spanjudge.evaluators._review.explain import OfflineJudge
    from spanjudge.worker.rule_config import build_rules

    settings = load_cli_settings(config_path)  # ConfigError: exit 2
    try:
        endpoints = parse_workers(workers)
    except ValueError as exc:
        usage_error(str(exc))
    rules = build_rules(settings, OfflineJudge(settings.judge_model))
    click.echo(render(rules, endpoints, route_by), nl=False)  # type: ignore[arg-type]


def _print_explanation(explanation: Explanation, configured: bool) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.tree import Tree

    console = Console(highlight=False)
    lines = explanation.spans
    root = Tree(
        f"[bold]trace {explanation.trace_id}[/]: {len(lines)} spans, "
        f"{explanation.unrecognised} read by no dialect"
    )
    nodes: list[Tree] = [root]
    for line in lines:
        del nodes[line.depth + 1 :]
        if line.dialect is None:
            keys = ", ".join(line.attribute_keys[:10])
            more = ", ..." if len(line.attribute_keys) > 10 else ""
            label = f"[yellow]not read by any dialect[/] (attributes: {escape(keys + more)})"
        else:
            label = " · ".join(
                [line.dialect, line.kind or "no GenAI kind"]
                + ([f"conversation {escape(line.conversation_id)}"] if line.conversation_id else [])
            )
        if line.dialect is None and line.kind is not None:
            label = f"{line.kind} (no dialect)"
        node = nodes[-1].add(f"[bold]{escape(line.name)}[/] {line.span_id}  {label}")
        if line.kind_rule:
            node.add(f"[cyan]{line.kind} by inference:[/] {escape(line.kind_rule)}")
        if line.collapsed_into:
            node.add(
                f"[cyan]one operation with span {line.collapsed_into}[/], evaluated there "
                "(a wrapper and what it wraps)"
            )
        if line.capture_off:
            node.add(f"[yellow]capture off:[/] {escape(line.capture_off)}")
        for field_name, why in line.notes.items():
            node.add(f"[yellow]{escape(field_name)}:[/] {escape(why)}")
        for verdict in line.rules:
            _add_verdict(node, verdict)
        nodes.append(node)
    console.print(root)
    for trajectory in explanation.trajectories:
        tree = Tree(f"[bold]trajectory of {escape(trajectory.name)}[/] {trajectory.span_id}")
        for text in trajectory.lines:
            tree.add(escape(text))
        console.print(tree)
    for conversation in explanation.conversations:
        tree = Tree(
            f"[bold]conversation {escape(conversation.conversation_id)}[/]: "
            f"{len(conversation.turns)} turn(s)"
        )
        for trace_id, span_id, name in conversation.turns:
            tree.add(f"turn {escape(name)} {trace_id}/{span_id}")
        for verdict in conversation.rules:
            _add_verdict(tree, verdict)
        console.print(tree)
    if explanation.misses:
        tree = Tree("[bold]rules without a target in this trace[/]")
        for miss in explanation.misses:
            tree.add(
                f"rule {escape(miss.rule)} ({miss.target_type}): {miss.reason}; "
                f"spans seen: {escape(miss.seen)}"
            )
        console.print(tree)
    if not configured:
        console.print("no rules configured (--config): only how the spans are read is shown")


def _add_verdict(parent: Tree, verdict: RuleVerdict) -> None:
    from rich.markup import escape

    from spanjudge.evaluators._rebuild.dialects.text_shapes import CHECKS

    status = verdict.status
    if status == "not sampled":
        status += f" (sample rate {verdict.sample_rate:g})"
    color = {"would evaluate": "green", "skipped": "red"}.get(verdict.status, "yellow")
    node = parent.add(
        f"rule [bold]{escape(verdict.rule)}[/] ({verdict.metric} on {verdict.target_type}): "
        f"[{color}]{status}[/]"
    )
    refusal = verdict.refusal
    if refusal is not None:
        refused = node.add(f"[red]refused field:[/] {escape(refusal.field)}")
        refused.add(f"attribute: {escape(refusal.attribute)}")
        refused.add(f"check: {refusal.check} ({escape(CHECKS[refusal.check])})")
        refused.add(f"rule that reads this shape: {escape(refusal.rule)}")
        refused.add(f"value: {escape(repr(refusal.sample))}")
    elif verdict.skip is not None:
        node.add(f"skip reason: {escape(verdict.skip)}")
    case = verdict.case
    if case is None:
        return
    if case.turns:
        for role, text in case.turns:
            node.add(f"{role}: {escape(text)}")
        return
    node.add(f"input: {escape(case.input or '')}")
    node.add(f"output: {escape(case.actual_output or '')}")
    if case.retrieval_context:
        context = node.add(f"retrieval context (from {case.context_source}):")
        for text in case.retrieval_context:
            context.add(escape(text))
    if case.tools_called:
        node.add(f"tools called: {escape(', '.join(case.tools_called))}")
    if case.found_by:
        found = node.add("found by:")
        for field_name, how in case.found_by.items():
            mark = " [yellow](inferred)[/]" if field_name in case.inferred else ""
            found.add(f"{escape(field_name)}: {escape(how)}{mark}")


for _command in REVIEW_COMMANDS:
    cli.add_command(_command)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
