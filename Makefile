# hpcbundle: build matched Horovod images, generate launch lines, run and test them.
# `make help` lists the targets. Two commands set up everything on a fresh machine:
#   make demo   # installs what it needs, then runs the main job on the default `local` site
#   make test   # installs what it needs, then runs the whole test suite
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# RECIPE, PYTHON and GPU_WHEELHOUSE are the user's text (a CI form, a file name): make never expands them (a
# $(...) in one stays text), never exports them, and puts each into a shell line as one single-quoted word
# (shword, on $(value ...)). When make reads this file, scripts/make-vars.sh refuses a RECIPE that is no recipe
# name or path and a PYTHON that is no Python version or interpreter: one line, exit 2, before anything runs.
unexport RECIPE PYTHON GPU_WHEELHOUSE
shword = '$(subst ','\'',$(1))'
define newline


endef
MAKE_VARS_PROBLEM := $(strip $(foreach var,RECIPE PYTHON,$(if $(filter command% environment%,$(origin $(var))),\
  $(shell bash scripts/make-vars.sh $(var) $(call shword,$(value $(var))) $(if $(findstring $(newline),$(value $(var))),line-break)))))
ifneq ($(MAKE_VARS_PROBLEM),)
$(error $(MAKE_VARS_PROBLEM))
endif

# The interpreter for the venv: PYTHON if set, else Debian's python3 (scripts/setup/python-env.sh
# chooses the same way, and makes the venv again if another Python made it).
# PYTHON may also be a bare version (make gpu-wheelhouse PYTHON=3.11): then pythonX.Y.
VENV_PYTHON := $(or $(if $(filter 3.%,$(value PYTHON)),python$(value PYTHON),$(value PYTHON)),$(wildcard /usr/bin/python3),python3)
VENV ?= .venv
BIN := $(VENV)/bin
HPCBUNDLE := $(BIN)/hpcbundle
export HPCBUNDLE_CACHE ?= $(HOME)/.cache/hpcbundle

