"""The site as it is published: under its path (https://OWNER.github.io/REPO/ is served
from /REPO/), with a 404 page for every missing address, a favicon, a sitemap and page
descriptions for link previews, all offline."""
from __future__ import annotations

import io
import http.server
import pathlib
import sys
import urllib.parse
import xml.etree.ElementTree as ET

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]

sys.path.insert(0, str(ROOT / "tools" / "sphinxext"))
from attnlib_publish import pages_url  # noqa: E402
from conftest import serve  # noqa: E402

sys.path.pop(0)
BASE = pages_url(yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"])
PREFIX = urllib.parse.urlsplit(BASE).path  # e.g. /attention-course/


class _PagesHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site under PREFIX and answers a missing address with 404.html, as
    GitHub Pages does."""

    def log_message(self, *args):
        pass

    def send_head(self):
        path = urllib.parse.urlsplit(self.path).path
        if not path.startswith(PREFIX):
            self.send_error(404)
            return None
        rel = path[len(PREFIX):] or "index.html"
        target = pathlib.Path(self.directory) / rel
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            body = (pathlib.Path(self.directory) / "404.html").read_bytes()
            self.send_response(404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()

            return io.BytesIO(body)
        self.path = "/" + rel
        return super().send_head()


@pytest.fixture(scope="module")
def base_url(site):
    with serve(site, _PagesHandler, PREFIX) as url:
        yield url


def test_a_missing_address_gets_the_styled_404_page(open_page, base_url):
    page, log = open_page("no/such/chapter.html")
    # the document itself answers 404 (the browser logs that once); nothing else may fail
    assert [u for u in log.failed if "no/such/chapter.html" not in u] == [], log.failed
    assert log.console_errors == ["Failed to load resource: the server responded with a status of 404 (Not Found)"]
    assert not log.page_errors and not log.blocked, log.problems()
    assert "Page not found" in page.title()
    assert page.locator("h1", has_text="Page not found").count() == 1
    # the theme's stylesheet loaded from the site's absolute path, so the page is styled
    assert page.evaluate("getComputedStyle(document.body).fontFamily") != "Times New Roman"
    assert page.evaluate("[...document.styleSheets].filter(s => s.href && s.href.includes('/_static/')).length") > 0
    # its navigation leads back into the course
    links = page.eval_on_selector_all("nav a.reference.internal", "as => as.map(a => a.href)")
    chapter = next(h for h in links if "chapters/02_qkv" in h)
    page2, log2 = open_page(urllib.parse.urlsplit(chapter).path[len(PREFIX):])
    assert not log2.problems(), log2.problems()
    assert "Queries" in page2.title()


def test_every_page_has_a_favicon_a_canonical_address_and_a_description(site):
    for rel in ["index.html", "chapters/02_qkv.html", "appendix/glossary.html"]:
        html = (site / rel).read_text()
        assert 'rel="icon"' in html and "favicon.svg" in html, rel
        assert f'<link rel="canonical" href="{BASE}{rel}"' in html, rel
        assert '<meta name="description" content="' in html, rel
        assert f'<meta property="og:url" content="{BASE}{rel}"' in html, rel
        assert "Project name not set" not in html, rel


def test_sitemap_lists_every_page_under_the_published_address(site):
    root = ET.parse(site / "sitemap.xml").getroot()
    locs = [e.text for e in root.iter("{http://www.sitemaps.org/schemas/sitemap/0.9}loc")]
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    for f in files:
        assert f"{BASE}{f}.html" in locs, f"{f} is not in sitemap.xml"
    assert all(loc.startswith(BASE) for loc in locs)
