# lingbot-fleet: every target does its own set-up on a fresh Debian 12 machine (as root).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
APT_PACKAGES := python3 python3-venv python3-dev gcc make openssh-client debootstrap \
	systemd-container valgrind pciutils
DEMO_PROFILES ?= a6000-phb,a6000-chipset,a6000-noacpi,a6000-persistenced-off,a6000-x8
PYTEST_ARGS ?=

.PHONY: help setup apt-packages native demo test lint unit lab-test molecule bench lab-down clean \
	collection wheel ee-context

help:
	@echo "make demo   boot a lab of simulated GPU servers and run site.yml on it"
	@echo "make test   lint and every test (unit, lab integration, molecule)"
	@echo "make collection / wheel / ee-context   the collection lingbot.fleet, the CLI wheel"
	@echo "            carrying it, the execution environment's build context (ansible-builder)"

apt-packages:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.installed: pyproject.toml | apt-packages
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# Every Ansible worker imports python/lingbot_fleet afresh: compiled once here (only what
# changed), so no worker compiles it again, even where PYTHONDONTWRITEBYTECODE is set.
setup: apt-packages $(VENV)/.installed
	@$(BIN)/python -m compileall -q python plugins

# promtool (Debian package prometheus) checks the monitor's metrics in a unit test. The
# package is unpacked, not installed, so no Prometheus server is set up on this machine.
PROMTOOL := $(CURDIR)/.tools/prometheus/usr/bin/promtool
export PROMTOOL
$(PROMTOOL):
	@rm -rf .tools/prometheus && mkdir -p .tools/prometheus
	cd .tools/prometheus && { apt-get download prometheus >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get download prometheus >/dev/null; }; }
	dpkg-deb -x .tools/prometheus/prometheus_*.deb .tools/prometheus
	find .tools/prometheus -type f ! -name promtool -delete
	test -x $@

# Headless Chromium (Debian package chromium-headless-shell, no desktop) renders fleet.html to
# a PNG and its DOM in a unit test (tests/audit/test_report_screenshot.py). The package lists
# are refreshed only when the install fails with the ones on the machine.
CHROMIUM := /usr/bin/chromium-headless-shell
export CHROMIUM
$(CHROMIUM):
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		chromium-headless-shell >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		chromium-headless-shell >/dev/null; }
	test -x $@

# The Ansible collection lingbot.fleet (tree and tarball in build/collection, by
# collection/build.py), the CLI wheel that carries it (build/dist: the package's standard build,
# which builds the collection into every wheel, as pip install . does) and the execution
# environment's build context (context/). tests/collection builds its own copies.
collection: setup
	$(BIN)/python collection/build.py collection --output-dir build/collection

wheel: setup
	$(BIN)/pip wheel --no-deps -q -w build/dist .

ee-context: collection
	$(BIN)/ansible-builder create --context context -f execution-environment.yml

native: setup
	$(MAKE) -s -C lab/native

demo: setup native
	$(BIN)/lingbot-fleet lab up --profiles $(DEMO_PROFILES)
	$(BIN)/lingbot-fleet lab status
	@# The lab's nodes are disposable: let them reboot, two at a time, into the fixed kernel
	@# command line, so the audit below shows only what the simulated hardware really has.
	$(BIN)/ansible-playbook -i inventory/lab/hosts.yml site.yml -l gpu-nodes \
		-e kernel_cmdline_reboot=if_required -e kernel_cmdline_reboot_batch=2
	$(BIN)/lingbot-fleet audit -i inventory/lab/hosts.yml --report-dir reports/demo --fail-on critical
	@sed -n '1,/^## Nodes/p' reports/demo/fleet.md
	@echo "Full report: reports/demo/fleet.html (and fleet.md, fleet.json, junit.xml)"
	@echo; echo "The lab stays up: try 'ansible-playbook -i inventory/lab/hosts.yml site.yml -l gpu-nodes --check --diff'."
	@echo "Stop it with: $(BIN)/lingbot-fleet lab down"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint --profile production --offline

# The unit suite runs on every core, a test file per worker at a time (its tests share
# their file's fixtures), then the tests that bound a wall time from above run alone, so a
# busy neighbour cannot fail them; the lab suite shares one booted lab, so it runs in one
# process.
unit: setup native $(PROMTOOL) $(CHROMIUM)
	$(BIN)/pytest -m "not lab and not wall_clock" -n auto --dist loadfile $(PYTEST_ARGS)
	$(BIN)/pytest -m "wall_clock and not lab" $(PYTEST_ARGS)

lab-test: setup native
	$(BIN)/pytest -m lab $(PYTEST_ARGS)

molecule: setup native
	cd $(CURDIR) && $(BIN)/molecule test --all

test: lint unit lab-test molecule

# make bench: the planner at 16, 32 and 64 GPUs against 8 (bench/plan_speed.py), the lab's
# boot time, then every entry point against the SSH floor, side by side in one run
# (bench/fleet_speed.py prints the ratios, the targets and the per-task profile of a no-op
# site.yml run).
bench: setup native
	$(BIN)/python bench/plan_speed.py
	$(BIN)/python bench/lab_boot.py --sizes 4,16
	$(BIN)/lingbot-fleet lab up --profiles $(DEMO_PROFILES)
	$(BIN)/ansible-playbook -i inventory/lab/hosts.yml site.yml >/dev/null
	$(BIN)/python bench/fleet_speed.py --repeats 3
	$(BIN)/lingbot-fleet lab down

lab-down: setup
	$(BIN)/lingbot-fleet lab down

clean: lab-down
	$(MAKE) -s -C lab/native clean
