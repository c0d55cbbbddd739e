#!/usr/bin/env bash
# pool-holders.sh [--log LOG] SECONDS... -- COMMAND...
#
# Which tests hold the cooperative pool: runs COMMAND (a `swift test ...`), and at each of the given SECONDS
# after its start stops the test process for a moment with gdb and prints, for every thread of Swift's
# cooperative pool (dispatch's worker threads) that is not idle, the test frames it is in. Swift Testing runs
# every test of a process on that pool — as many threads as CPUs, two on this project's machines — so a test
# that blocks or computes there holds every async test behind it, and their time limits count that wait
# (docs/TESTING.md). Example:
#
#   bash Scripts/pool-holders.sh 15 30 45 -- swift test --skip-build --traits Manager,Tools --filter '^DownloadKitTests\.'
#
# The stops themselves delay the tests by a second or two each: a test that measures a rate or waits a few
# seconds for a reply may fail in such a run; that failure says nothing. COMMAND's output goes to LOG (default a temporary file, named at the end).
set -uo pipefail
log=$(mktemp /tmp/pool-holders-XXXXXX.log)
if [ "${1:-}" = --log ]; then log=$2; shift 2; fi
times=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do times+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] && [ ${#times[@]} -gt 0 ] || { sed -n '2,14p' "$0"; exit 2; }
command -v gdb >/dev/null || { echo "pool-holders: gdb is needed (apt-get install gdb)"; exit 2; }

"$@" >"$log" 2>&1 &
leader=$!
started=$(date +%s%N)
test_process() { pgrep -n -f 'PackageTests\.xctest' || true; }
for at in "${times[@]}"; do
    while [ $(( ($(date +%s%N) - started) / 1000000 )) -lt $((at * 1000)) ]; do
        kill -0 "$leader" 2>/dev/null || break 2
        sleep 0.1
    done
    pid=$(test_process)
    if [ -z "$pid" ]; then echo "== ${at} s: no test process yet"; continue; fi
    echo "== ${at} s (pid $pid)"
    timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt" 2>/dev/null | python3 -c '
import re, sys
text = sys.stdin.read()
idle = ("futex", "pthread_cond", "epoll_wait", "_dispatch_sema4_wait", "__GI___poll")
held = 0
for block in re.split(r"\nThread ", text):
    header = block.split("\n", 1)[0]
    frames = [re.sub(r"^#\d+\s+(0x[0-9a-f]+ in )?", "", line) for line in block.split("\n") if line.startswith("#")]
    # A pool thread is a dispatch worker (threads a test starts inherit the name "…oot.default-qos"
    # of the pool thread that started them, so the name does not tell).
    if not any("_dispatch_worker_thread" in f for f in frames):
        continue
    if not frames or any(word in frames[0] for word in idle) and not any("Tests" in f for f in frames):
        continue
    held += 1
    tests = [f for f in frames if re.search(r"Tests[0-9A-Za-z]*\b", f.split(" at ")[-1]) or "Tests" in f.split(" (")[0]]
    print("  thread %s (%s)" % (header.split("(")[0].strip(), header.split("\"")[1] if "\"" in header else "?"))
    print("    top:  %s" % frames[0][:160])
    for f in tests[:3]:
        print("    test: %s" % f[:200])
print("  %d pool thread(s) busy" % held)
'
done
wait "$leader"
status=$?
echo "pool-holders: the command exited $status; its output: $log"
exit "$status"
