# Tidemark: `make demo` runs everything on generated live data; `make test` runs the suite.
# Both bootstrap what they need on a fresh Debian/Ubuntu machine.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
APT_PACKAGES :=

.PHONY: demo test explore system-deps venv bench clean

demo: system-deps venv
	@$(VENV)/bin/tidemark demo

# Two phases (tests/conftest.py): the tests that share nothing run on every core, then the
# ones that start Spark or a whole deployment, or measure latency, run alone.
test: system-deps venv
	$(PY) -m pytest -q -n auto -m "not serial"
	$(PY) -m pytest -q -m serial

# The property tests with new random examples, many more of them (make test repeats the same).
explore: system-deps venv
	TIDEMARK_EXPLORE=1 $(PY) -m pytest -q

bench: system-deps venv
	$(PY) -m pip install -q -e ".[bench]"
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e ".[dev]"
	# The bytecode of the installed packages and of our own modules, on every core (pip
	# compiles one file at a time: 45 s of the install, 36 this way): every process a run
	# starts reads it instead of compiling the sources, even where PYTHONDONTWRITEBYTECODE
	# keeps Python from writing it.
	$(PY) -m compileall -q -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \
	  app tidemark sketches workers tidemark_cli >/dev/null
	# Compile the sketches' kernels into Numba's cache now (the worker's update, the API's
	# answers at an instant and over ranges), on every core, and beside it make the local
	# driver JVM's class-data archive (workers/jvm_archive.py): the first start is then warm.
	$(PY) -m workers.jvm_archive & archive=$$!; \
	  $(PY) -c "from app.warm import warm_install; warm_install()" && wait $$archive
	touch $(STAMP)

# Redis, Java for Spark, Chromium for the browser tests and promtool (Debian's `prometheus`,
# without its recommended node exporter) for the Prometheus API tests, from Debian's packages.
system-deps:
	@missing=""; lean=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	test -x /usr/bin/chromium || missing="$$missing chromium"; \
	command -v promtool >/dev/null || lean="prometheus"; \
	if [ -n "$$missing$$lean" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing $$lean"; \
	    apt-get update -qq && \
	    { [ -z "$$missing" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } && \
	    { [ -z "$$lean" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$lean >/dev/null; }; \
	  else \
	    echo "missing:$$missing $$lean — install them (sudo apt-get install$$missing $$lean)"; exit 1; \
	  fi; \
	fi

clean:
	rm -rf .run $(VENV)
