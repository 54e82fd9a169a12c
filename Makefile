# Smolder -- thin wrapper over CMake (docs/architecture.md §8): deps, build, run, test.
#
#   make run     install Debian dependencies, build, run on :4040 (data in ./data)
#   make test    install dependencies, build, run every test, then again
#                under AddressSanitizer + UBSan, then a short timed run of
#                every fuzz target (test-fuzz, clang + libFuzzer); prints
#                each tier's time and every skip at the end
#   make check   unit and in-process cluster tiers only (a few minutes)
#
# Dependencies are Debian 12 packages only (docs/architecture.md §9).  `make deps` skips
# apt-get when everything is already installed.  chromium and nodejs/npm are
# for the web UI's browser test (tests/integration/test_webui.py, which runs
# `npm ci` in tests/webui); npm is installed from Debian only when no npm is
# on the PATH, since a nodejs that bundles npm conflicts with Debian's npm.
# iptables is for the network-partition tests (tests/integration/netpart.py);
# graphviz's dot draws SelectMergeStacktraces' DOT answers in
# tests/integration/test_query_diff_pprof.py.

DEBIAN_PACKAGES := build-essential cmake pkg-config \
	protobuf-c-compiler libprotobuf-c-dev libnng-dev librocksdb-dev \
	libzstd-dev libmicrohttpd-dev liburcu-dev libdeflate-dev libpcre2-dev \
	libxxhash-dev libjansson-dev libyaml-dev zlib1g-dev \
	libcurl4-openssl-dev libxml2-dev libnghttp2-dev libgnutls28-dev \
	libsnappy-dev prometheus \
	swift-proxy swift-object swift-container swift-account \
	etcd-server etcd-client iptables graphviz \
	golang-go python3 python3-yaml python3-grpcio python3-protobuf curl \
	protobuf-compiler \
	chromium nodejs \
	clang libclang-rt-14-dev llvm gdb

SUDO := $(shell if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then echo sudo; fi)
JOBS ?= 2
BUILD ?= build
BUILD_ASAN ?= build-asan
BUILD_FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 7
HTTP_ADDR ?= :4040
DATA_DIR ?= ./data

.PHONY: deps build build-asan build-fuzz run test test-plain test-asan \
	test-fuzz test-reset check test-long bench clean

deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@command -v npm >/dev/null 2>&1 || { echo "installing: npm"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm; }

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD) -j$(JOBS)

build-asan: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSM_SANITIZE=ON
	cmake --build $(BUILD_ASAN) -j$(JOBS)

# libFuzzer targets of tests/fuzz (clang; ASan + UBSan + fuzzer coverage).
build-fuzz: deps
	cmake -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_C_COMPILER=clang -DSM_FUZZ=ON
	cmake --build $(BUILD_FUZZ) -j$(JOBS) --target fuzz-all

run: build
	./$(BUILD)/smolder -target=all -http.listen-address=$(HTTP_ADDR) -data.dir=$(DATA_DIR)

# Tests run tier by tier (ctest labels: unit, cluster, integration, fuzz;
# tests/tools/run_tiers.py), two at a time (JOBS): the machines have two
# cores, and every test waits on conditions, not on wall-clock budgets, so
# the suite also passes at -j1 and -j4.  Integration tests run IT_JOBS at
# a time: they mostly wait on the processes they start (four at a time
# kept two cores 70 % busy and halved the tier's time).  Each run prints
# its tiers' times and every skipped test or part; `make test` prints
# them all at the end.
IT_JOBS ?= 4
TIERS_RUN = python3 tests/tools/run_tiers.py --jobs $(JOBS) \
	--tier-jobs integration=$(IT_JOBS)
TIER_SUMMARY ?= $(BUILD)/test-summary.txt

test-plain: build
	$(TIERS_RUN) $(BUILD) --summary $(TIER_SUMMARY)

test-asan: build-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(TIERS_RUN) $(BUILD_ASAN) --summary $(TIER_SUMMARY)

# Each fuzz target for FUZZ_SECONDS (12 targets: ~2 min); fails on a
# crash, leak, timeout or OOM and prints the input (tests/fuzz/README.md).
test-fuzz: build-fuzz
	@start=$$(date +%s); ./tests/fuzz/run.sh $(BUILD_FUZZ) $(FUZZ_SECONDS); rc=$$?; \
		printf 'fuzzing (%s s per target): %d s\n' $(FUZZ_SECONDS) $$(( $$(date +%s) - start )) >> $(TIER_SUMMARY); \
		exit $$rc

test: test-reset test-plain test-asan test-fuzz
	@echo "=== make test: every tier passed"; cat $(TIER_SUMMARY)

test-reset:
	@rm -f $(TIER_SUMMARY)

# The quick loop while working: unit and in-process cluster tiers only
# (a few minutes), no sanitizers.
check: build
	python3 tests/tools/run_tiers.py $(BUILD) --jobs $(JOBS) --tiers unit,cluster

# The long tier: full-length runs that do not fit CI's budget (a
# ten-minute network partition; about 15 minutes).  Not part of `make test`.
test-long: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSM_LONG_TESTS=ON
	cmake --build $(BUILD) -j$(JOBS)
	python3 tests/tools/run_tiers.py $(BUILD) --jobs 1 --tiers long

# make bench: run bench/run (B1..B9 next to their same-run baselines; one
# table, JSON in bench/results/latest.json).  Full sizes take hours (see
# bench/README.md); BENCH_FLAGS=--quick runs the CI smoke sizes (< 5 min).
BENCH_FLAGS ?=
bench: build
	./bench/run --build $(BUILD) $(BENCH_FLAGS)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ)
