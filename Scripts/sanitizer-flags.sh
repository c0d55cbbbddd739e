# Sourced by the scripts that build this package (test.sh, sanitizers.sh, stress-segments.sh, chaos.sh, soak.sh,
# bench.sh, scale-cli.sh, package-deb.sh, test-fleet.sh): the one definition of each build, so that both scripts build (and find) the same products in the same scratch directory instead of
# rebuilding each other's with different flags.
#
# ASan + UBSan: swiftc has no -sanitize=undefined on Linux (Swift code traps on overflow and bad unwraps by
# itself); the C targets (the OpenSSL and syscall shims, SQLite wrappers of dependencies) get UBSan in trap
# mode, which needs no runtime library: undefined behaviour stops the test process.
#
# Tried and dropped: -Xswiftc -gline-tables-only (reports keep function, file and line). Without sanitizers
# it took about 15 % off a scratch build (`--target DownloadKitDaemon`, 2 alternating pairs: 119 and 101
# user-s with full debug information, 102 and 83 with line tables), but in CI both sanitizer builds took
# longer with it (a fresh clone: TSan 426 s, ASan 440 s; earlier fresh clones without it: 377 and 397).
# shellcheck disable=SC2034  # used by the scripts that source this file
# The executables, the daemon, the RPC server and the tests need the package trait `Tools` (Package.swift: without
# it a consumer of the library resolves none of their packages; docs/PACKAGES.md). Every build here passes it,
# `swift test --skip-build` too (a different trait set is a different build plan).
tools_flags=(--traits Tools)
# shellcheck disable=SC2034
asan_flags=(--sanitize=address -Xcc -fsanitize=undefined -Xcc -fsanitize-trap=undefined --scratch-path .build-asan)
# shellcheck disable=SC2034
asan_build_flags=("${tools_flags[@]}" "${asan_flags[@]}")
# shellcheck disable=SC2034
tsan_build_flags=("${tools_flags[@]}" --sanitize=thread --scratch-path .build-tsan)
