#!/usr/bin/env bash
# Fuzzes the HTTPWire header grammars with libFuzzer + AddressSanitizer for a bounded time.
#
#   Scripts/fuzz.sh [seconds]     (default 30)
#
# Seeds: Fuzz/corpus/grammars/ (committed; the first byte of each file picks the grammar, see
# Fuzz/FuzzGrammars.swift). New inputs go to Fuzz/corpus-work/grammars/ and crashing inputs to
# Fuzz/corpus-work/ (both gitignored). Reproduce a crash with: Fuzz/bin/fuzz-grammars <file>
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-30}"
case "$seconds" in
    '' | *[!0-9]*) echo "usage: $0 [seconds]" >&2; exit 2 ;;
esac

mkdir -p Fuzz/bin Fuzz/corpus-work/grammars
swiftc -sanitize=fuzzer,address -parse-as-library -O \
    Sources/HTTPWire/*.swift Fuzz/FuzzGrammars.swift -o Fuzz/bin/fuzz-grammars

Fuzz/bin/fuzz-grammars \
    -max_total_time="$seconds" \
    -max_len=512 \
    -print_final_stats=1 \
    -artifact_prefix=Fuzz/corpus-work/ \
    Fuzz/corpus-work/grammars Fuzz/corpus/grammars
