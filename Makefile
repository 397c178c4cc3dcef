# Set-up is two commands: `make demo` and `make test`. Each installs what is
# missing: a project-local Python virtual environment with the pinned
# OpenVINO wheel (its C library and headers are what ov/ uses), Go modules,
# and the binaries.

OPENVINO_VERSION := 2026.3.0
NUMPY_VERSION    := 2.4.6
STATICCHECK      := honnef.co/go/tools/cmd/staticcheck@v0.8.2
PYTHON           ?= python3
VENV             := .venv
OV_STAMP         := $(VENV)/.openvino-$(OPENVINO_VERSION)
CACHE            := .cache
JAEGER           := $(CACHE)/bin/jaeger
DEMO_MODEL       := $(CACHE)/models/small-seed1
FUZZTIME         ?= 5s

export CGO_ENABLED := 1
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec

.PHONY: all setup build demo test lint unit fuzz bench clean jaeger
.PHONY: profilers

all: build

setup: $(OV_STAMP)

$(OV_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check openvino==$(OPENVINO_VERSION) numpy==$(NUMPY_VERSION)
	ln -sfn $$(cd $(VENV) && ls -d lib/python3*/site-packages/openvino) $(VENV)/openvino
	test -e $(VENV)/openvino/include/openvino/c/openvino.h
	touch $@

build: setup
	go build -o bin/ovrun ./cmd/ovrun
	go build -o bin/ovtrace ./cmd/ovtrace

$(DEMO_MODEL)/config.json: | build
	bin/ovrun synth --preset small --seed 1 --out $(DEMO_MODEL)

demo: build $(DEMO_MODEL)/config.json
	bin/ovrun run --model $(DEMO_MODEL) --ladder 256,512,1024,2048 --policy grow-one-ahead \
		--prompt-tokens 64 --decode-tokens 1984 --json $(CACHE)/demo-run.json

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

unit: build $(JAEGER)
	@mkdir -p $(CACHE)
	@$(MAKE) --no-print-directory profilers || echo "profilers: could not install perf/valgrind; the profiler tests will skip"
	OVRUN_JAEGER=$(abspath $(JAEGER)) go test -count=1 ./... 2>&1 | tee $(CACHE)/test.log; status=$${PIPESTATUS[0]}; \
	echo "== Go test summary =="; grep -E '^(ok|FAIL|--- FAIL|panic)' $(CACHE)/test.log || true; exit $$status

# Every fuzz target, PACKAGE:TARGET, each run for $(FUZZTIME) (about two
# minutes in all with the builds): the readers of every file a user can hand
# the binaries, and the parsers of what they run.
FUZZ_TARGETS := \
	./model:FuzzParseSafetensorsHeader ./model:FuzzOpenSafetensors \
	./model:FuzzLoadConfig ./model:FuzzReadIndex \
	./tracing:FuzzReadTrace ./compilecost:FuzzLoad \
	./internal/abtest:FuzzParseVariants \
	./internal/profiling:FuzzParsePerfScript ./internal/profiling:FuzzParseCallgrind \
	./internal/profiling:FuzzReadFile ./internal/npy:FuzzParse

fuzz: setup
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		go test -run='^$$' -fuzz="^$${t#*:}\$$" -fuzztime=$(FUZZTIME) $${t%%:*} || exit 1; \
	done

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
