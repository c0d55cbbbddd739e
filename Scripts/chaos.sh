#!/usr/bin/env bash
# Chaos test of crash safety: downloads a file from a local, rate-limited nginx with the built
# `downloadkit get`, kills the client with SIGKILL or SIGTERM at random moments, reruns it, and checks
# after every kill that no wrong file sits under the destination name and (single connection) that the
# partial file is a prefix of the real one, and at the end that the file is byte-identical (cmp) with
# nothing left beside it. Every other trial is segmented (`--connections 4`; its partial file is sparse,
# so only the final comparison applies). Scripts/test.sh (CI) runs it with a bounded budget.
#
#   Scripts/chaos.sh [seconds]      (default 60; the budget for starting new trials)
#
# Environment: DOWNLOADKIT=path to a built CLI (default: swift build --product downloadkit, debug),
# CHAOS_SIZE_MB (default 24), CHAOS_RATE (nginx limit_rate, default 6m: a download takes ~4 s).
# Needs nginx on PATH or in /usr/sbin. Exits non-zero if any trial failed.
set -uo pipefail
cd "$(dirname "$0")/.."

budget="${1:-60}"
case "$budget" in '' | *[!0-9]*) echo "usage: $0 [seconds]" >&2; exit 2 ;; esac
size_mb="${CHAOS_SIZE_MB:-24}"
rate="${CHAOS_RATE:-6m}"

nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx_bin" ] || { echo "chaos: nginx not found; install it (apt-get install nginx-light)" >&2; exit 2; }

if [ -z "${DOWNLOADKIT:-}" ]; then
    source Scripts/sanitizer-flags.sh
    swift build "${tools_flags[@]}" --product downloadkit >/dev/null 2>&1 || { echo "chaos: swift build failed" >&2; exit 2; }
    DOWNLOADKIT="$(swift build --show-bin-path)/downloadkit"
fi

work="$(mktemp -d /tmp/dk-chaos.XXXXXX)"
nginx_pid=""
client_pid=""
cleanup() {
    [ -n "$client_pid" ] && kill -KILL "$client_pid" 2>/dev/null
    [ -n "$nginx_pid" ] && kill -TERM "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/www" "$work/out"
head -c "$((size_mb << 20))" /dev/urandom >"$work/www/file.bin"
source Scripts/nginx-origin.sh
start_nginx_origin "$work" "limit_rate $rate;" || exit 2
port=$nginx_port

url="http://127.0.0.1:$port/file.bin"
dest="$work/out/file.bin"
trials=0
failures=0
kills=0
started=$SECONDS

random_sleep() {  # 0.1 … 4.0 s
    local ms=$((100 + RANDOM % 3900))
    sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
}

fail() {
    failures=$((failures + 1))
    echo "trial $trials: FAIL: $*"
    ls -la "$work/out"
}

while [ $((SECONDS - started)) -lt "$budget" ]; do
    trials=$((trials + 1))
    rm -rf "$work/out" && mkdir -p "$work/out"
    ok=1
    kills_this_trial=$((1 + RANDOM % 4))
    if [ $((trials % 2)) -eq 0 ]; then connections=4; else connections=1; fi
    for _ in $(seq "$kills_this_trial"); do
        "$DOWNLOADKIT" get "$url" -o "$dest" --progress none --retries 3 --connections "$connections" >>"$work/client.log" 2>&1 &
        client_pid=$!
        random_sleep
        if kill -0 "$client_pid" 2>/dev/null; then
            if [ $((RANDOM % 2)) -eq 0 ]; then sig=KILL; else sig=TERM; fi
            kill -"$sig" "$client_pid" 2>/dev/null
            kills=$((kills + 1))
        fi
        wait "$client_pid" 2>/dev/null
        client_pid=""
        # Whatever was killed: a final file must be complete, a partial file must be a prefix.
        if [ -e "$dest" ] && ! cmp -s "$dest" "$work/www/file.bin"; then
            fail "a wrong file under the destination name after a kill"; ok=0; break
        fi
        if [ "$connections" -eq 1 ] && [ -e "$dest.dkpart" ]; then
            part_size=$(stat -c %s "$dest.dkpart")
            if ! cmp -s -n "$part_size" "$dest.dkpart" "$work/www/file.bin"; then
                fail "the partial file ($part_size bytes) is not a prefix of the resource"; ok=0; break
            fi
        fi
    done
    [ "$ok" -eq 1 ] || continue
    if ! timeout 120 "$DOWNLOADKIT" get "$url" -o "$dest" --progress none --retries 3 --connections "$connections" >>"$work/client.log" 2>&1; then
        fail "the final run did not succeed (exit $?)"; continue
    fi
    if ! cmp -s "$dest" "$work/www/file.bin"; then fail "the final file differs (connections $connections)"; continue; fi
    left="$(ls -A "$work/out")"
    if [ "$left" != "file.bin" ]; then fail "left beside the file: $left"; continue; fi
done

echo "chaos: $trials trials (half with --connections 4), $kills kills, $failures failures (${size_mb} MiB at $rate, ${budget}s budget)"
[ "$failures" -eq 0 ]
