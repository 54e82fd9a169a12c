#!/usr/bin/env bash
# ingest_quick.sh -- single-binary ingest throughput on ONE core next to the
# decode floor of the same files on the same core, interleaved, medians of
# N rounds (these machines are noisy: compare ratios from one run only).
#
#   bench/ingest_quick.sh [build-dir] [seconds-per-round] [rounds]
#
# The server runs pinned to CPU 0 (taskset); the load generator runs on
# CPU 1 with 4 keep-alive connections so the server core stays saturated.
# The floor (bench/decode_floor.c: libdeflate gunzip + protobuf-c
# unpack/free, one thread) runs pinned to CPU 0 too.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
secs=${2:-5}
rounds=${3:-5}
data=$here/tests/data

files=()
for f in "$data"/parca__*.pb.gz "$data"/pprof__sample.cpu "$data"/pprof__cppbench.cpu_no_samples_type; do
	# normalizer__profile has empty sample types: rejected by design
	case "$f" in *normalizer*) continue ;; esac
	[ -f "$f" ] && files+=("$f")
done
gen=$(mktemp -d)
trap 'kill $srv 2>/dev/null || true; rm -rf "$gen"' EXIT
if command -v go >/dev/null 2>&1; then
	(cd "$here/tests/tools/genprof" && GOFLAGS=-mod=mod GOPROXY=off \
	    GOCACHE="$gen/gocache" go run . -out "$gen" >/dev/null 2>&1) || true
	for f in "$gen"/*.pb.gz "$gen"/*.pprof; do [ -f "$f" ] && files+=("$f"); done
fi
echo "corpus: ${#files[@]} files, $(cat "${files[@]}" | wc -c) bytes as received"

port=$((20000 + RANDOM % 20000))
mkdir -p "$gen/data"
taskset -c 0 "$build/smolder" -http.listen-address=127.0.0.1:$port \
    -data.dir="$gen/data" -log.level=warn -validation.reject-older-than=0 \
    -validation.reject-newer-than=0 -validation.max-profile-stacktrace-samples=0 \
    -server.http-threads=2 2>"$gen/server.log" &
srv=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break; sleep 0.1; done

ing=(); flo=()
for r in $(seq "$rounds"); do
	f=$(taskset -c 0 "$build/decode_floor" -t "$secs" "${files[@]}" | sed 's/.*profiles_per_s=\([0-9.]*\).*/\1/')
	i=$(taskset -c 1 "$build/ingest_load" -c 4 -t "$secs" -a 127.0.0.1:$port "${files[@]}")
	echo "round $r: floor $f profiles/s; ingest: $i"
	flo+=("$f")
	ing+=("$(echo "$i" | sed 's/.*profiles_per_s=\([0-9.]*\).*/\1/')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mi=$(median "${ing[@]}"); mf=$(median "${flo[@]}")
echo "B1-quick ingest_profiles_per_s_one_core=$mi decode_floor_profiles_per_s=$mf ratio=$(awk -v a="$mi" -v b="$mf" 'BEGIN{printf "%.2f", a/b}')"
grep -E "level=(warn|error)" "$gen/server.log" | head -5 || true
