# The course's two commands are `make book` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export PYTHONHASHSEED := 0
export MPLBACKEND := Agg

.PHONY: help venv book test unit nbval book-check notebooks bench gpu-check freeze clean

help:
	@echo "make book       build the website into _build/html (executes every notebook)"
	@echo "make test       unit/property/exercise tests, strict nbval on every chapter, the book build"
	@echo "make notebooks  re-execute every chapter and store its outputs (after editing one)"
	@echo "make bench      run the benchmarks"

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)

book: venv
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo
	@echo "Built. Open _build/html/index.html in a browser, or serve it:"
	@echo "  $(BIN)/python -m http.server -d _build/html 8000   # then visit http://127.0.0.1:8000"

unit: venv
	$(BIN)/python -m pytest -q tests

nbval: venv
	$(BIN)/python -m pytest -q --nbval --nbval-current-env --nbval-cell-timeout=300 chapters

book-check: venv
	rm -rf _build/html _build/.doctrees
	$(BIN)/jupyter-book build . -W -n --keep-going

test: unit nbval book-check

notebooks: venv
	$(BIN)/python tools/run_notebooks.py

bench: venv
	$(BIN)/python -m benchmarks

gpu-check: venv
	ATTNLIB_DEVICE=cuda $(BIN)/python -m pytest -q tests
	ATTNLIB_DEVICE=cuda $(BIN)/python -m pytest -q --nbval --nbval-current-env chapters
	$(BIN)/python -m benchmarks

freeze: venv
	$(BIN)/python -m pip freeze --exclude-editable

clean:
	rm -rf _build .pytest_cache .hypothesis