ifeq ($(value RECIPE),)
RECIPE = cpu-local
endif
# RECIPE is a name under recipes/ or a path to a team's own recipe file anywhere (e.g. ../team/team.yaml);
# build outputs are named by its file name without .yaml (a recipe's name is its file name).
RECIPE_NAME = $(shell basename -- $(call shword,$(value RECIPE)) | sed -E 's/[.]ya?ml$$//')
RECIPE_WORD = $(call shword,$(value RECIPE))
# An output of RECIPE as one shell word: $(call built,.def) is 'build/NAME.def'; $(call built,.sif.XXXXXX,.) 'build/.NAME.sif.XXXXXX'.
built = $(call shword,$(BUILD)/$(2)$(RECIPE_NAME)$(1))
RECIPES := $(sort $(basename $(notdir $(wildcard recipes/*.yaml))))
BUILD := build
# build-sif: how to get root for the build, and the local base every stage bootstraps from where no
# registry can be reached (hpcbundle render --bootstrap). SIF_FLAGS unset: the way that works here
# (scripts/sif-build-flags.sh: root builds as itself, a user with /etc/subuid entries with --fakeroot,
# anyone else gets one line saying what to pass); or pass it, e.g. SIF_SUDO=sudo SIF_FLAGS=.
SIF_FLAGS ?= $$(bash scripts/sif-build-flags.sh)
SIF_SUDO ?=
export SIF_BOOTSTRAP ?=
PYTEST_ARGS ?=

.PHONY: help venv setup render build-sif sif-base build-docker wheelhouse gpu-wheelhouse install-bind lint check check-tests test test-gpu demo bench golden clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(BIN)/hpcbundle: pyproject.toml testbed/pyproject.toml
	test -x $(BIN)/python || $(call shword,$(VENV_PYTHON)) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -e ./testbed
	touch $@

venv: $(BIN)/hpcbundle ## Light set-up: a venv with hpcbundle, its testbed and its test tools (enough to render)

setup: ## Full set-up: host packages (Open MPI, SLURM, ...), PyTorch/TensorFlow CPU, Horovod (cached wheel), Apptainer
	bash scripts/setup/host-packages.sh
	PYTHON=$(call shword,$(value PYTHON)) bash scripts/setup/python-env.sh $(VENV)
	bash scripts/setup/apptainer.sh $(VENV)
	touch $(BIN)/hpcbundle

render: venv ## Render every recipe as a Dockerfile, a .def and a bare-metal install script into build/
	@for r in $(RECIPES); do \
	  $(HPCBUNDLE) render $$r --format docker -o $(BUILD)/$$r.Dockerfile; \
	  $(HPCBUNDLE) render $$r --format singularity -o $(BUILD)/$$r.def; \
	  $(HPCBUNDLE) render $$r --format shell -o $(BUILD)/$$r.sh; \
	done

wheelhouse: venv ## Put wheels no index serves (torch+cpu, torchvision where the recipe names it) into wheelhouse/ for image builds
	@pins=$$($(BIN)/python scripts/setup/pins.py); eval "$$pins"; \
	ls "wheelhouse/torch-$$TORCH_VERSION+$$TORCH_VARIANT"-*.whl >/dev/null 2>&1 || \
	  $(BIN)/pip download --quiet --no-deps --dest wheelhouse "torch==$$TORCH_VERSION+$$TORCH_VARIANT"
	@pins=$$($(BIN)/python scripts/setup/pins.py); eval "$$pins"; \
	[ -z "$$TORCHVISION_VERSION" ] || ls "wheelhouse/torchvision-$$TORCHVISION_VERSION+$$TORCH_VARIANT"-*.whl >/dev/null 2>&1 || \
	  $(BIN)/pip download --quiet --no-deps --dest wheelhouse "torchvision==$$TORCHVISION_VERSION+$$TORCH_VARIANT"

build-sif: venv wheelhouse ## Build build/$(RECIPE_NAME).sif with apptainer or singularity (RECIPE=name or path; SIF_BOOTSTRAP=AGENT:SOURCE: a local base)
	@flags="$(SIF_FLAGS)"
	@bootstrap=(); [[ -z $$SIF_BOOTSTRAP ]] || bootstrap=(--bootstrap "$$SIF_BOOTSTRAP"); \
	$(HPCBUNDLE) render $(RECIPE_WORD) --format singularity "$${bootstrap[@]}" -o $(call built,.def)
	@$(BIN)/python -m hpcbundle_testbed.sif horovod $(RECIPE_WORD) wheelhouse
	@builder=$$(PATH="$$PATH:$(abspath $(BIN))" && command -v apptainer || command -v singularity || true); \
	if [ -z "$$builder" ]; then \
	  name=$(call shword,$(RECIPE_NAME)); \
	  echo "make build-sif: neither apptainer nor singularity is installed on this host (make setup installs Apptainer)." >&2; \
	  echo "  Build the Docker image here (make build-docker RECIPE="$(RECIPE_WORD)"), then on a host with Apptainer:" >&2; \
	  echo "    apptainer build $$name.sif docker-daemon://hpcbundle/$$name:latest" >&2; \
	  echo "  or copy a docker-archive (docker save hpcbundle/$$name:latest -o $$name.tar) and run:" >&2; \
	  echo "    apptainer build $$name.sif docker-archive://$$name.tar" >&2; \
	  exit 2; \
	fi; \
	flags="$(SIF_FLAGS)"; \
	partial=$$(mktemp -u $(call built,.sif.XXXXXX,.)); \
	trap 'rm -f "$$partial"' EXIT; \
	echo "+ $(SIF_SUDO) $$builder build $$flags $$partial "$(call built,.def); \
	$(SIF_SUDO) "$$builder" build $$flags "$$partial" $(call built,.def); \
	mv -f "$$partial" $(call built,.sif); \
	echo "built "$(call built,.sif)

sif-base: venv ## Print a local base for SIF_BOOTSTRAP=localimage:...: the debootstrapped Debian 12 as a sandbox (cached)
	@$(BIN)/python -m hpcbundle_testbed.sif base

build-docker: venv wheelhouse ## Build the Docker image hpcbundle/$(RECIPE_NAME) (RECIPE=name or path; DOCKER_HOST=your engine)
	@if [ -n "$${DOCKER_HOST:-}" ]; then \
	  $(HPCBUNDLE) build-docker $(RECIPE_WORD); \
	else \
	  echo "DOCKER_HOST is not set: starting a private Docker engine with a local debootstrapped base image"; \
	  $(BIN)/python -m hpcbundle_testbed.docker_engine -- \
	    $(HPCBUNDLE) build-docker $(RECIPE_WORD) --base-image local/debian:bookworm --network host; \
	fi

# The route for GPU nodes without compilers or network (docs/images.md): the recipe's rendered install
# script builds Horovod here for the node's Python, and the wheels go into one directory to copy there.
GPU_WHEELHOUSE_ARGS = $(RECIPE_WORD) --python $(call shword,$(value PYTHON)) \
  $(if $(value GPU_WHEELHOUSE),--out $(call shword,$(value GPU_WHEELHOUSE)))

gpu-wheelhouse: venv ## Wheels for an offline GPU node without compilers: build/gpu-wheelhouse/RECIPE-pyX.Y (RECIPE=..., PYTHON=3.11)
	@[[ -n $(call shword,$(value PYTHON)) ]] || { echo "make gpu-wheelhouse: PYTHON is not set: name the GPU node's Python version, e.g. PYTHON=3.11" >&2; exit 2; }
	$(BIN)/python -m hpcbundle_testbed.gpu_wheelhouse $(GPU_WHEELHOUSE_ARGS)

# hpcbundle-bind, the gpu-numa placement script launch lines name (plain POSIX sh; images built here carry it).
PREFIX ?= /usr/local
BIND_SCRIPT := src/hpcbundle/data/hpcbundle-bind

install-bind: ## Install hpcbundle-bind on this host into $(PREFIX)/bin (on every node of a site with node.host_bind)
	install -D -m 0755 $(BIND_SCRIPT) $(DESTDIR)$(PREFIX)/bin/hpcbundle-bind
	@echo "installed $(DESTDIR)$(PREFIX)/bin/hpcbundle-bind"

lint: venv render ## ruff check + format check, hadolint on rendered Dockerfiles, shellcheck on the project's shell, .def structure
	$(BIN)/ruff check src tests examples bench testbed
	$(BIN)/ruff format --check src tests examples bench testbed
	$(BIN)/hadolint --config .hadolint.yaml $(BUILD)/*.Dockerfile
	$(BIN)/shellcheck $(BUILD)/*.sh $(BIND_SCRIPT) src/hpcbundle/data/hpcbundle-torchenv scripts/setup/*.sh scripts/device/*.sh scripts/sif-build-flags.sh scripts/make-vars.sh testbed/src/hpcbundle_testbed/rsh-agent testbed/src/hpcbundle_testbed/node-exec .ci/run
	$(BIN)/python tests/defcheck.py $(BUILD)/*.def

# Every test file that uses assert_golden (tests/helpers.py) or reads HPCBUNDLE_REGEN_GOLDEN itself, run with HPCBUNDLE_REGEN_GOLDEN=1, so
# no golden file is missed; golden comparisons live in tests that need no cluster and no Docker.
GOLDEN_TESTS = $(shell grep -lwE 'assert_golden|HPCBUNDLE_REGEN_GOLDEN' tests/test_*.py)

golden: venv ## Regenerate every golden file after an intended change (review the diff!)
	HPCBUNDLE_REGEN_GOLDEN=1 $(BIN)/pytest -q -m "not cluster and not docker" $(GOLDEN_TESTS)
	git status --short tests/golden

# The fast lane's selection: every test that needs no cluster, no Docker engine, no Apptainer, no GPU, no CUDA
# download and nothing of the full set-up (markers registered by hpcbundle_testbed's plugins).
CHECK_MARKERS := not cluster and not docker and not apptainer and not gpu and not gpu_build and not full_setup

# How long it takes is stated in one place, the README's `make check` line (measured on a fresh clone).
check: venv ## Fast lane (its time: README): unit, golden, property, doctest tests and lint; no cluster, Docker, Horovod or MPI
	$(MAKE) --no-print-directory -j2 --output-sync=target lint check-tests

# The fast lane's tests, run beside lint, spread over the cores (pytest-xdist); property tests draw a fifth
# of their examples here (HPCBUNDLE_FAST_LANE, tests/helpers.py examples()), all of them in `make test`.
check-tests: venv
	HPCBUNDLE_FAST_LANE=1 PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pytest -q -n auto -m "$(CHECK_MARKERS)" $(PYTEST_ARGS)

test: setup ## Run the whole test suite (real MPI, Horovod, SLURM, namespace cluster); no GPU needed
	$(BIN)/pytest -m "not gpu" $(PYTEST_ARGS)

test-gpu: venv ## The tests that need an NVIDIA GPU (each skips "no NVIDIA GPU on this host" elsewhere)
	$(BIN)/python -m pytest -m gpu $(PYTEST_ARGS)

DEMO_ARGS ?= --epochs 5

demo: setup ## The main job: a real 2-rank Horovod training run on the default `local` site
	$(HPCBUNDLE) check $(RECIPE_WORD) --site local
	PATH="$(CURDIR)/$(BIN):$$PATH" $(HPCBUNDLE) launch --site local --np 2 --exec -- \
	  python examples/pytorch_train.py $(DEMO_ARGS)

BENCH_OUT ?= $(BUILD)/bench
# The sizes of docs/performance.md's tables: latency 4K-256K, 4M, and the 64 MiB targets (--sizes takes any list).
BENCH_SIZES ?= 4K,16K,64K,256K,4M,64M

bench: setup ## Benchmarks on the namespace cluster: allreduce vs link and peers (+ tune), training Horovod vs DDP, launch overhead, launch gate, scaling, doctor's program check
	mkdir -p $(BENCH_OUT)
	@# Every benchmark runs even if one before it fails; make bench fails at the end if any did.
	status=0; \
	$(BIN)/python bench/allreduce.py --sizes $(BENCH_SIZES) --tuned --tuned-out $(BENCH_OUT)/tuned.json \
	  | tee $(BENCH_OUT)/allreduce.txt || status=1; \
	$(BIN)/python bench/train.py --tuned-from $(BENCH_OUT)/tuned.json | tee $(BENCH_OUT)/train.txt || status=1; \
	$(BIN)/python bench/launch.py | tee $(BENCH_OUT)/launch.txt || status=1; \
	$(BIN)/python bench/gate.py | tee $(BENCH_OUT)/gate.txt || status=1; \
	$(BIN)/python bench/scaling.py --out $(BENCH_OUT)/scaling | tee $(BENCH_OUT)/scaling.txt || status=1; \
	$(BIN)/python bench/doctor_program.py | tee $(BENCH_OUT)/doctor_program.txt || status=1; \
	exit $$status

clean: ## Remove build outputs (keeps the venv and the cache)
	rm -rf $(BUILD)
