# The two set-up commands of README.md live here. Each builds its own virtualenv on a
# fresh machine: torch is pinned to the CPU build that lies on disk (a looser range
# would pull a multi-GB CUDA build).
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.ddiag-installed
RUN_DIR ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)
PYTEST_ARGS ?=

.PHONY: demo test venv system-deps clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check torch==2.13.0
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[dev]'
	$(PY) -c "import torch, diag; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

# The built-in local default: a short 2-rank gloo training under the decorator, then
# what each rank logged.
demo: $(STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/torchrun --nproc-per-node 2 --master-addr 127.0.0.1 \
	  --master-port $$($(PY) -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])") \
	  examples/decorated_ddp.py --out $(RUN_DIR) --steps 50
	$(VENV)/bin/ddiag summary $(RUN_DIR)

# As root: Slurm and munge for the lab tests, Chromium and Prometheus for the report and
# metrics tests. Both scripts are no-ops when everything is present.
system-deps:
	@if [ "$$(id -u)" = 0 ]; then .ci/install-lab-deps.sh && .ci/install-test-deps.sh; fi

test: $(STAMP) system-deps
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs
