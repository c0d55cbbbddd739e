#!/usr/bin/env bash
# Builds and tests the package in Fleet/ (the PostgreSQL fleet, `downloadkit-fleet`, the ecosystem check;
# docs/PACKAGES.md) — once, under AddressSanitizer + UndefinedBehaviorSanitizer, with closecheck preloaded.
#
# postgres-nio, AsyncHTTPClient and swift-crypto bring SwiftNIO's TLS and BoringSSL; they are this package's
# alone, so CI compiles them in this one build instead of in each of the root package's (debug, TSan, ASan).
# The build is Fleet/ in the root package's scratch directory (.build) with DOWNLOADKIT_SANITIZE=address
# (Scripts/sanitizer-flags.sh): run after Scripts/sanitizers.sh asan, as Scripts/test.sh does, it reuses the
# root package's instrumented modules and the dependencies both packages share, and compiles only what is
# Fleet/'s own (run alone, it builds what is missing). One build runs FleetTests and EcosystemTests with
# every check they had in the root package: the tests pass, ASan and UBSan report nothing (a report fails the
# run even if the tests pass), and no descriptor is closed twice in the test process
# (Tests/Support/closecheck, preloaded after ASan's runtime).
#
#   bash Scripts/test-fleet.sh           (Scripts/test.sh runs it; the log is .build/fleet.log)
set -uo pipefail
cd "$(dirname "$0")/.."
source Scripts/sanitizer-flags.sh
root=$PWD
scratch=$root/.build
mkdir -p "$scratch"
log=$scratch/fleet.log
# Not the root package's tools_flags: Fleet/Package.swift asks for the trait `Tools` on its dependency itself.
cd Fleet
flags=(--scratch-path "$scratch")
echo "== Fleet (ASan+UBSan): build"
if ! env "${asan_env[@]}" swift build --build-tests "${flags[@]}" >"$log" 2>&1; then
    tail -30 "$log"; echo "test-fleet: the build failed"; exit 1
fi
source "$root/Scripts/closecheck.sh"
closecheck_build "$scratch" || exit 1
echo "== Fleet (ASan+UBSan): test"
status=0
# ASan's runtime is linked into the test bundle and must come first; closecheck follows it in LD_PRELOAD's
# order only by being preloaded, which ASan accepts with verify_asan_link_order=0.
env "${asan_env[@]}" LD_PRELOAD="$scratch/closecheck.so" CLOSECHECK_LOG="$scratch/closecheck.log" \
    CLOSECHECK_PROCESS=DownloadKitFleetPackageTests.xctest SWIFT_BACKTRACE=enable=no \
    ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:verify_asan_link_order=0:${ASAN_OPTIONS:-}" \
    UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}" \
    bash "$root/Scripts/watchdog.sh" "${FLEET_TEST_SECONDS:-1200}" "$log" -- swift test --skip-build "${flags[@]}" 2>&1 || status=1
grep -E "Test run with|ERROR: AddressSanitizer|SUMMARY: AddressSanitizer|runtime error:|✘|watchdog:" "$log" | tail -20
if grep -q "ERROR: AddressSanitizer" "$log"; then status=1; fi
if grep -q "runtime error:" "$log"; then echo "test-fleet: UndefinedBehaviorSanitizer reports (above)"; status=1; fi
closecheck_report "$scratch" || status=1
echo "test-fleet: result $status (log: $log)"
exit "$status"
