#!/usr/bin/env bash
# Builds and runs the test suites under AddressSanitizer + UndefinedBehaviorSanitizer (one build) and
# ThreadSanitizer. Both are builds of .build with DOWNLOADKIT_SANITIZE set (Scripts/sanitizer-flags.sh): they
# instrument this repository's modules and reuse the dependencies the debug build compiled; a plain build
# afterwards compiles this repository's modules again.
#
#   Scripts/sanitizers.sh [asan|tsan|all]     (default all)
#
# UBSan covers the C targets (trap mode; swiftc has no UBSan on Linux). ASan+UBSan runs the whole
# suite, one test target at a time (CI too), except the suites matched by ASAN_SKIP (default
# MemoryBoundTests: it bounds the process's RSS, which ASan's shadow memory and quarantine inflate by
# design; it runs in the normal suite), or only those matched by ASAN_FILTER when set; any
# "ERROR: AddressSanitizer" or UBSan "runtime error:" fails the run even if the tests pass. TSan runs
# DownloadKitTests, HTTPClientTests and DaemonTests (the threaded code: the
# transfer thread, cancellation from other threads, the connection pool, the fault origin); any
# "WARNING: ThreadSanitizer: data race" fails the run even if the tests pass; its build holds only those
# three test targets (DOWNLOADKIT_TEST_TARGETS, Package.swift). Logs go to .build/sanitizers-asan.log and
# .build/sanitizers-tsan.log.
set -uo pipefail
cd "$(dirname "$0")/.."
# tools_flags, asan_env, tsan_env: the builds' one definition (shared with Scripts/stress-segments.sh, test-fleet.sh).
source Scripts/sanitizer-flags.sh

which="${1:-all}"
export SWIFT_BACKTRACE=enable=no
status=0
# Each test run under Scripts/watchdog.sh: a hang fails its run after this many seconds, saying which tests
# were still running (in the log) and with the test process's backtraces in LOG.hang.
step_seconds=${SANITIZER_TEST_SECONDS:-1200}

run_asan() {
    mkdir -p .build
    local log=.build/sanitizers-asan.log
    echo "== ASan+UBSan: build"
    if ! env "${asan_env[@]}" swift build --build-tests "${tools_flags[@]}" >"$log" 2>&1; then
        tail -30 "$log"; echo "ASan build failed"; return 1
    fi
    # Skipped: MemoryBoundTests, which bounds the process's resident memory (ASan's shadow memory and
    # quarantine inflate it by design), and DaemonAttackerTests, whose assertions are the CPU time, memory
    # and timeouts of a separate daemon process that the sanitizer's slowdown and shadow memory move (and
    # whose own reports would go to that daemon's log, not this one); both run in step 2.
    local skip="${ASAN_SKIP-MemoryBoundTests|DaemonAttackerTests}"
    local skipping=()
    [ -n "$skip" ] && skipping=(--skip "$skip")
    # One test target at a time (like TSan below), not all 500-odd tests at once: Swift Testing runs every
    # test of a run on the cooperative pool, two threads on this machine kind, and the synchronous suites
    # (HTTPClientTests, most of ConformanceTests) hold a thread for each test's whole duration. Under
    # ASan's slowdown an async test's poll or timer then waited behind them for over a minute (stop 28's
    # CI). Every target still runs; ASAN_FILTER replaces the list with one filter.
    local filters=()
    if [ -n "${ASAN_FILTER:-}" ]; then
        filters=("$ASAN_FILTER")
    else
        for dir in Tests/*Tests; do filters+=("^$(basename "$dir")\\."); done
    fi
    local result=0
    for filter in "${filters[@]}"; do
        echo "== ASan+UBSan: test $filter${skip:+ (except $skip)}"
        # verify_asan_link_order=0: the watchdog's stdbuf preloads libstdbuf ahead of ASan's runtime.
        env "${asan_env[@]}" ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:verify_asan_link_order=0:${ASAN_OPTIONS:-}" \
            UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}" \
            bash Scripts/watchdog.sh "$step_seconds" "$log" -- \
            swift test --skip-build "${tools_flags[@]}" --filter "$filter" "${skipping[@]}" 2>&1 || result=1
    done
    grep -E "Test run with|ERROR: AddressSanitizer|SUMMARY: AddressSanitizer|runtime error:|✘|watchdog:" "$log" | tail -20
    if grep -q "ERROR: AddressSanitizer" "$log"; then result=1; fi
    if grep -q "runtime error:" "$log"; then echo "UndefinedBehaviorSanitizer reports (above)"; result=1; fi
    echo "ASan result: $result (log: $log)"
    return "$result"
}

run_tsan() {
    mkdir -p .build
    local log=.build/sanitizers-tsan.log
    # The suites TSan runs, and the only test targets its build compiles.
    local suites=(DownloadKitTests HTTPClientTests DaemonTests)
    local build_env=("${tsan_env[@]}" "DOWNLOADKIT_TEST_TARGETS=${suites[*]}")
    echo "== TSan: build"
    if ! env "${build_env[@]}" swift build --build-tests "${tools_flags[@]}" >"$log" 2>&1; then
        tail -30 "$log"; echo "TSan build failed"; return 1
    fi
    local result=0
    # Skipped: DaemonAttackerTests, for the reason given under ASan above (step 2 runs it).
    local skip="${TSAN_SKIP-DaemonAttackerTests}"
    local skipping=()
    [ -n "$skip" ] && skipping=(--skip "$skip")
    for suite in "${suites[@]}"; do
        echo "== TSan: test $suite"
        env "${build_env[@]}" TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:${TSAN_OPTIONS:-}" \
            bash Scripts/watchdog.sh "$step_seconds" "$log" -- \
            swift test --skip-build "${tools_flags[@]}" --filter "$suite" "${skipping[@]}" 2>&1 || result=1
    done
    grep -E "Test run with|SUMMARY: ThreadSanitizer|✘|watchdog:" "$log" | tail -20
    if grep -q "WARNING: ThreadSanitizer" "$log"; then
        echo "ThreadSanitizer reports (first 60 lines):"
        grep -A40 -m3 "WARNING: ThreadSanitizer" "$log" | head -60
        result=1
    fi
    echo "TSan result: $result (log: $log)"
    return "$result"
}

case "$which" in
    asan) run_asan || status=1 ;;
    tsan) run_tsan || status=1 ;;
    all) run_asan || status=1; run_tsan || status=1 ;;
    *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;;
esac
exit "$status"
