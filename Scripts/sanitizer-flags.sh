# Sourced by the scripts that build this package (test.sh, sanitizers.sh, stress-segments.sh, chaos.sh, soak.sh,
# bench.sh, scale-cli.sh, package-deb.sh, test-fleet.sh): the one definition of each build, so that the scripts
# build (and find) the same products in the same scratch directory instead of rebuilding each other's.
# shellcheck disable=SC2034  # used by the scripts that source this file
#
# The executables, the daemon, the RPC server and the tests need the package trait `Tools` (Package.swift: without
# it a consumer of the library resolves none of their packages; docs/PACKAGES.md). Every build here passes it,
# `swift test --skip-build` too (a different trait set is a different build plan). Spelled `Manager,Tools`, not
# `Tools` (which enables `Manager` too): SwiftPM passes the traits to the compiler in the order it is given them,
# explicit ones first, and Fleet/'s dependency on this package gets `-DManager -DTools`; with the same order the
# root package's modules compiled here are the very ones Fleet/'s build in the same scratch directory reuses
# (Scripts/test-fleet.sh) instead of compiling them again.
tools_flags=(--traits Manager,Tools)
#
# The sanitizer builds (Scripts/sanitizers.sh, test-fleet.sh, stress-segments.sh --asan) are the debug build of
# .build with the manifests' DOWNLOADKIT_SANITIZE set: it instruments this repository's targets (Swift, C, and the
# link of everything that links them) and leaves the packages they depend on as the debug build compiled them, so
# that each sanitizer build compiles only this repository's modules (Package.swift says why that is enough).
# ASan + UBSan: swiftc has no -sanitize=undefined on Linux (Swift code traps on overflow and bad unwraps by
# itself); the C targets (the OpenSSL and syscall shims) get UBSan in trap mode, which needs no runtime library:
# undefined behaviour stops the test process. A plain build after a sanitizer build compiles this repository's
# modules again (about three minutes here); the dependencies stay.
#
# Tried and dropped: -Xswiftc -gline-tables-only (reports keep function, file and line). Without sanitizers
# it took about 15 % off a scratch build (`--target DownloadKitDaemon`, 2 alternating pairs: 119 and 101
# user-s with full debug information, 102 and 83 with line tables), but in CI both sanitizer builds took
# longer with it (a fresh clone: TSan 426 s, ASan 440 s; earlier fresh clones without it: 377 and 397).
asan_env=(DOWNLOADKIT_SANITIZE=address)
tsan_env=(DOWNLOADKIT_SANITIZE=thread)
