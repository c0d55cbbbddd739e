#!/usr/bin/env bash
# What a rate-capped origin gives a client that does nothing but read: one curl process, CONNECTIONS
# connections, the first BYTES of URL asked for in CHUNK-byte range requests (4 MiB, as DownloadKit's
# segmented engine asks) and thrown away. Connections are reused, requests are not pipelined. Prints the
# wall time, MB/s, curl's CPU and, with CAP (bytes/s per connection), the share of CONNECTIONS x CAP —
# the figure the bench's `segmented` rows are judged by (docs/BENCHMARKS.md, "16 connections, past the
# page cache").
#
#   CAP=26000000 Scripts/origin-ceiling.sh http://127.0.0.1:18080/limited/f1g.bin 16 1073741824
#
# Read the served file into the page cache first (as the bench does): a miss blocks nginx's one worker.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: [CAP=bytes/s] $0 URL CONNECTIONS BYTES [CHUNK]" >&2
    exit 2
fi
url=$1 connections=$2 bytes=$3 chunk=${4:-4194304}
config=$(mktemp)
trap 'rm -f "$config" "$config.time"' EXIT
for ((offset = 0; offset < bytes; offset += chunk)); do
    [ "$offset" -gt 0 ] && echo next >> "$config"
    last=$((offset + chunk - 1 < bytes - 1 ? offset + chunk - 1 : bytes - 1))
    printf 'url = "%s"\nrange = "%d-%d"\noutput = "/dev/null"\n' "$url" "$offset" "$last" >> "$config"
done
start=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o "$config.time" curl -sSf --no-progress-meter -Z --parallel-max "$connections" -K "$config"
end=$(date +%s.%N)
read -r user system < "$config.time"
python3 - "$start" "$end" "$bytes" "$connections" "${CAP:-0}" "$user" "$system" <<'EOF'
import sys
start, end, size, n, cap, user, system = sys.argv[1:]
wall = float(end) - float(start); size = int(size); n = int(n); cap = float(cap)
share = f", {100 * size / wall / (n * cap):.1f} % of {n} x cap" if cap > 0 else ""
print(f"{n} connections: {wall:.3f} s, {size / wall / 1e6:.1f} MB/s{share}, curl CPU {float(user) + float(system):.2f} s")
EOF
