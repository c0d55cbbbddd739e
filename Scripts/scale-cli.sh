#!/usr/bin/env bash
# Many simultaneous transfers through the CLI (issue #23): `downloadkit get -i LIST --max-concurrent N`
# against aria2c -j N, in the same run, from one nginx serving 1 MiB files at `limit_rate 256k` (one file
# alone takes 3–4 s), the URLs spread over 127.0.1.1–127.0.1.128 so that each host is its own origin and
# the per-host cap does not bind. Wall time, CPU (user+sys) per GiB and peak RSS come from GNU time; every
# file's sha256 is checked after every run (a run with a wrong or missing file fails the script).
#
#   bash Scripts/scale-cli.sh [N…]        (default: 256 1024; RUNS=2 runs per client and N)
#
# Writes a Markdown table to stdout and, with SCALE_DOCS=1, between the markers in docs/BENCHMARKS.md.
# SCALE_CLIENTS="DownloadKit" measures one client only; SCALE_WRAPPER="heaptrack -o /tmp/ht" runs the CLI
# under a profiler (its figures are then the profiler's, not the CLI's); SCALE_WRAPPER=Scripts/stack-depths.sh
# reports how deep the transfer threads' stacks went and which functions went there.
# Needs nginx, aria2c and GNU time (Scripts/install-deps.sh --bench installs them); builds the release CLI.
set -euo pipefail
cd "$(dirname "$0")/.."

counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(256 1024)
runs="${RUNS:-2}"
hosts=128
for tool in nginx aria2c /usr/bin/time sha256sum; do
    command -v "$tool" >/dev/null || { echo "scale-cli: $tool is missing (bash Scripts/install-deps.sh --bench)" >&2; exit 2; }
done
source Scripts/sanitizer-flags.sh
swift build -c release "${tools_flags[@]}" --product downloadkit >&2
dk="$(swift build -c release --show-bin-path)/downloadkit"

max=0
for n in "${counts[@]}"; do [ "$n" -gt "$max" ] && max=$n; done
# Files and downloads live in tmpfs when there is one: the disk is not what is measured.
base=/dev/shm
[ -d "$base" ] && [ -w "$base" ] || base="${TMPDIR:-/tmp}"
work="$(mktemp -d "$base/dk-scale.XXXXXX")"
nginx_pid=""
cleanup() {
    [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/www" "$work/logs"
echo "scale-cli: writing $max files of 1 MiB" >&2
for ((i = 0; i < max; i++)); do head -c 1048576 /dev/urandom >"$work/www/f$i.bin"; done
# In numeric order: the first N lines are the files of a run of N.
(cd "$work/www" && for ((i = 0; i < max; i++)); do echo "f$i.bin"; done | xargs sha256sum >"$work/sums")
chmod 755 "$work" "$work/www" && chmod 644 "$work"/www/*  # nginx's workers run as nobody when started as root

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/nginx.conf" <<EOF
worker_processes 1;
worker_rlimit_nofile 16384;
daemon off;
pid $work/nginx.pid;
error_log $work/logs/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $work/logs;
    proxy_temp_path $work/logs;
    fastcgi_temp_path $work/logs;
    uwsgi_temp_path $work/logs;
    scgi_temp_path $work/logs;
    server {
        listen $port backlog=4096;
        root $work/www;
        limit_rate 256k;
        sendfile on;
    }
}
EOF
nginx -c "$work/nginx.conf" -p "$work" &
nginx_pid=$!
for _ in $(seq 100); do
    curl -fsS -o /dev/null "http://127.0.1.1:$port/f0.bin" -r 0-0 2>/dev/null && break
    sleep 0.1
done
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# One measured run: prints "wall user sys maxrss_kib" or fails when a file is wrong.
measure() {
    local label=$1 n=$2 out=$3
    shift 3
    rm -rf "$out" && mkdir -p "$out"
    /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$@" >"$work/client.log" 2>&1 || {
        echo "scale-cli: $label with N=$n failed:" >&2
        tail -20 "$work/client.log" >&2
        exit 1
    }
    (cd "$out" && head -n "$n" "$work/sums" | sha256sum --quiet -c -) || {
        echo "scale-cli: $label with N=$n left a wrong or missing file" >&2
        exit 1
    }
    tail -1 "$work/time"
}

rows=()
for n in "${counts[@]}"; do
    list="$work/list-$n"
    for ((i = 0; i < n; i++)); do echo "http://127.0.1.$((i % hosts + 1)):$port/f$i.bin"; done >"$list"
    for client in ${SCALE_CLIENTS:-DownloadKit aria2c}; do
        samples=()
        for ((r = 0; r < runs; r++)); do
            out="$work/out-$client"
            if [ "$client" = DownloadKit ]; then
                s=$(measure "$client" "$n" "$out" ${SCALE_WRAPPER:-} "$dk" get -i "$list" -d "$out" --max-concurrent "$n" --progress none)
            else
                s=$(measure "$client" "$n" "$out" aria2c -q -j "$n" -i "$list" -d "$out" --max-connection-per-server=1 \
                    --split=1 --file-allocation=none --allow-overwrite=true --auto-file-renaming=false \
                    --summary-interval=0 --console-log-level=error)
            fi
            samples+=("$s")
            echo "scale-cli: $client N=$n run $((r + 1)): wall/user/sys/maxrss_kib = $s" >&2
        done
        rows+=("$(printf '%s\n' "${samples[@]}" | python3 -c '
import sys
n, client = int(sys.argv[1]), sys.argv[2]
s = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
gib = n / 1024
wall = [x[0] for x in s]; cpu = [(x[1] + x[2]) / gib for x in s]; rss = [x[3] / 1024 for x in s]
r = lambda v, f: f.format(min(v)) if len(v) == 1 or f.format(min(v)) == f.format(max(v)) else (f + "–" + f).format(min(v), max(v))
two, whole = "{:.2f}", "{:.0f}"
print(f"| {n} | {client} | {r(wall, two)} s | {r(cpu, two)} s | {r(rss, whole)} MiB |")
' "$n" "$client")")
    done
done

table="$(
    echo "| transfers | client | wall (one 1 MiB file alone at 256 KiB/s: 3–4 s) | CPU (user+sys) per GiB | peak RSS |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "\`bash Scripts/scale-cli.sh ${counts[*]}\` (RUNS=$runs), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
        "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), nginx 1 worker, files in ${base}."
)"
echo "$table"
if [ "${SCALE_DOCS:-0}" = 1 ]; then
    python3 - docs/BENCHMARKS.md "$table" <<'PY'
import re, sys
path, table = sys.argv[1], sys.argv[2]
text = open(path).read()
block = "<!-- scale-cli:begin -->\n" + table + "\n<!-- scale-cli:end -->"
if "<!-- scale-cli:begin -->" in text:
    text = re.sub(r"<!-- scale-cli:begin -->.*?<!-- scale-cli:end -->", lambda _: block, text, flags=re.S)
else:
    text = text.rstrip("\n") + "\n\n" + block + "\n"
open(path, "w").write(text)
PY
    echo "scale-cli: table written to docs/BENCHMARKS.md" >&2
fi
