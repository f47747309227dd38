"""The ``spanjudge`` command line."""

from __future__ import annotations

import click

from spanjudge._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="spanjudge")
def cli() -> None:
    """LLM-as-a-judge scores for production traces."""


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
