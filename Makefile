# Smolder -- thin wrapper over CMake (DESIGN §8): deps, build, run, test.
#
#   make run     install Debian dependencies, build, run on :4040 (data in ./data)
#   make test    install dependencies, build, run every test, then again
#                under AddressSanitizer + UBSan
#
# Dependencies are Debian 12 packages only (DESIGN §9).  `make deps` skips
# apt-get when everything is already installed.

DEBIAN_PACKAGES := build-essential cmake pkg-config \
	protobuf-c-compiler libprotobuf-c-dev libnng-dev librocksdb-dev \
	libzstd-dev libmicrohttpd-dev liburcu-dev libdeflate-dev libpcre2-dev \
	libxxhash-dev libjansson-dev libyaml-dev \
	golang-go python3 curl

SUDO := $(shell if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then echo sudo; fi)
JOBS ?= 2
BUILD ?= build
BUILD_ASAN ?= build-asan
HTTP_ADDR ?= :4040
DATA_DIR ?= ./data

.PHONY: deps build build-asan run test test-plain test-asan bench clean

deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD) -j$(JOBS)

build-asan: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSM_SANITIZE=ON
	cmake --build $(BUILD_ASAN) -j$(JOBS)

run: build
	./$(BUILD)/smolder -target=all -http.listen-address=$(HTTP_ADDR) -data.dir=$(DATA_DIR)

test-plain: build
	cd $(BUILD) && ctest --output-on-failure

test-asan: build-asan
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure

test: test-plain test-asan

# make bench: run bench/run (B1..B5 next to their same-run baselines; one
# table, JSON in bench/results/latest.json).  Full sizes take hours (see
# bench/README.md); BENCH_FLAGS=--quick runs the CI smoke sizes (< 5 min).
BENCH_FLAGS ?=
bench: build
	./bench/run --build $(BUILD) $(BENCH_FLAGS)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
