"""The ``spanjudge`` command line: ``demo``, ``worker``, ``backfill``.

Each command imports what it needs when it runs, so ``spanjudge --version`` stays instant.
"""

from __future__ import annotations

import sys
import time

import click

from spanjudge._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
def demo(judge_model: str | None, otlp_endpoint: str | None, store_url: str | None) -> None:
    """Trace a small support agent, evaluate it with all three metrics, print the scores."""
    from spanjudge._demo.run import run_demo

    sys.exit(run_demo(judge_model=judge_model, otlp_endpoint=otlp_endpoint, store_url=store_url))


@cli.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="TOML or YAML settings file; SPANJUDGE_* environment variables override it.",
)
def worker(config_path: str | None) -> None:
    """Receive OTLP/HTTP spans, evaluate them under the configured rules, emit the scores."""
    from spanjudge.settings import ConfigError, load_settings
    from spanjudge.worker import run_worker

    try:
        settings = load_settings(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
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
def backfill(since: str, config_path: str | None) -> None:
    """Evaluate stored spans from the past under the current rules."""
    from spanjudge.settings import ConfigError, load_settings
    from spanjudge.worker import run_backfill

    try:
        settings = load_settings(config_path)
        start = parse_since(since, now=time.time())
    except (ConfigError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(run_backfill(settings, since=start))


_SINCE_HELP = "expected e.g. 30m, 6h, 2d or a Unix time"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, *, now: float) -> float:
    """``"90m"``, ``"6h"``, ``"2d"`` -> that long before ``now``; a plain number is a Unix time."""
    value = text.strip().lower()
    if value and value[-1] in _UNITS:
        try:
            amount = float(value[:-1])
        except ValueError:
            raise ValueError(f"--since {text!r}: {_SINCE_HELP}") from None
        if amount < 0:
            raise ValueError(f"--since {text!r}: a duration cannot be negative")
        return now - amount * _UNITS[value[-1]]
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"--since {text!r}: {_SINCE_HELP}") from None


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
