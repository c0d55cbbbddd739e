#!/usr/bin/env bash
# How deep the transfer threads' stacks went, and which functions went there.
#
#   STACK_REPORT=/tmp/stacks.txt SCALE_WRAPPER=Scripts/stack-depths.sh SCALE_CLIENTS=DownloadKit RUNS=1 \
#       bash Scripts/scale-cli.sh 1024
#   Scripts/stack-depths.sh COMMAND…        (any command)
#
# The report goes to STACK_REPORT (appended), else to stderr (which scale-cli keeps only on a failure).
#
# Starts COMMAND, and STACK_AT seconds later (default 2.5) reads /proc/PID/mem over every 1 MiB anonymous
# read-write mapping (a thread's stack: 1,024 transfers, 1,024 of them). A stack is as deep as its lowest
# non-zero byte: pages below it were never touched. Prints how many stacks reached each depth (KiB), then,
# for the STACK_SHOW deepest (default 1), every word above the lowest non-zero one that points into mapped
# code, symbolised: the return addresses the deepest calls left behind, deepest first (stale words of
# earlier, shallower calls are mixed in; the deepest rows are the deepest chain). Figures measured with it
# are in docs/BENCHMARKS.md, "Stacks at 1,024 transfers". Peak RSS measured through this wrapper is not the
# command's alone (GNU time reports the largest process, which may be this script's reader).
# Needs python3, addr2line (binutils) and the toolchain's swift-demangle.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND…" >&2; exit 2; }
"$@" &
pid=$!
sleep "${STACK_AT:-2.5}"
demangle="$(command -v swift-demangle || echo /opt/swift/usr/bin/swift-demangle)"
report="${STACK_REPORT:-/dev/stderr}"
python3 - "$pid" "${STACK_SHOW:-1}" "$demangle" >>"$report" <<'EOF' || echo "stack-depths: could not read process $pid" >&2
import collections, re, struct, subprocess, sys

pid, show, demangle = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
stacks, code = [], []
for line in open(f'/proc/{pid}/maps'):
    m = re.match(r'([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \d+\s*(\S*)', line)
    if not m:
        continue
    start, end, perms, offset, path = int(m[1], 16), int(m[2], 16), m[3], int(m[4], 16), m[5]
    if perms == 'rw-p' and not path and end - start == 1 << 20:
        stacks.append((start, end))
    if 'x' in perms and path.startswith('/'):
        code.append((start, end, offset, path))

depths, deepest = [], []
with open(f'/proc/{pid}/mem', 'rb', 0) as mem:
    for start, end in stacks:
        try:
            mem.seek(start)
            data = mem.read(end - start)
        except OSError:
            continue
        depth = len(data.lstrip(b'\0'))
        depths.append(depth)
        deepest.append((depth, data))
        deepest.sort(key=lambda item: -item[0])
        del deepest[show:]
counts = collections.Counter(depth // 1024 for depth in depths)
print(f'{len(depths)} stacks of 1 MiB; depth KiB: threads — '
      + ', '.join(f'{kib}: {n}' for kib, n in sorted(counts.items())))

segments = {}
def address(path, file_offset):
    """The ELF virtual address of a file offset (through the PT_LOAD program headers)."""
    if path not in segments:
        with open(path, 'rb') as f:
            header = f.read(64)
            phoff = struct.unpack_from('<Q', header, 32)[0]
            phentsize, phnum = struct.unpack_from('<HH', header, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
        loads = []
        for i in range(phnum):
            kind, _, off, vaddr, _, filesz, _, _ = struct.unpack_from('<IIQQQQQQ', table, i * phentsize)
            if kind == 1:
                loads.append((off, vaddr, filesz))
        segments[path] = loads
    for off, vaddr, filesz in segments[path]:
        if off <= file_offset < off + filesz:
            return file_offset - off + vaddr
    return file_offset

for depth, data in deepest:
    print(f'--- a stack {depth} bytes deep: return addresses, deepest first (bytes from the top, file, function)')
    first = len(data) - depth
    first -= first % 8
    hits = []
    for at in range(first, len(data), 8):
        word = struct.unpack_from('<Q', data, at)[0]
        for start, end, offset, path in code:
            if start <= word < end:
                hits.append((len(data) - at, path, address(path, word - start + offset) - 1))
                break
    names = {}
    by_path = collections.defaultdict(list)
    for hit in hits:
        by_path[hit[1]].append(hit)
    for path, group in by_path.items():
        lines = subprocess.run(['addr2line', '-f', '-e', path] + [hex(h[2]) for h in group],
                               capture_output=True, text=True).stdout.split('\n')[0::2]
        plain = subprocess.run([demangle, '--simplified', '--compact'], input='\n'.join(lines),
                               capture_output=True, text=True).stdout.split('\n')
        names.update(zip(group, plain))
    for hit in hits:
        print(f'{hit[0]:7d}  {hit[1].rsplit("/", 1)[-1][:16]:16s}  {names.get(hit, "?")[:140]}')
EOF
wait "$pid"
