# Sourced by Scripts/sanitizers.sh and Scripts/stress-segments.sh: the one definition of each sanitizer
# build, so that both scripts build (and find) the same products in the same scratch directory instead of
# rebuilding each other's with different flags.
#
# ASan + UBSan: swiftc has no -sanitize=undefined on Linux (Swift code traps on overflow and bad unwraps by
# itself); the C targets (the OpenSSL and syscall shims, SQLite wrappers of dependencies) get UBSan in trap
# mode, which needs no runtime library: undefined behaviour stops the test process.
#
# Both keep only line tables of the debug information (-gline-tables-only): a sanitizer report still names
# function, file and line (what the symbolizer reads), and the builds — every dependency compiled again
# with instrumentation — take about 15 % less CPU (`--target DownloadKitDaemon` from scratch, 2 alternating
# pairs: 119 and 101 user-s with full debug information, 102 and 83 with line tables).
# shellcheck disable=SC2034  # used by the scripts that source this file
asan_build_flags=(--sanitize=address -Xcc -fsanitize=undefined -Xcc -fsanitize-trap=undefined
    -Xswiftc -gline-tables-only --scratch-path .build-asan)
# shellcheck disable=SC2034
tsan_build_flags=(--sanitize=thread -Xswiftc -gline-tables-only --scratch-path .build-tsan)
