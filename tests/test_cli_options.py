"""The CLI spells a few choices and defaults itself, so that ``spanjudge --version`` and
``--help`` never import the evaluator side; these tests hold them equal to their one source."""

from __future__ import annotations

import click

from spanjudge.cli.app import cli
from spanjudge.evaluators._judge.judges.structured import STRUCTURED_OUTPUT_CHOICES
from spanjudge.settings import WorkerSettings


def _option(command: str, name: str) -> click.Option:
    params = cli.commands[command].params
    return next(p for p in params if isinstance(p, click.Option) and p.name == name)


def test_demo_structured_output_choices_are_the_judges_forms() -> None:
    option = _option("demo", "structured_output")
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == STRUCTURED_OUTPUT_CHOICES
    assert option.default in STRUCTURED_OUTPUT_CHOICES


def test_demo_judge_timeout_default_is_the_settings_default() -> None:
    option = _option("demo", "judge_timeout")
    assert option.default == WorkerSettings.model_fields["judge_timeout"].default
