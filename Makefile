# The course's two commands are `make book` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The site serves its own MathJax, require.js and widget manager (no CDN): installed from
# npm (package-lock.json) and copied into site_assets/vendor/ (git-ignored).
ASSETS := site_assets/vendor/VERSIONS.json
CHROMIUM ?= /usr/bin/chromium
# apt-get needs root: CI runs as root; elsewhere use sudo when there is one
SUDO   := $(shell [ "$$(id -u)" = 0 ] || command -v sudo)
# the browser and book-link tests run after the book is built, not with the unit tests
SITE_TESTS := tests/browser tests/test_book.py tests/test_publish.py
# suites with their own target (and their own conftest.py), left out of `make unit`
SEPARATE   := $(SITE_TESTS) tests/jupyterlab
export PYTHONHASHSEED := 0

.PHONY: help venv assets node chromium fonts gettext-tools book book-en book-zh gettext update-po publish dist test unit nbval book-check browser jupyterlab notebooks bench gpu-check freeze clean assignments grading

help:
	@echo "make book       build the website: English in _build/html, Chinese in _build/html/zh"
	@echo "                (executes every notebook, once per edition)"
	@echo "make test       unit/property/exercise tests, strict nbval on every chapter, the book build,"
	@echo "                then the site in headless Chromium with the network cut (make browser)"
	@echo "make browser    only the site checks (links, offline browser tests) on the last build"
	@echo "make jupyterlab the chapters in JupyterLab (headless Chromium, Run All on a temp copy) and the"
	@echo "                portable markup on a sample book; screenshots in _build/screenshots/"
	@echo "make notebooks  re-execute every chapter and store its outputs (after editing one)"
	@echo "make assignments  the chapters as student notebooks (no solutions) in _build/assignments/{en,zh}"
	@echo "make bench      run the benchmarks"
	@echo "make publish    build the site and push it to the gh-pages branch (PUBLISH_REMOTE=origin)"
	@echo "make dist       build attnlib's sdist and wheel into dist/"
	@echo "make gettext    extract the English messages into _build/gettext/ (after changing a chapter),"
	@echo "make update-po  then merge them into the Chinese catalogues (README, 'Translating')"

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)

# npm comes from Debian when the machine has none
node:
	@command -v npm >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q nodejs npm; }

$(ASSETS): package.json package-lock.json tools/vendor_assets.py
	@$(MAKE) --no-print-directory node
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	$(PYTHON) tools/vendor_assets.py

assets: $(ASSETS)

# Debian's Chromium for the browser tests (Playwright drives it; no browser download),
# and a CJK font for the Chinese pages
chromium: fonts
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }

# A CJK font: the Chinese edition's figures are drawn with it at build time (the pages
# themselves use the reader's fonts), and the browser tests render Chinese with it
fonts:
	@dpkg -s fonts-wqy-microhei >/dev/null 2>&1 || dpkg -s fonts-noto-cjk >/dev/null 2>&1 || \
	  { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q fonts-wqy-microhei; }

# msgfmt (Debian's gettext) checks the catalogues in the tests
gettext-tools:
	@command -v msgfmt >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q gettext; }

# Both editions: English at _build/html, then the same book in Chinese at _build/html/zh
# (tools/editions.py: language zh_CN, notebooks executed with ATTNLIB_LANG=zh)
book: book-en book-zh
	@echo
	@echo "Built. Open _build/html/index.html in a browser, or serve it:"
	@echo "  $(BIN)/python -m http.server -d _build/html 8000   # then visit http://127.0.0.1:8000"
	@echo "  (the Chinese edition: http://127.0.0.1:8000/zh/)"

book-en: venv assets
	$(BIN)/jupyter-book build . -W -n --keep-going

book-zh: venv assets fonts
	$(BIN)/python tools/editions.py zh -- -W -n --keep-going

# Translating (README): `make gettext` writes the English messages of the book (Sphinx's
# gettext builder) and of attnlib (tools/i18n_extract.py) to _build/gettext/; `make
# update-po` merges them into locales/zh_CN and attnlib/locales/zh_CN (sphinx-intl):
# new messages come in empty, changed ones marked fuzzy, and tests/test_i18n.py names both.
gettext: venv
	$(BIN)/python tools/editions.py gettext

update-po: gettext
	$(BIN)/python tools/editions.py update-po

# The website goes to the gh-pages branch of PUBLISH_REMOTE (a remote name, URL or path),
# with .nojekyll; the source repository's own branches are not touched (tools/publish.py).
PUBLISH_REMOTE ?= origin
publish: book
	$(BIN)/python tools/publish.py --remote $(PUBLISH_REMOTE)

dist: venv
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

unit: venv gettext-tools fonts
	$(BIN)/python -m pytest -q tests $(SEPARATE:%=--ignore=%)

nbval: venv
	$(BIN)/python -m pytest -q --nbval --nbval-current-env --nbval-cell-timeout=300 chapters

book-check: venv assets fonts
	rm -rf _build/html _build/.doctrees _build/zh-build
	$(BIN)/jupyter-book build . -W -n --keep-going
	$(BIN)/python tools/editions.py zh -- -W -n --keep-going

browser: venv chromium
	ATTNLIB_REQUIRE_SITE=1 ATTNLIB_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -q $(SITE_TESTS)

test: unit nbval book-check grading
	@$(MAKE) --no-print-directory browser
	@$(MAKE) --no-print-directory jupyterlab

# Each chapter as a learner opens it: JupyterLab on 127.0.0.1 with a temporary copy of the
# chapters, driven by Playwright in headless Chromium; and CONTRIBUTING.md's markup on a
# small book with the site's configuration (tests/jupyterlab/, a few minutes on 2 cores)
jupyterlab: venv chromium assets
	ATTNLIB_JUPYTERLAB=1 ATTNLIB_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -q tests/jupyterlab

notebooks: venv
	$(BIN)/python tools/run_notebooks.py

# Teaching (appendix/teaching.md): the chapters as student notebooks, without solutions
# or answers, executed once; then `python -m attnlib.grade SUBMISSIONS/ --out REPORT/`
assignments: venv
	$(BIN)/python -m attnlib.assignments --lang en --out _build/assignments/en
	$(BIN)/python -m attnlib.assignments --lang zh --out _build/assignments/zh

# The teacher's tools end to end: student notebooks (no solution text survives), and a
# synthetic class (honest and hostile notebooks) graded in sandboxes, its report opened in
# headless Chromium offline (tests/test_assignments.py, tests/test_grade.py; ~3 min on 2 cores)
GRADING_TESTS := tests/test_assignments.py tests/test_grade.py
SEPARATE += $(GRADING_TESTS)
grading: venv chromium fonts
	ATTNLIB_REQUIRE_SANDBOX=1 ATTNLIB_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -q $(GRADING_TESTS)

bench: venv
	$(BIN)/python -m benchmarks

gpu-check: venv
	@$(BIN)/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'make gpu-check needs a CUDA GPU, and torch.cuda.is_available() is False here (a CPU-only torch or no GPU); make test covers the CPU')"
	ATTNLIB_DEVICE=cuda $(BIN)/python -m pytest -q tests $(SEPARATE:%=--ignore=%)
	ATTNLIB_DEVICE=cuda $(BIN)/python -m pytest -q --nbval --nbval-current-env chapters
	$(BIN)/python -m benchmarks

freeze: venv
	$(BIN)/python -m pip freeze --exclude-editable

clean:
	rm -rf _build .pytest_cache .hypothesis
