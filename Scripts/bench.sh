#!/usr/bin/env bash
# Runs the loopback benchmark (downloadkit-bench) in release mode.
#   Scripts/bench.sh                 # default: every scenario, 1 GiB, 3 runs per client (~7 minutes on 2 cores)
#   Scripts/bench.sh --quick         # 64 MiB smoke run (< 1 minute); --runs 1 is accepted
#   Scripts/bench.sh --full          # also peak RSS at 8 GiB (needs ~10 GiB free under the output dir)
#   Scripts/bench.sh --scenarios http-file,rss --runs 5 --output /tmp/bench
#   Scripts/bench.sh --scenarios segmented,small-files,resume,queue,allocations --quick --runs 1
#   Scripts/bench.sh --scenarios concurrency   # alone: 1, 16, 128 and 1,024 transfers of 1 MiB at 256 KiB/s
#                                              # each (~40 s a round, ~2.5 min with 3 runs)
#   Scripts/bench.sh --scenarios concurrency --concurrency-levels 1,16 --runs 1
# Results: bench-results/results.md, results.json, chart.svg (or under --output). The last table of the
# report, "Targets (issue #18)", judges every target of issue #18 on this run's medians: met, not met,
# within noise (of the runs' spread) or not measured (and why: scenario not selected, peer missing, …).
# concurrency raises its own open-file limit (up to the hard limit, at most 65,536); 1,024 transfers
# need ~4,000 descriptors.
# Peers (curl, wget, aria2c, axel) and nginx are installed with Scripts/install-deps.sh --bench when
# this script runs as root (or with sudo available); otherwise missing peers are skipped and named.
#
# The fleet's bench (downloadkit-fleet-bench: claims per second at 1, 4 and 16 workers on one PostgreSQL
# server it starts itself, and the restore of 100,000 queued tasks from PostgreSQL and from SQLite) runs
# after the others, into the same output directory (fleet-results.md, fleet-results.json; ~4 minutes); it
# gets --output, --runs and --quick. It is left out when --scenarios picks scenarios of the main bench.
#   Scripts/bench.sh --fleet-only                  # just the fleet's bench (options: --output, --runs, --quick)
#   Scripts/bench.sh --fleet-only --quick --runs 1 # its smoke run (500 claims, 10,000 restored)
set -euo pipefail
cd "$(dirname "$0")/.."

# The package that holds downloadkit-fleet-bench (Fleet/, docs/PACKAGES.md), and the one command that builds it
# or names its directory.
fleet_package=Fleet
fleet_swift_build() { swift build -c release --package-path "$fleet_package" "$@"; }

fleet_only=0
with_fleet=1
bench_args=()
fleet_args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --fleet-only) fleet_only=1 ;;
    --scenarios=* | --help | -h) with_fleet=0; bench_args+=("$1") ;;
    --scenarios)
        with_fleet=0
        bench_args+=("$1")
        if [ $# -gt 1 ]; then shift; bench_args+=("$1"); fi
        ;;
    --output=* | --runs=* | --quick) bench_args+=("$1"); fleet_args+=("$1") ;;
    --output | --runs)
        bench_args+=("$1"); fleet_args+=("$1")
        if [ $# -gt 1 ]; then shift; bench_args+=("$1"); fleet_args+=("$1"); fi
        ;;
    *) bench_args+=("$1") ;;
    esac
    shift
done

run_fleet() {
    fleet_swift_build --product downloadkit-fleet-bench
    "$(fleet_swift_build --show-bin-path)/downloadkit-fleet-bench" ${fleet_args[@]+"${fleet_args[@]}"}
}

if [ "$fleet_only" = 1 ]; then
    if [ "$(id -u)" = 0 ] || command -v sudo >/dev/null 2>&1; then
        Scripts/install-deps.sh || echo "bench.sh: install-deps failed; continuing with what is installed" >&2
    fi
    run_fleet
    exit
fi

if [ "$(id -u)" = 0 ] || command -v sudo >/dev/null 2>&1; then
    Scripts/install-deps.sh --bench || echo "bench.sh: install-deps failed; continuing with what is installed" >&2
fi
if [ ! -x /usr/bin/time ]; then
    echo "bench.sh: GNU time (/usr/bin/time, Debian package 'time') is missing: peak RSS will include the" \
        "bench's own address space" >&2
fi

# The resume scenario runs the CLI (downloadkit get), found next to downloadkit-bench.
source Scripts/sanitizer-flags.sh  # tools_flags: the package trait the executables need
swift build -c release "${tools_flags[@]}" --product downloadkit
swift build -c release "${tools_flags[@]}" --product downloadkit-bench
"$(swift build -c release "${tools_flags[@]}" --show-bin-path)/downloadkit-bench" ${bench_args[@]+"${bench_args[@]}"}
if [ "$with_fleet" = 1 ]; then
    run_fleet
fi
