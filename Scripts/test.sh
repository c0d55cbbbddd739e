#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run calls exactly this).
# Installs what the tests need (nginx, openssl CLI, libssl-dev) when missing, then runs the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Scripts/install-deps.sh
swift build --build-tests
swift test --skip-build
