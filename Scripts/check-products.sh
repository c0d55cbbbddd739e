#!/usr/bin/env bash
# The shipped executables must not contain the test harness (issue #12, product graph): no symbol of the
# TestOrigin module (fault origin, nginx launcher, process runner) in `downloadkit` or `downloadkitd`. And
# they carry one TLS stack, OpenSSL (issue #45): no BoringSSL symbol (CCryptoBoringSSL, CNIOBoringSSL; the
# PostgreSQL fleet that brought them is Fleet/'s `downloadkit-fleet`) and no swift-nio-ssl.
# Usage: bash Scripts/check-products.sh [BIN_DIR]   (default: the debug bin path; pass .build/release
# after `swift build -c release` — the dependency graph, and so the answer, is the same for both).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-$(swift build --show-bin-path)}"
status=0
for tool in downloadkit downloadkitd; do
    if [ ! -x "$bin/$tool" ]; then
        echo "check-products: $bin/$tool is missing (build first)" >&2
        exit 2
    fi
    # Swift mangles module names as <length><name>: TestOrigin symbols contain "10TestOrigin".
    count=$(nm "$bin/$tool" | grep -c '10TestOrigin' || true)
    if [ "$count" != 0 ]; then
        echo "check-products: $tool contains $count TestOrigin symbols (the test harness must not ship)" >&2
        status=1
    else
        echo "check-products: $tool has no TestOrigin symbols"
    fi
    tls=$(nm "$bin/$tool" | grep -c -E 'BoringSSL|NIOSSL' || true)
    if [ "$tls" != 0 ]; then
        echo "check-products: $tool contains $tls BoringSSL or NIOSSL symbols (one TLS stack: OpenSSL)" >&2
        status=1
    else
        echo "check-products: $tool has no BoringSSL or NIOSSL symbols"
    fi
done
exit $status
