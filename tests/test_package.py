"""Package-level behaviour: the import stays light and the CLI answers."""

import subprocess
import sys

from click.testing import CliRunner

import spanjudge
from spanjudge.cli.app import cli


def test_version_option_prints_the_package_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert spanjudge.__version__ in result.output


def test_import_spanjudge_leaves_heavy_modules_out() -> None:
    code = (
        "import sys, spanjudge\n"
        "heavy = [m for m in ('litellm', 'sqlalchemy', 'sqlite3', 'apscheduler', 'psycopg',"
        " 'openai', 'starlette', 'rich') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
