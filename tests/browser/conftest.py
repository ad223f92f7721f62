"""Fixtures for the browser tests: the built site served on 127.0.0.1 and Debian's
Chromium driven by Playwright, with every request to another host blocked.

Chromium itself blocks them: its proxy is a closed port on 127.0.0.1, which it skips only
for the loopback addresses, so a request to any other host or address fails (and
:class:`PageLog` reports it). No request is intercepted, which would switch Chromium's cache
off: the pages of a test worker share one browser context (:func:`open_page`), so the
site's scripts are fetched and compiled once, not once per page (for the search page,
2.1 s of CPU per page in a fresh context, 0.7 s in a shared one).

The site is _build/html (``ATTNLIB_SITE`` overrides). When it is missing or Chromium is
missing the tests are skipped with the command that fixes it, unless
``ATTNLIB_REQUIRE_SITE=1`` (set by ``make test``), which turns the skip into a failure.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import os
import pathlib
import shutil
import threading
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = pathlib.Path(os.environ.get("ATTNLIB_SITE", ROOT / "_build" / "html"))
CHROMIUM = os.environ.get("ATTNLIB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
REQUIRED = os.environ.get("ATTNLIB_REQUIRE_SITE") == "1"
# Chromium's own background traffic (updates, safe browsing, metrics) is switched off so
# that every request the test sees comes from the page.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-background-networking", "--disable-component-update",
    "--disable-default-apps", "--disable-sync", "--no-first-run", "--disable-extensions",
    "--disable-domain-reliability", "--disable-client-side-phishing-detection",
    "--metrics-recording-only", "--disable-dev-shm-usage", "--mute-audio",
    # every request not to the loopback addresses goes to this proxy, where nothing listens
    "--proxy-server=http://127.0.0.1:9",
]


def _missing(reason: str):
    if REQUIRED:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def end_headers(self):  # the site does not change while the tests run: cache it
        self.send_header("Cache-Control", "max-age=3600")
        super().end_headers()


@pytest.fixture(scope="session")
def site() -> pathlib.Path:
    if not (SITE / "index.html").is_file():
        _missing(f"no built site at {SITE}: run `make book` first")
    return SITE


@contextlib.contextmanager
def serve(directory, handler=None, prefix: str = "/"):
    """Serve ``directory`` on 127.0.0.1 (a free port) inside the ``with``; yields its base URL.
    ``handler``: the request handler class. Default: the quiet one (no log lines)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(handler or _QuietHandler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{prefix}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def base_url(site):
    with serve(site) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        _missing(f"Chromium not found at {CHROMIUM}: run `make chromium` (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class PageLog:
    """What happened while a page was open: console errors, page errors, requests to
    other hosts (blocked) and failed requests to the site."""

    def __init__(self):
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.blocked: list[str] = []
        self.failed: list[str] = []

    def problems(self) -> list[str]:
        return ([f"console error: {m}" for m in self.console_errors]
                + [f"page error: {m}" for m in self.page_errors]
                + [f"request to another host (blocked): {u}" for u in self.blocked]
                + [f"failed request: {u}" for u in self.failed])


DESKTOP = {"width": 1280, "height": 900}


@pytest.fixture(scope="session")
def shared_context(browser):
    """The browser context the desktop pages of this test worker open in, one after another."""
    context = browser.new_context(viewport=DESKTOP, service_workers="block")
    yield context
    context.close()


def _blocked(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme not in ("data", "blob") and parts.hostname != "127.0.0.1"


def watch(page) -> PageLog:
    """A :class:`PageLog` of ``page`` from now on."""
    log = PageLog()
    page.on("console", lambda m: log.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: log.page_errors.append(str(e)))
    page.on("requestfailed", lambda r: log.blocked.append(r.url) if _blocked(r.url)
            else log.failed.append(f"{r.url} ({r.failure})"))
    page.on("response", lambda r: log.failed.append(f"{r.url} (HTTP {r.status})") if r.status >= 400 else None)
    return log


@pytest.fixture()
def open_page(browser, base_url, shared_context):
    """``open_page(path, viewport=None, mobile=False) -> (page, log)``: a new page, 1280 x
    900 unless ``viewport`` says otherwise (``{"width": 390, "height": 844}``), in the
    worker's shared context; its storage and cookies are cleared when the test ends. With
    ``mobile`` a context of its own emulates a phone (a page wider than the screen is then
    shown zoomed out, as a phone does, instead of scrolling)."""
    pages, contexts = [], []

    def _open(path: str, viewport: dict | None = None, mobile: bool = False):
        if mobile:
            context = browser.new_context(viewport=viewport or DESKTOP, service_workers="block", is_mobile=True,
                                          has_touch=True, device_scale_factor=3)
            contexts.append(context)
        else:
            context = shared_context
        page = context.new_page()
        pages.append(page)
        if not mobile and viewport and viewport != DESKTOP:
            page.set_viewport_size(viewport)
        log = watch(page)
        page.goto(base_url + path, wait_until="load")
        return page, log

    yield _open
    for page in pages:
        with contextlib.suppress(Exception):  # (a page a test closed or left elsewhere)
            if page.url.startswith(base_url):
                page.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
        with contextlib.suppress(Exception):
            page.close()
    shared_context.clear_cookies()
    for c in contexts:
        c.close()
