"""The ``spanjudge`` command line (click): ``spanjudge --help`` lists the commands."""

from spanjudge.cli.app import cli, main

__all__ = ["cli", "main"]
