#!/usr/bin/env bash
# Builds and tests the package in Fleet/ (the PostgreSQL fleet, `downloadkit-fleet`, the ecosystem check;
# docs/PACKAGES.md) — once, under AddressSanitizer + UndefinedBehaviorSanitizer, with closecheck preloaded.
#
# postgres-nio, AsyncHTTPClient and swift-crypto bring SwiftNIO's TLS and BoringSSL; they are this package's
# alone, so CI compiles them in this one build instead of in each of the root package's three (debug, TSan,
# ASan). One build under ASan + UBSan runs FleetTests and EcosystemTests with every check they had in the root
# package: the tests pass, ASan and UBSan report nothing (a report fails the run even if the tests pass), and
# no descriptor is closed twice in the test process (Tests/Support/closecheck, preloaded after ASan's runtime).
#
#   bash Scripts/test-fleet.sh           (Scripts/test.sh runs it; the log is Fleet/.build-asan/fleet.log)
set -uo pipefail
cd "$(dirname "$0")/.."
source Scripts/sanitizer-flags.sh
root=$PWD
cd Fleet
mkdir -p .build-asan
log=.build-asan/fleet.log
# The fleet's scratch path is Fleet/.build-asan (asan_flags name .build-asan, relative to here). Not the root
# package's tools_flags: Fleet/Package.swift asks for the trait `Tools` on its dependency itself.
flags=("${asan_flags[@]}")
echo "== Fleet (ASan+UBSan): build"
if ! swift build --build-tests "${flags[@]}" >"$log" 2>&1; then
    tail -30 "$log"; echo "test-fleet: the build failed"; exit 1
fi
source "$root/Scripts/closecheck.sh"
closecheck_build .build-asan || exit 1
echo "== Fleet (ASan+UBSan): test"
status=0
# ASan's runtime is linked into the test bundle and must come first; closecheck follows it in LD_PRELOAD's
# order only by being preloaded, which ASan accepts with verify_asan_link_order=0.
LD_PRELOAD="$PWD/.build-asan/closecheck.so" CLOSECHECK_LOG="$PWD/.build-asan/closecheck.log" \
    CLOSECHECK_PROCESS=DownloadKitFleetPackageTests.xctest SWIFT_BACKTRACE=enable=no \
    ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:verify_asan_link_order=0:${ASAN_OPTIONS:-}" \
    UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}" \
    swift test --skip-build "${flags[@]}" >>"$log" 2>&1 || status=1
grep -E "Test run with|ERROR: AddressSanitizer|SUMMARY: AddressSanitizer|runtime error:|✘" "$log" | tail -20
if grep -q "ERROR: AddressSanitizer" "$log"; then status=1; fi
if grep -q "runtime error:" "$log"; then echo "test-fleet: UndefinedBehaviorSanitizer reports (above)"; status=1; fi
closecheck_report .build-asan || status=1
echo "test-fleet: result $status (log: Fleet/$log)"
exit "$status"
