# The two set-up commands of README.md live here. Each builds its own virtualenv on a
# fresh machine: torch==2.13.0, the CPU build that lies on disk, goes in first; the
# range in pyproject.toml (torch>=2.8) then keeps it instead of pulling a multi-GB CUDA
# build, and the assert below says so if it ever did not.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.ddiag-installed
# RUN_DIR=... picks the demo's run directory; by default ddiag makes a new runs/scale-test-*.
RUN_DIR ?=
PYTEST_ARGS ?=

.PHONY: demo test test-fast venv system-deps clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check torch==2.13.0
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[dev]'
	$(PY) -c "import torch, diag; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

# The built-in local default of the main job: a staged scale test (1 -> 2 -> ... ranks up
# to this host's cores) of the reference trainer, with its report.
demo: $(STAMP)
	$(VENV)/bin/ddiag scale-test $(if $(RUN_DIR),--out $(RUN_DIR))

# As root: Slurm and munge for the lab tests, Chromium and Prometheus for the report and
# metrics tests. Both scripts are no-ops when everything is present.
system-deps:
	@if [ "$$(id -u)" = 0 ]; then .ci/install-lab-deps.sh && .ci/install-test-deps.sh; fi

test: $(STAMP) system-deps
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

# The fast tier, for the edit-test loop: no test that launches ranks or a job for more than
# a few seconds, nothing that needs root (docs/development.md). CI runs `make test`.
test-fast: $(STAMP)
	$(VENV)/bin/pytest -q -m "not slow and not lab" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs
