# onnxsight: `make demo` sets up and runs the demo job; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
JOBS   ?= 2
# The torch the suite and README's benchmarks were run with; `make lock TORCH=torch` moves it with the rest.
TORCH  ?= torch==2.13.0
# Every version `make setup` installs is pinned here (docs/environments.md); `make lock` moves it on purpose.
LOCK   ?= requirements/lock.txt
# The extras `make setup` installs; the lock pins everything they pull in (an extra added here goes into it
# with `make lock`, or by hand: docs/environments.md).
EXTRAS ?= dev,bench,docs,quant


.PHONY: setup demo test test-latest test-oldest lock test-ops test-mutation test-zoo test-zoo-opsets test-generation test-ort-fusion bench-generation test-vision vision-venv test-ray test-all bench bench-zoo bench-rnn bench-startup bench-large bench-fake bench-ort bench-mask-guard bench-ort-profile sarif-validate docs browser-deps screenshot clean

# torch is installed first, on its own, so that the `torch>=2.13` in pyproject.toml is already met
# when the second line resolves it and no dependency picks a torch build. Where pip is configured
# with a local CPU build of torch 2.13.0 (this project's machines: find-links /opt/wheels) that is
# the build it installs; elsewhere it is PyPI's default build of 2.13.0 (on Linux x86-64 a CUDA
# build, several GB). For the CPU build there, create .venv and install it first:
#   python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
$(STAMP): pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c $(LOCK) "$(TORCH)"
	$(PIP) install -q -c $(LOCK) -e ".[$(EXTRAS)]"
	touch $(STAMP)

setup: $(STAMP)

# The newest releases pyproject.toml allows (pip's choice, no lock; here pip's own configuration caps torch at
# the builds on disk), in a venv of their own, on the core suites. What it resolved is written to
# $(LATEST_VENV)/resolved.txt: moving to it is `make lock`, then the README's tested versions.
LATEST_VENV ?= .venv-latest
CORE_TESTS  ?= tests/exporter tests/verification tests/diagnostics tests/rules
test-latest:
	rm -rf $(LATEST_VENV) && $(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q torch
	$(LATEST_VENV)/bin/python -m pip install -q -e ".[$(EXTRAS)]"
	$(LATEST_VENV)/bin/python requirements/lock.py --extras $(EXTRAS) --out $(LATEST_VENV)/resolved.txt
	@grep -E '^(torch|onnx|onnxruntime|transformers|numpy)==' $(LATEST_VENV)/resolved.txt
	$(LATEST_VENV)/bin/python -m pytest -q -n $(JOBS) -m "not slow" $(CORE_TESTS)

# The oldest versions pyproject.toml allows (each `>=X` installed at X), in a venv of their own, on the core suites.
OLDEST_VENV ?= .venv-oldest
test-oldest:
	rm -rf $(OLDEST_VENV) && $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q packaging
	$(OLDEST_VENV)/bin/python requirements/lock.py --extras $(EXTRAS) --floors > $(OLDEST_VENV)/floors.txt
	$(OLDEST_VENV)/bin/python -m pip install -q -c $(OLDEST_VENV)/floors.txt -e ".[$(EXTRAS)]"
	$(OLDEST_VENV)/bin/python requirements/lock.py --extras $(EXTRAS) --out $(OLDEST_VENV)/resolved.txt
	$(OLDEST_VENV)/bin/python -m pytest -q -n $(JOBS) -m "not slow" $(CORE_TESTS)

# Move the lock: resolve the newest releases (TORCH=torch for the newest torch too) in a fresh venv and pin
# what it installed. Then `make test`, and the README's tested versions (docs/environments.md).
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q "$(TORCH)"
	.venv-lock/bin/python -m pip install -q -e ".[$(EXTRAS)]"
	.venv-lock/bin/python requirements/lock.py --extras $(EXTRAS) --out $(LOCK)
	rm -rf .venv-lock

demo: setup
	$(PY) -m onnxsight.demo --out demo-out

test: setup browser-deps
	$(PY) -m pytest -q -n $(JOBS) -m "not slow" tests

# Every OpInfo op (up to 3 float32 samples each): the coverage number in README.md, per-op detail
# in docs/op-coverage.json. `make test` runs the curated per-family lists in tests/exporter/ops.
test-ops: setup
	$(PY) -m tests.exporter.ops.coverage --out docs/op-coverage.json --limit 3

# OpInfo parity: every op exported by onnxsight and by torch.onnx (dynamo=True, opset 18) on the same
# samples, run in the same ONNX Runtime session and compared at torch.testing's tolerances, at float32,
# float16, bfloat16 and int64: docs/op-parity.json and docs/op-parity.md (README.md quotes them).
# About an hour per dtype on a busy 2-core machine; PARITY_DTYPES=float32 for the first figure only.
PARITY_DTYPES ?= float32,float16,bfloat16,int64
.PHONY: test-ops-parity
test-ops-parity: setup
	nice -n 10 $(PY) -m tests.exporter.ops.coverage --exporter both --dtypes $(PARITY_DTYPES) --limit 3 \
	  --jobs $(JOBS) --out docs/op-parity.json --markdown docs/op-parity.md

# The verifier measures itself: faults injected into every dev-zoo model (smoke, tricky, transformers),
# detection and clean rates per mode in docs/mutation.json (README.md quotes them).
test-mutation: setup
	$(PY) -m tests.verification.mutation --out docs/mutation.json --per-kind 8

# The whole development zoo.
test-zoo: setup
	$(PY) -m pytest -q -n $(JOBS) -m slow tests/zoo tests/exporter

# The generation suite: every generative model (LLaMA with and without grouped-query attention, Qwen2, Mistral and
# Gemma2 with sliding windows, Phi-3, OPT, GPT-NeoX, Bloom, GPT-2, BART, mBART, Marian, Pegasus, T5, Whisper)
# exported as its step programs and verified for 16 steps of greedy decoding; the set-ups of
# tests/verification/test_generation_models.py (Falcon, no mask, past the positions, ...).
test-generation: setup
	$(PY) -m pytest -q -n 0 -m slow tests/zoo/test_generation_suite.py tests/verification/test_generation_encdec.py \
	  tests/verification/test_generation_models.py tests/verification/test_generation.py tests/test_cli_generation.py

# Every dev-zoo model (smoke, tricky, transformers) at each opset 17..25, in ONNX Runtime vs eager.
test-zoo-opsets: setup
	$(PY) -m pytest -q -n $(JOBS) -m slow tests/zoo/test_opsets.py

# The torchvision and timm suites, in a venv of their own (.venv-vision) that reads this one's packages
# (a .pth) and adds torchvision and timm. PyPI's torchvision wheel is built against CUDA torch and does
# not import on the CPU torch used here: where it does not import, ../shared/torchvision-cpu (a development
# shim beside the checkout, never a dependency of onnxsight) makes it; without the shim this says so and
# skips. Then tests/vision and the zoo job over both suites (every model verified per node; its table in
# $(VISION_OUT)/summary.md).
VISION_VENV ?= .venv-vision
VPY         := $(VISION_VENV)/bin/python
VISION_SHIM ?= ../shared/torchvision-cpu
VISION_OUT  ?= artifacts/zoo-vision
VISION_OK   := $(VPY) -c 'import torchvision, torchvision.ops, timm' >/dev/null 2>&1
vision-venv: setup
	@test -x $(VPY) || $(PY) -m venv $(VISION_VENV)
	@main=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	vis=$$($(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	echo "import site; site.addsitedir('$$main')" > "$$vis/zz-main-venv.pth"
	@if ! $(VPY) -c 'import torchvision, torchvision.ops' >/dev/null 2>&1; then \
	  if [ -f $(VISION_SHIM)/install.sh ]; then bash $(VISION_SHIM)/install.sh $(VPY); \
	  else echo "vision: torchvision does not import on this torch (PyPI's wheel is built for CUDA)" \
	    "and the shim $(VISION_SHIM) is not beside this checkout"; fi; fi
	@if $(VPY) -c 'import torchvision, torchvision.ops' >/dev/null 2>&1; then \
	  $(VPY) -c 'import timm' >/dev/null 2>&1 || $(VPY) -m pip install -q --no-deps timm; fi

test-vision: vision-venv
	@if $(VISION_OK); then \
	  nice -n 10 $(VPY) -m pytest -q -n 0 tests/vision && \
	  nice -n 10 $(VPY) -m onnxsight.zoo run --suite torchvision,timm --out $(VISION_OUT) --jobs $(JOBS) \
	    --per-node --timeout 1800 --fail-on never; \
	else echo "test-vision: skipped: torchvision or timm does not import in $(VISION_VENV)"; fi

# Every model of every zoo suite (transformers, tricky, torchvision, timm) exported by onnxsight and by
# torch.onnx, static and dynamic, against eager at two sizes, one process per model: the README's zoo
# tables (docs/zoo-compare.md, raw results in docs/zoo-compare.json). Hours on a 2-core machine;
# FILTER=hf_bert,tv_resnet18 for some models. Without torchvision the vision suites are listed as skipped.
FILTER ?=
bench-zoo: vision-venv
	@if $(VISION_OK); then py=$(VPY); else py=$(PY); fi; \
	$$py bench/zoo_compare.py $(if $(FILTER),--filter $(FILTER)) --raw docs/zoo-compare.json --out docs/zoo-compare.md

# The zoo job on a local Ray (installs the optional `ray` extra first).
test-ray: setup
	$(PIP) install -q -e ".[ray]"
	$(PY) -m pytest -q -n 0 -m slow tests/zoo/test_ray.py

test-all: setup browser-deps
	$(PY) -m pytest -q -n $(JOBS) tests

bench: setup
	$(PY) bench/export.py
	$(PY) bench/verify.py

# Export time against its floor, torch.export.export alone: onnxsight (per stage, optimize on and off) and torch.onnx
# (optimize on and off) on a 16-block CNN, an 8-block transformer, a 4-layer LLaMA, a ResNet-50-shaped CNN and Hiera
# (batch-1 example, dynamic batch: the capture-strategy case), interleaved per model (docs/performance.md); then
# the optimize stage's scaling: the CNN at 16 and 64 blocks.
.PHONY: bench-export-floor
bench-export-floor: setup
	$(PY) bench/export_floor.py --runs 7 --json docs/export-floor.json --md docs/export-floor.md
	$(PY) bench/export_floor.py --runs 7 --models cnn16,cnn64 --sides torch.export,onnxsight \
	  --json docs/export-floor-scaling.json

# Quantized models: export time next to torch.onnx, ONNX Runtime latency of the int8 model against its float
# model (bench/quantized.py; docs/quantization.md quotes it).
.PHONY: bench-quant
bench-quant: setup
	$(PY) bench/quantized.py

# 4-bit weights: file size of int4 weight-only models (INT4 at opset 21 vs int8 before) and ONNX Runtime latency
# of the MatMulNBits they fuse into (bench/int4_weights.py; docs/quantization.md quotes it).
.PHONY: bench-int4
bench-int4: setup
	$(PY) bench/int4_weights.py

# ONNX Runtime latency of LSTM/GRU: onnxsight's ONNX LSTM/GRU vs the unrolled form vs torch.onnx.
bench-rnn: setup
	$(PY) bench/rnn.py

# PyTorch's recurrent export matrix (192 test_rnn_* cases) with onnxsight and torch.onnx, packed sequences
# included: docs/rnn-matrix.json (docs/recurrent.md quotes it). The onnxsight half runs in `make test-zoo` (slow).
.PHONY: test-rnn-matrix
test-rnn-matrix: setup
	$(PY) -m tests.exporter.rnn_matrix --out docs/rnn-matrix.json

# PyTorch's own ONNX export tests (test/onnx/test_pytorch_onnx_onnxruntime.py's tracing class at opset 20,
# exporter/test_small_models_e2e.py, exporter/test_api.py) run with onnxsight and with torch.onnx (dynamo=True)
# the same way: docs/upstream-matrix.json (docs/migration.md quotes it). Upstream's files are read from a PyTorch
# checkout beside this one, never committed: make upstream-matrix PYTORCH=../upstream-torch. Skips without it.
# About an hour on a busy 2-core machine; SLICE=1/4 runs a quarter (with --append) at a time.
PYTORCH ?=
SLICE   ?= 1/1
.PHONY: upstream-matrix
upstream-matrix: vision-venv
	nice -n 10 $(VPY) -m tests.exporter.upstream_matrix --pytorch "$(PYTORCH)" --slice $(SLICE) --append \
		--out docs/upstream-matrix.json

# How long the command line takes to start (whole processes; `import onnxsight` must not load torch).
bench-startup: setup
	$(PY) bench/startup.py

# A model with 2.3 GB of weights: export and save with external data, then per-node verification of the
# program and of the saved file (peak RSS against the weights, time against one ONNX Runtime run), after
# the `large` tests (verification above 2 GB). Needs ~8 GB of memory.
bench-large: setup
	$(PY) -m pytest -q -n 0 -m large tests
	$(PY) bench/large_model.py

# A LLaMA-shaped 7B model (27 GB of float32 weights) built and exported in fake mode, against torch.onnx:
# peak RSS and time per export in fresh processes. LAYERS=4 scales it down; RUNS rounds after a warm-up.
LAYERS ?= 32
RUNS   ?= 3
bench-fake: setup
	nice -n 10 $(PY) bench/fake_export.py --layers $(LAYERS) --runs $(RUNS)

# ORT's transformer optimizer and onnxscript's rewriter, at their defaults, on onnxsight's and torch.onnx's graphs
# (fused ops, node counts: docs/ort-fusion.md, docs/ort-fusion-dynamic.md), then ORT CPU latency of both, as
# exported and after each fuser, batch 1 and 8, interleaved (docs/ort-latency.md; guide: docs/optimization.md).
# Every model of bench/ort_fusion.py, static and dynamic, fused by ORT's optimizer and by onnxscript's rewriter at their
# defaults: the fusions docs/ort-fusion*.md report, loaded in ONNX Runtime and verified against PyTorch (about 2 min).
test-ort-fusion: setup
	$(PY) -m pytest -q -n 0 -m slow tests/verification/test_fused_bench_models.py

bench-ort: setup
	$(PY) bench/ort_fusion.py --json docs/ort-fusion.json --md docs/ort-fusion.md
	$(PY) bench/ort_fusion.py --dynamic --json docs/ort-fusion-dynamic.json --md docs/ort-fusion-dynamic.md
	$(PY) bench/ort_latency.py --decode llama-cache,gpt2-cache --md docs/ort-latency.md --json docs/ort-latency.json

# Per-token latency of a greedy generation loop: eager PyTorch, onnxsight's step programs and torch.onnx's in
# ONNX Runtime (docs/generation.md quotes docs/generation-latency.md).
bench-generation: setup
	$(PY) bench/generation.py --md docs/generation-latency.md --json docs/generation-latency.json

# The same on a GPU: eager PyTorch on CUDA, the loops on ONNX Runtime's CUDA execution provider (skips where none).
.PHONY: bench-generation-cuda
bench-generation-cuda: setup
	@if $(PY) -c "import onnxruntime as o, torch, sys; sys.exit(not torch.cuda.is_available() or 'CUDAExecutionProvider' not in o.get_available_providers())"; then \
	  $(PY) bench/generation.py --device cuda --md docs/generation-latency-cuda.md --json docs/generation-latency-cuda.json; \
	else echo "bench-generation-cuda: skipped: no CUDA torch with onnxruntime's CUDAExecutionProvider here"; fi

# The same latency benchmark on ONNX Runtime's CUDA execution provider (onnxruntime-gpu on a machine with a
# GPU; skips with the reason where there is none), float32 and, after the optimizer, float16 too.
# Where the GPU machine lacks this project's torch: `bench/ort_latency.py --save DIR` here, then
# `bench/ort_latency.py --load DIR --device cuda --float16` there (docs/optimization.md, "Latency").
.PHONY: bench-ort-cuda
bench-ort-cuda: setup
	@if $(PY) -c "import onnxruntime as o, sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())"; then \
	  $(PY) bench/ort_latency.py --device cuda --float16 --long-iters 10 --md docs/ort-latency-cuda.md --json docs/ort-latency-cuda.json && \
	  $(PY) bench/ort_latency.py --device cuda --float16 --models "" --long "" --decode llama-cache,gpt2-cache --runs 7 --iters 50 \
	    --md docs/ort-latency-cuda-decode.md --json docs/ort-latency-cuda-decode.json; \
	else echo "bench-ort-cuda: skipped: this onnxruntime has no CUDAExecutionProvider (onnxruntime-gpu and a GPU needed)"; fi

# What torch's fully-masked-row guard costs on a whole model: the small BERT with an attention_mask at sequence
# 128 and 512, batch 1 and 8, exported with optimize=False (the guard's row maximum a TopK), with ReduceMax, and
# without the guard; ORT CPU latency interleaved, and the guard's share of ORT's kernel time (docs/mask-guard.json).
bench-mask-guard: setup
	$(PY) bench/mask_guard.py --runs 7 --seconds 2 --json docs/mask-guard.json

# Per-op ORT CPU kernel times (ORT's profiler) of GPT-2 as exported, after ORT's transformer optimizer, and after
# it without its SkipLayerNormalization fusion, batch 8 and 1 (docs/ort-profile-gpt2-batch*.json).
bench-ort-profile: setup
	$(PY) bench/ort_profile.py --batch 8 --rounds 7 --json docs/ort-profile-gpt2-batch8.json
	$(PY) bench/ort_profile.py --batch 1 --rounds 7 --json docs/ort-profile-gpt2-batch1.json

# ORT CPU latency of opset-23 BERT/LLaMA/grouped-query-LLaMA graphs with the standard's Attention/RMSNormalization
# and without (decomposed), as exported and after ORT's transformer optimizer, interleaved; grouped-query LLaMA also
# with enable_gqa and against torch.onnx at opsets 23 and 18, and at sequence 512 (docs/optimization.md, "Opset 23").
.PHONY: bench-opset23
bench-opset23: setup
	$(PY) bench/opset23.py --runs 7 --json docs/opset23-latency.json
	$(PY) bench/opset23.py --models llama-gqa --seqs 512 --runs 7 --iters 5 --json docs/opset23-gqa-512.json
	$(PY) bench/opset23.py --decode 512 --runs 7 --json docs/opset23-decode.json

# Validate every SARIF file the tests write (tests/sarif_check.py keeps them in $(SARIF_DIR))
# with Microsoft's SARIF Multitool and GitHub's ingestion rules; fails on any error.
SARIF_DIR ?= artifacts/sarif
# A development tool: the script lives in ../shared beside the checkout; without it this says so and
# does nothing (the tests validate every SARIF against the vendored schema, tests/data, either way).
SARIF_VALIDATE ?= ../shared/sarif/validate_sarif.sh
sarif-validate: setup
	@test -x $(SARIF_VALIDATE) || { echo "sarif-validate: skipped: $(SARIF_VALIDATE) (the SARIF Multitool script) is not beside this checkout"; exit 0; }; \
	rm -rf $(SARIF_DIR) && \
	ONNXSIGHT_SARIF_DIR=$(abspath $(SARIF_DIR)) $(PY) -m pytest -q -n $(JOBS) tests/reports/test_sarif.py tests/rules && \
	$(SARIF_VALIDATE) --ghas $(SARIF_DIR)/*.sarif

# The documentation site (mkdocs.yml, pages in docs/, README.md as its front page): the rule pages
# regenerated, then `mkdocs build --strict` into site/ (a broken link or anchor, a page missing from
# the nav, an API name that no longer exists fail). Offline: no fonts, scripts or data fetched.
docs: setup
	$(PY) -m onnxsight.rules.docs docs/rules
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# Headless chromium for the browser tests (tests/reports/test_browser.py, tests/zoo/test_dashboard_browser.py,
# tests/test_docs_site.py): a chromium on PATH as it is, else playwright's (pip; the dev extra) downloaded into
# ~/.cache/ms-playwright, no root needed. Never fails: without network it says so and the browser tests skip with
# the same command.
browser-deps: setup
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  $(PY) -m playwright install chromium >/dev/null 2>&1 || \
	  echo "browser-deps: '$(PY) -m playwright install chromium' could not download chromium; the browser tests will be skipped"

# The README's screenshot of the HTML report (docs/img/report.png), taken by the browser test.
screenshot: setup browser-deps
	ONNXSIGHT_SCREENSHOT=docs/img/report.png $(PY) -m pytest -q -n 0 tests/reports/test_browser.py -k screenshot

clean:
	rm -rf $(VENV) $(LATEST_VENV) $(OLDEST_VENV) .venv-lock demo-out artifacts .pytest_cache
