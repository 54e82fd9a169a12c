#!/bin/sh
# run.sh -- run every libFuzzer target of a -DSM_FUZZ=ON build dir.
#
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]        timed run (make test-fuzz)
#   tests/fuzz/run.sh BUILD_DIR --runs N         N executions per target
#
# Each target starts from a scratch copy of tests/fuzz/seeds/<t> plus
# tests/fuzz/regressions/<t> (the repository's corpus is never written),
# with -rss_limit_mb=2048 -timeout=10 -malloc_limit_mb=1024 and leak
# detection on.  A crash, leak, timeout or out-of-memory fails the run: the
# input is saved to BUILD_DIR/fuzz-artifacts/<t>/ and shown in hex, and the
# line to replay it is printed.  Copy it to tests/fuzz/regressions/<t>/
# once the product is fixed.  Prints each target's execution count and a
# closing "N passed, N failed" line.
set -u
build=${1:?usage: run.sh BUILD_DIR [SECONDS | --runs N]}
secs=${2:-12}
runs=""
if [ "$secs" = "--runs" ]; then
	runs=${3:?--runs needs a count}
fi
here=$(cd "$(dirname "$0")" && pwd)
targets=${FUZZ_TARGETS:-$(cd "$build" && ls fuzz_* 2>/dev/null | grep -v '\.' )}
[ -n "$targets" ] || { echo "run.sh: no fuzz_* binaries in $build"; exit 1; }
passed=0
failed=0
for bin in $targets; do
	t=${bin#fuzz_}
	work=$(mktemp -d /tmp/sm-fuzz-corpus.XXXXXX)
	art="$build/fuzz-artifacts/$t"
	mkdir -p "$art"
	cp "$here/seeds/$t"/* "$work/" 2>/dev/null
	cp "$here/regressions/$t"/* "$work/" 2>/dev/null
	if [ -n "$runs" ]; then
		limit="-runs=$runs"
	else
		limit="-max_total_time=$secs"
	fi
	log="$build/fuzz-artifacts/$t.log"
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	"$build/$bin" $limit -rss_limit_mb=2048 -malloc_limit_mb=1024 \
	    -timeout=10 -print_final_stats=1 -artifact_prefix="$art/" \
	    "$work" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		echo "fuzz $t: ok, ${execs:-?} executions"
	else
		failed=$((failed + 1))
		echo "fuzz $t: FAILED (exit $rc), ${execs:-?} executions; log $log"
		grep -E "ERROR|SUMMARY|FUZZ_CHECK|^ +#[0-9]+ " "$log" | head -30
		for f in "$art"/*; do
			[ -f "$f" ] || continue
			echo "  input $f:"
			od -A x -t x1z "$f" | head -16
			echo "  replay: $build/$bin $f"
		done
	fi
	rm -rf "$work"
done
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
