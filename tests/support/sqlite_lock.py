"""A SQLite file held under an exclusive lock by another process, for the locked-database tests.

A lock taken in this process would not show what a second worker or a backup tool does to the
store; a child process holding ``BEGIN EXCLUSIVE`` does::

    with locked_by_another_process(path):
        with pytest.raises(StoreError, match="locked"):
            store.write_spans(spans, now=T0)
    store.write_spans(spans, now=T0)  # released: writes go through again
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked_by_another_process(path: Path) -> Iterator[None]:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sqlite3, sys
                conn = sqlite3.connect({str(path)!r}, isolation_level=None)
                conn.execute("BEGIN EXCLUSIVE")
                print("locked", flush=True)
                sys.stdin.readline()
                conn.execute("COMMIT")
            """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(10)
