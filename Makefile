# Two commands: `make book` builds the HTML book, `make test` checks everything CI checks.
# Both create a virtual environment in .venv (if missing) and install the pinned, tested stack.
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pytest-xdist workers; --dist loadscope keeps each notebook's cells on one worker, in order.
JOBS   ?= 2
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p tests.nbval_patience

.PHONY: install artifacts book test provenance unit notebooks notebooks-portable book-strict benchmarks-smoke colab-check clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, pinned to the CPU build: an unpinned torch pulls gigabytes of CUDA packages.
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[test]"
	# The notebooks' kernel ("python3") is this environment's Python.
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mini_bert)"
	touch $(STAMP)

install: $(STAMP)

book: install
	$(BIN)/jupyter-book build .
	@echo "open _build/html/index.html"

# The shipped logs are current: the code reproduces every arm's fingerprint (mini_bert/provenance.py;
# about 7 minutes on two cores, two single-thread workers). It names every number that moved.
provenance: install
	$(BIN)/python -m mini_bert provenance --no-progress

# --durations: the slowest tests, named in CI's log, where its time goes.
unit: install
	$(BIN)/python -m pytest tests -n $(JOBS) --dist loadscope --durations=15

# Build the cached artifacts the chapters share once, before two notebooks race to build them:
# the vocabularies, and the book's pretrained tiny BERT. A copy of that model ships with the package
# (readers load it in seconds); here it is trained again from scratch (4.5 to 9 minutes on two
# cores when the cache has none) and its held-out scores compared with the shipped copy's.
artifacts: install
	$(BIN)/python -c "from mini_bert.build import tokenization, bpe; tokenization.default_tokenizer(); bpe.default_bpe_tokenizer()"
	$(BIN)/python -m mini_bert pretrained tiny-wiki --compare

# One torch thread per notebook kernel: with two kernels on two cores, torch's default of one thread
# per core oversubscribes the CPU, and its spinning threads then make training steps ~20x slower.
notebooks: artifacts
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest $(NBVAL) chapters -n $(JOBS) --dist loadscope

# The notebooks as another CPU would run them. Floating-point results differ between CPUs
# (vector width, FMA, kernel choice): torch's plain kernels (ATEN_CPU_CAPABILITY=default instead
# of AVX2/AVX-512) move the last bits of every float here, as a reader's laptop would. A compared
# output that changes is a bug in the notebook: round it to the precision the prose uses, or tag
# the cell nbval-ignore-output and assert its claim with a margin (CONTRIBUTING.md). Two kernels of
# one thread, as `notebooks`: one kernel of two threads took 1,340 s of CI's 90 minutes, the tiny
# model's products too small to fill two threads. `make test` runs the notebooks this way only:
# the committed outputs were made with this machine's own kernels, so a run that passes with other
# kernels has checked what a run with CI's own would (each run takes about 14 minutes of CI's 60).
notebooks-portable: artifacts
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 $(BIN)/python -m pytest $(NBVAL) chapters -n $(JOBS) --dist loadscope

book-strict: install
	rm -rf _build
	$(BIN)/jupyter-book build -W -n --keep-going .
	# What the rendered pages must contain (widget state, bertviz output, figures, glued numbers), now
	# that they exist, and, in a headless Chromium (.ci/run installs it): every page loads without a
	# JavaScript error, the kernel-free views respond to their controls, solutions stay hidden until clicked.
	$(BIN)/python -m pytest tests/test_rendering.py

benchmarks-smoke: install
	@for b in benchmarks/*.py; do echo "== $$b --smoke"; $(BIN)/python $$b --smoke || exit 1; done

# Colab compatibility (tests/test_colab_install.py, about 2 minutes): a fresh environment in a temporary
# folder gets torch (the CPU build: Colab brings its own), then mini-bert[notebooks] and Colab's
# ipywidgets 7.7.1 resolved from the package's own ranges, NOT constraints.txt, as Colab's setup cell
# installs it; there every module the chapters import must import and every widget they build must build.
colab-check: install
	MINI_BERT_COLAB_CHECK=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests/test_colab_install.py -s

# Each step in turn, stopping at the first failure, each followed by its wall-clock seconds, so that
# CI's log says where its time goes.
TEST_STEPS := provenance unit notebooks-portable book-strict benchmarks-smoke colab-check
test: install
	@for step in $(TEST_STEPS); do \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$step || exit 1; \
	  echo "== make $$step: $$(( $$(date +%s) - start )) s"; \
	done

clean:
	rm -rf _build .pytest_cache
