"""Sphinx extension: the published site's addresses, from one setting.

The book is published at GitHub Pages, ``https://OWNER.github.io/REPO/``, for the
repository ``https://github.com/OWNER/REPO`` named in ``_config.yml`` (``repository:
url``). From that one setting this extension derives, unless they are set explicitly:

- ``html_baseurl`` (canonical links, and the addresses in ``sitemap.xml`` written by
  sphinx-sitemap),
- ``ogp_site_url`` and ``ogp_site_name`` (the Open Graph ``og:url`` and site name of link
  previews, sphinxext-opengraph; the name is the book's title),
- ``notfound_urls_prefix`` (the 404 page, sphinx-notfound-page, is served for missing
  addresses at any depth, so its links are absolute and start with the site's path).

Set ``sphinx: config: html_baseurl`` in ``_config.yml`` to publish somewhere else.

Until a publisher sets the repository (``tools/set_repository.py``; the course ships with the
placeholder ``https://github.com/OWNER/...``), the launch buttons (Binder, Colab, JupyterHub)
and the repository and issue buttons are left out of every page: they would open a
repository that does not exist.
"""
from __future__ import annotations

import re
import urllib.parse

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)


PLACEHOLDER_OWNER = "OWNER"   # the owner in _config.yml's repository url until a publisher sets it


def published(repository_url: str) -> bool:
    """Whether ``repository_url`` names a real repository (not ``https://github.com/OWNER/...``)."""
    m = re.fullmatch(r"https://github\.com/([^/]+)/[^/]+?/?", (repository_url or "").strip())
    return bool(repository_url) and not (m and m.group(1) == PLACEHOLDER_OWNER)


def hide_buttons_until_published(app: Sphinx, config: Config) -> None:
    """No launch, repository or issue button while the repository url is the placeholder."""
    opts = config.html_theme_options if config.html_theme_options is not None else {}
    if published(opts.get("repository_url", "")):
        return
    opts["launch_buttons"] = {}
    for key in ("use_repository_button", "use_issues_button", "use_edit_page_button"):
        opts[key] = False
    config.html_theme_options = opts


def pages_url(repository_url: str) -> str:
    """The GitHub Pages address of a GitHub repository, with a trailing slash.

    >>> pages_url("https://github.com/ada/attention-course")
    'https://ada.github.io/attention-course/'
    """
    m = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?", repository_url.strip())
    if not m:
        raise ValueError(f"repository url {repository_url!r} is not https://github.com/OWNER/REPO; "
                         "set sphinx: config: html_baseurl in _config.yml to the site's address")
    owner, repo = m.groups()
    if repo.lower() == f"{owner.lower()}.github.io":  # a user or organisation site
        return f"https://{repo.lower()}/"
    return f"https://{owner.lower()}.github.io/{repo}/"


def derive_addresses(app: Sphinx, config: Config) -> None:
    if not config.html_baseurl:
        repo = (config.html_theme_options or {}).get("repository_url", "")
        if not repo:
            logger.warning("no repository url in _config.yml: the sitemap and link previews have no address")
            return
        config.html_baseurl = pages_url(repo)
    base = config.html_baseurl if config.html_baseurl.endswith("/") else config.html_baseurl + "/"
    config.html_baseurl = base
    if "ogp_site_url" in config and not config.ogp_site_url:
        config.ogp_site_url = base
    if "ogp_site_name" in config and not config.ogp_site_name:
        config.ogp_site_name = config.html_title or config.project
    if "notfound_urls_prefix" in config:
        config.notfound_urls_prefix = urllib.parse.urlsplit(base).path or "/"


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", derive_addresses, priority=100)
    app.connect("config-inited", hide_buttons_until_published, priority=100)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
