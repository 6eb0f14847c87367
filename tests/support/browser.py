"""Debian's Chromium driven by Playwright (no browser download), for the e2e tier."""

import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from django.db import connections
from playwright.sync_api import Browser, Page, sync_playwright

from tests.support.runtime import ROOT

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Headless as root, with no background traffic (this machine has no internet).
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
T = TypeVar("T")


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """Run Django code on a thread of its own: Playwright's sync API keeps an event loop
    running in the test's thread, where Django refuses synchronous database work."""

    def call() -> T:
        try:
            return fn(*args)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
