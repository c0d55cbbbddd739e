#!/usr/bin/env bash
# watchdog.sh [--tee] SECONDS LOG -- COMMAND...
#
# Runs COMMAND (its output line-buffered, appended to LOG, and with --tee copied to stdout too) and gives it
# SECONDS. A command still running then is a hang, not a slow run — the steps this guards take a tenth of that — so instead of letting
# CI's own limit end the whole run without a word (which happened once: the log stopped in the middle of the
# suite, with the test process's last 4 KiB still in its stdout buffer), it says what hung and fails:
#   - the Swift Testing tests that started and never ended (from LOG: "◇ Test X started." with no "✔/✘ Test X"),
#   - every process of the command's session with its command line,
#   - the threads' backtraces of each test process (gdb), in LOG.hang,
# then kills the session's processes and returns 124, like timeout(1).
set -uo pipefail
tee=0
[ "${1:-}" = --tee ] && { tee=1; shift; }
limit=$1 log=$2
shift 2
[ "${1:-}" = -- ] && shift
touch "$log"
# stdbuf: the test process's stdout is a pipe here, so glibc would buffer it by 4 KiB blocks; line buffering
# keeps the log true to the instant (inherited by the children through LD_PRELOAD, which stdbuf extends).
if [ "$tee" = 1 ]; then
    setsid stdbuf -oL -eL "$@" > >(tee -a "$log") 2>&1 &
else
    setsid stdbuf -oL -eL "$@" >>"$log" 2>&1 &
fi
leader=$!
# The command's processes: its session (setsid), not its process group — SwiftPM starts the test binary in a
# process group of its own.
session_pids() { ps -e -o pid=,sid= | awk -v s="$leader" '$2 == s { print $1 }'; }
deadline=$((SECONDS + limit))
while kill -0 "$leader" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        {
            echo "watchdog: still running after $limit s: $*"
            echo "watchdog: tests started and not ended:"
            python3 - "$log" <<'EOF'
import re, sys
started, ended = {}, set()
for line in open(sys.argv[1], errors="replace"):
    if "Test case passing" in line:  # a parameterised test's cases end with the test, not one by one
        continue
    m = re.match(r'\S+ Test (.+?) started\.', line)
    if m and m.group(1) != "run":
        started.setdefault(m.group(1), line.strip())
        continue
    m = re.match(r'\S+ Test (.+?) (passed|failed|skipped|recorded)', line)
    if m:
        ended.add(m.group(1))
for name, line in started.items():
    if name not in ended:
        print("  " + line)
EOF
            echo "watchdog: processes:"
            for pid in $(session_pids); do ps -o pid=,etimes=,args= -p "$pid" 2>/dev/null | cut -c1-300; done
        } | tee -a "$log" >&2
        for pid in $(session_pids); do
            grep -qE 'xctest|PackageTests' /proc/"$pid"/cmdline 2>/dev/null || continue
            echo "=== backtraces of $pid: $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-200)" >>"$log.hang"
            # gdb (Scripts/install-deps.sh installs it; the toolchain's lldb needs a libpython Debian 12 lacks),
            # with Swift's names demangled.
            if command -v gdb >/dev/null; then
                timeout 180 gdb -p "$pid" -batch -ex "thread apply all bt" 2>&1 |
                    { if command -v swift-demangle >/dev/null; then swift-demangle --simplified; else cat; fi; } >>"$log.hang"
            else
                echo "(gdb is not installed: no backtraces)" >>"$log.hang"
            fi
        done
        [ -s "$log.hang" ] && echo "watchdog: backtraces in $log.hang ($(grep -c '^Thread ' "$log.hang") threads)" | tee -a "$log" >&2
        pids=$(session_pids)
        kill -TERM $pids 2>/dev/null
        sleep 5
        kill -KILL $pids 2>/dev/null
        wait "$leader" 2>/dev/null
        return_code=124
        break
    fi
    sleep 2
done
if [ -z "${return_code:-}" ]; then
    wait "$leader"
    return_code=$?
fi
exit "$return_code"
