#!/usr/bin/env bash
# Runs the segmented and pause/resume suites RUNS times under CPU contention (issue #22): the tests
# and two busy loops share CPU 0 (taskset), the way a loaded 2-core machine starves the segment
# workers. Prints every run's result and, at the end, the runs and the failures; exits 1 on any failure.
#
#   bash Scripts/stress-segments.sh [RUNS] [--asan] [--skip-build] [--filter REGEX]
#
# RUNS defaults to 20. --asan uses the AddressSanitizer build (Scripts/sanitizer-flags.sh), which widens race windows.
# --skip-build runs the tests as they are built: Scripts/test.sh built them in its first step and changed nothing
# since, and a `swift build` that follows a `swift test` recompiles every dependency's manifest and
# swift-argument-parser's plugins first (111 s on an idle machine, about 260 s in CI beside the .deb's build).
# Scripts/test.sh runs a short version (3 runs, debug build, segmented suites only).
set -uo pipefail
cd "$(dirname "$0")/.."

runs=20
asan=0
skip_build=0
filter='SegmentedTests|SegmentDefectTests|SegmentKillTests|Pause|Resume'
while [ $# -gt 0 ]; do
    case "$1" in
        --asan) asan=1 ;;
        --skip-build) skip_build=1 ;;
        --filter) filter="$2"; shift ;;
        *) runs="$1" ;;
    esac
    shift
done

command -v taskset > /dev/null || { echo "stress-segments: taskset (util-linux) is required" >&2; exit 2; }
source Scripts/sanitizer-flags.sh  # the same builds as Scripts/test.sh and Scripts/sanitizers.sh, not rebuilds of them
if [ "$asan" = 1 ]; then
    build=(env "${asan_env[@]}" swift build --build-tests "${tools_flags[@]}")
    test=(env "${asan_env[@]}" swift test --skip-build "${tools_flags[@]}")
    # verify_asan_link_order=0: Scripts/watchdog.sh's stdbuf preloads libstdbuf ahead of ASan's runtime.
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:verify_asan_link_order=0"
else
    build=(swift build --build-tests "${tools_flags[@]}")
    test=(swift test --skip-build "${tools_flags[@]}")
fi
[ "$skip_build" = 1 ] || "${build[@]}" > /dev/null || { echo "stress-segments: build failed" >&2; exit 2; }

hogs=()
stop_hogs() {
    for pid in "${hogs[@]}"; do kill "$pid" 2> /dev/null; done
    for pid in "${hogs[@]}"; do wait "$pid" 2> /dev/null; done
}
trap stop_hogs EXIT
for _ in 1 2; do
    taskset -c 0 bash -c 'while :; do :; done' &
    hogs+=($!)
done

# A run passes when swift test exits 0 — or, under ASan, when every test passed and ASan found no
# memory error: LeakSanitizer's reports at process exit (XCTest's own harness leaks 144 bytes, so swift
# test exits 1 under detect_leaks=1 whatever the tests do) are counted and shown, not failed on.
passed() {
    local log=$1 status=$2
    if [ "$asan" = 1 ]; then
        grep -q "^✔ Test run with" "$log" && ! grep -q "ERROR: AddressSanitizer" "$log"
    else
        [ "$status" = 0 ]
    fi
}

logs=$(mktemp -d)
failures=0
leaks=0
for run in $(seq 1 "$runs"); do
    start=$(date +%s)
    : >"$logs/run-$run.log"
    taskset -c 0 bash Scripts/watchdog.sh "${STRESS_RUN_SECONDS:-900}" "$logs/run-$run.log" -- "${test[@]}" --filter "$filter" 2>/dev/null
    status=$?
    if [ "$asan" = 1 ] && grep -q "ERROR: LeakSanitizer" "$logs/run-$run.log"; then
        leaks=$((leaks + 1))
        echo "run $run/$runs: LeakSanitizer reports: $(grep -c 'ERROR: LeakSanitizer' "$logs/run-$run.log") (log: $logs/run-$run.log)"
    fi
    if passed "$logs/run-$run.log" "$status"; then
        echo "run $run/$runs: passed ($(( $(date +%s) - start )) s)"
        [ "$asan" = 1 ] && grep -q "ERROR: LeakSanitizer" "$logs/run-$run.log" || rm -f "$logs/run-$run.log"
    else
        failures=$((failures + 1))
        echo "run $run/$runs: FAILED ($(( $(date +%s) - start )) s), log: $logs/run-$run.log"
        grep -E "✘|error:|watchdog:" "$logs/run-$run.log" | grep -v "↳" | head -10
    fi
done
mode=debug
[ "$asan" = 1 ] && mode="ASan (detect_leaks=1; $leaks runs with leak reports)"
echo "stress-segments: $runs runs, $failures failures — $mode build, filter '$filter', pinned to CPU 0 with 2 busy loops"
[ "$failures" = 0 ] && rmdir "$logs" 2> /dev/null
[ "$failures" = 0 ]
