"""Debian's Chromium, headless, driven by Playwright: what a user sees in a product's UI.

Playwright's own browser download needs the internet, so it drives the system browser
(`bash scripts/test` installs Debian's ``chromium`` where it is missing; SPANJUDGE_CHROMIUM
names another). Screenshots are kept as test artifacts in ``tests/artifacts/<test>/`` (ignored
by git; ``SPANJUDGE_TEST_ARTIFACTS`` names another folder, e.g. a CI job's artifacts) and their
folder is printed in the test output::

    with chromium() as page:
        page.goto(url)
        shot(page, artifacts, "phoenix-traces")
        assert "faithfulness" in visible_text(page)
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

PROVIDED_BY = "run `bash scripts/test`, which installs Debian's chromium for the browser tests"
VIEWPORT = {"width": 2400, "height": 1200}  # wide enough for every list column
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def chromium_path() -> str:
    path = os.environ.get("SPANJUDGE_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail(f"Chromium is not installed: {PROVIDED_BY}")
    return path


@contextmanager
def chromium() -> Iterator[Any]:
    """A fresh page of a headless Chromium (the system's), closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=chromium_path(),
            headless=True,
            # as root in a container Chromium needs no sandbox; nothing is fetched from outside
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()


def artifacts_folder(name: str, capsys: pytest.CaptureFixture[str]) -> Path:
    """Where the screenshots of test ``name`` go (emptied first), said in the test output."""
    base = Path(os.environ.get("SPANJUDGE_TEST_ARTIFACTS") or ARTIFACTS)
    folder = base / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    with capsys.disabled():
        print(f"\n[screenshots] {folder}")
    return folder


def shot(page: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def visible_text(page: Any) -> str:
    return str(page.inner_text("body"))


def wait_for_text(page: Any, wanted: Callable[[str], bool], what: str, timeout: float = 30) -> str:
    """The page's visible text once ``wanted(text)`` holds (single-page apps render late)."""
    deadline = time.monotonic() + timeout
    while True:
        text = visible_text(page)
        if wanted(text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"the page never showed {what}; it shows:\n{text[:3000]}")
        time.sleep(0.5)
