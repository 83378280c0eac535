# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install schemas manifests clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The install is editable; it is redone only when the metadata changes or a
# package is added (the editable finder maps the packages it saw at install).
PACKAGES := $(wildcard libs/*/__init__.py services/*/__init__.py)
$(STAMP): pyproject.toml $(PACKAGES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The pipeline on a sample cluster, then the simulator on the bundled demo
# scenario (a memory spike and a NUMA hotspot) with its reports, then that
# recorded run replayed exactly (every decision and action equal, or make
# fails) and as a what-if with the best-fit GPU strategy against it.
demo: $(STAMP)
	$(BIN)/tidal demo
	$(BIN)/tidal simulate --scenario examples/demo/scenario.yaml --data-dir .tidal/simulate --report .tidal/demo-report.json --html .tidal/demo-report.html
	$(BIN)/tidal replay --recording .tidal/simulate --namespace sim --cluster sim --from earliest --set placement.gpu-strategy=best-fit --show 5 --report .tidal/demo-replay.json --html .tidal/demo-replay.html

# The HTML report test renders in Debian's headless Chromium; install it when we
# can (root with apt). Without it that one test skips and says why.
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	-@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium not installed: the HTML report test will skip"; fi

# `kubectl get pods -o wide` against a running simulation is tested with the real
# kubectl: Debian's kubernetes-client, installed the same way. Without it that
# one test skips and says why.
KUBECTL := /usr/bin/kubectl

$(KUBECTL):
	-@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null; \
	else echo "kubectl not installed: the kubectl test will skip"; fi

# Test files run on 5 workers, each with its own brokers: much of the suite
# waits on brokers and processes, so five keep a 2-core machine busy where
# fewer leave it idle (4 workers: 610 s, 5: 523 s, one clean clone each).
# First the bytecode of the project's own modules: with PYTHONDONTWRITEBYTECODE
# set (these machines, the Dockerfile) nothing writes it, and every process a
# test starts (each service a `tidal run`) compiled every module it imported.
test: $(STAMP) $(CHROMIUM) $(KUBECTL)
	$(BIN)/python -m compileall -q libs services
	$(BIN)/python -m pytest -q -n 5 --dist loadfile --no-loadscope-reorder --durations=20

schemas: $(STAMP)
	$(BIN)/tidal schemas export
	$(BIN)/tidal schemas crds

# The rendered install files, k8s/install/<bus>.yaml, one per overlay: run after
# any change under k8s/ (tests/test_install.py fails while they differ).
manifests: $(STAMP)
	$(BIN)/python -m tidal_cli.manifests

bench: $(STAMP)
	$(BIN)/python bench/placement.py --nodes 1000 5000
	$(BIN)/python bench/placement_openb.py --seeds 3

clean:
	rm -rf $(VENV) .tidal .pytest_cache
