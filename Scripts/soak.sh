#!/usr/bin/env bash
# Soak of the manager (issue #20): for MINUTES, hundreds of downloads through `downloadkit queue run`
# against a local faulty origin (random resets, stalls, short bodies, validator changes: each response
# draws one), with the `queue run` process killed with SIGKILL at random moments and started again.
# At the end one unkilled `queue run` drains the queue, then:
#   - every task `queue list --json` reports completed has its file, byte-identical to one whole
#     version of its resource (a validator change may legitimately restart on the new version);
#   - every other task is failed with its partial (.dkpart) kept or absent — never a file at the
#     destination name with the wrong bytes;
#   - the task store agrees with the files (completed ⇔ destination exists);
#   - the last run's descriptors and threads (from /proc, sampled while it works) do not grow.
#
#   Scripts/soak.sh [MINUTES] [TASKS]        (defaults 5 minutes, 300 tasks; CI: Scripts/test.sh runs 1 minute)
#
# Tasks are added in batches of 50 (the next batch once the queue is drained) until TASKS were added or
# MINUTES are over; a last batch of up to 40 is added for the final, unkilled run.
#
# Environment: DOWNLOADKIT=path to the CLI (default: the debug build). Prints the figures (downloads,
# kills, completed, failed) on the last line; exits non-zero on any violation.
set -uo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-5}"
tasks="${2:-300}"
case "$minutes$tasks" in '' | *[!0-9]*) echo "usage: $0 [MINUTES] [TASKS]" >&2; exit 2 ;; esac
if [ -z "${DOWNLOADKIT:-}" ]; then
    source Scripts/sanitizer-flags.sh
    swift build "${tools_flags[@]}" --product downloadkit >/dev/null 2>&1 || { echo "soak: swift build failed" >&2; exit 2; }
    DOWNLOADKIT="$(swift build --show-bin-path)/downloadkit"
fi
export DOWNLOADKIT SOAK_MINUTES="$minutes" SOAK_TASKS="$tasks"
exec python3 - <<'PY'
import hashlib, http.server, json, os, random, signal, socketserver, subprocess, sys, tempfile, threading, time

dk = os.environ["DOWNLOADKIT"]
minutes = int(os.environ["SOAK_MINUTES"]); ntasks = int(os.environ["SOAK_TASKS"])
rng = random.Random(int(os.environ.get("SOAK_SEED", "20")))
work = tempfile.mkdtemp(prefix="dk-soak.")
state, out = os.path.join(work, "state"), os.path.join(work, "out")
os.makedirs(state); os.makedirs(out)

def content(i, version):
    size = 64 * 1024 + (i * 7919 % 17) * 61 * 1024   # 64 KiB … ~1 MiB
    r = random.Random(i * 1000 + version)
    return r.randbytes(size)

versions = {}          # i -> current version
lock = threading.Lock()
faults = {"reset": 0, "stall": 0, "short": 0, "validator": 0, "clean": 0}

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        try:
            i = int(self.path.strip("/").split(".")[0][1:])
        except ValueError:
            self.send_error(404); return
        with lock:
            roll = random.random()
            if roll < 0.05:
                versions[i] = versions.get(i, 0) + 1; faults["validator"] += 1
            v = versions.setdefault(i, 0)
        body = content(i, v)
        etag = '"v%d-%d"' % (i, v)
        start, end = 0, len(body) - 1
        rng_h = self.headers.get("Range"); ifr = self.headers.get("If-Range")
        partial = False
        if rng_h and rng_h.startswith("bytes=") and (ifr is None or ifr == etag):
            a, _, b = rng_h[6:].partition("-")
            if a.isdigit():
                start = int(a); end = min(int(b), end) if b.isdigit() else end
                if start > end: 
                    self.send_response(416); self.send_header("Content-Range", "bytes */%d" % len(body))
                    self.send_header("Content-Length", "0"); self.end_headers(); return
                partial = True
        self.send_response(206 if partial else 200)
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1))
        if partial: self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, len(body)))
        self.end_headers()
        chunk = body[start:end + 1]
        roll = random.random()
        try:
            if roll < 0.10:
                faults["reset"] += 1
                self.wfile.write(chunk[: len(chunk) // 3]); self.wfile.flush()
                self.connection.setsockopt(__import__("socket").SOL_SOCKET, __import__("socket").SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                self.connection.close(); return
            if roll < 0.20:
                faults["short"] += 1
                self.wfile.write(chunk[: len(chunk) // 2]); self.wfile.flush()
                self.close_connection = True; return
            if roll < 0.28:
                faults["stall"] += 1
                self.wfile.write(chunk[: len(chunk) // 4]); self.wfile.flush()
                time.sleep(1.5)
                self.wfile.write(chunk[len(chunk) // 4:]); return
            faults["clean"] += 1
            self.wfile.write(chunk)
        except OSError:
            pass

class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
server = Server(("127.0.0.1", 0), Handler)
port = server.server_address[1]
threading.Thread(target=server.serve_forever, daemon=True).start()

def q(*args, check=True):
    p = subprocess.run([dk, "queue", "--state", state, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        print("soak: queue %s failed (%d): %s" % (args, p.returncode, p.stdout + p.stderr)); sys.exit(1)
    return p

added = 0
def add_batch(count):
    global added
    for i in range(added, added + count):
        u = "http://127.0.0.1:%d/f%d.bin" % (port, i)
        q("add", u, "-o", os.path.join(out, "f%d.bin" % i))
    added += count

add_batch(min(ntasks, 50))
deadline = time.time() + minutes * 60
kills = runs = 0
def sample(pid):
    try:
        fds = len(os.listdir("/proc/%d/fd" % pid))
        threads = int([l for l in open("/proc/%d/status" % pid) if l.startswith("Threads:")][0].split()[1])
        return fds, threads
    except (OSError, IndexError):
        return None
while time.time() < deadline:
    runs += 1
    p = subprocess.Popen([dk, "queue", "--state", state, "run", "--max-concurrent", "4", "--progress", "none"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p.wait(timeout=rng.uniform(0.2, 4.0))
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL); p.wait(); kills += 1
        # After every kill: no wrong file under a destination name.
        for name in os.listdir(out):
            if name.endswith(".bin"):
                i = int(name[1:-4]); data = open(os.path.join(out, name), "rb").read()
                if not any(data == content(i, v) for v in range(versions.get(i, 0) + 1)):
                    print("soak: WRONG FILE %s after kill %d" % (name, kills)); sys.exit(1)
        continue
    listed = json.loads(q("list", "--json").stdout)
    if all(t.get("state") in ("completed", "failed", "cancelled") for t in listed):
        if added >= ntasks:
            break
        add_batch(min(50, ntasks - added))

# Failed tasks are retried once more (as a user would) and a last batch is added, then one unkilled run
# drains the queue while its descriptors and threads are sampled.
q("resume", "--all", check=False)
add_batch(min(40, ntasks))
p = subprocess.Popen([dk, "queue", "--state", state, "run", "--max-concurrent", "4", "--progress", "none"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
samples = []
while p.poll() is None:
    s = sample(p.pid)
    if s: samples.append(s)
    time.sleep(0.2)
    if time.time() > deadline + 600:
        p.kill(); print("soak: the final run did not finish in 10 minutes"); sys.exit(1)

listed = json.loads(q("list", "--json").stdout)
problems = []
completed = failed = 0
for t in listed:
    dest = t.get("destination") or t.get("path") or ""
    name = os.path.basename(dest); i = int(name[1:-4])
    exists = os.path.exists(dest)
    if t.get("state") == "completed":
        completed += 1
        if not exists:
            problems.append("%s completed but missing" % name); continue
        data = open(dest, "rb").read()
        if not any(data == content(i, v) for v in range(versions.get(i, 0) + 1)):
            problems.append("%s completed with wrong bytes" % name)
    else:
        failed += 1
        if exists:
            problems.append("%s is %s but a file exists at its name" % (name, t.get("state")))
if len(samples) >= 8:
    # Growth, not level: the busiest quarter-to-half of the run against its last quarter.
    n = len(samples); mid = samples[n // 4 : n // 2]; late = samples[3 * n // 4 :]
    mid_fds, mid_threads = max(x[0] for x in mid), max(x[1] for x in mid)
    late_fds, late_threads = max(x[0] for x in late), max(x[1] for x in late)
    if late_fds > mid_fds + 4 or late_threads > mid_threads + 4:
        problems.append("descriptors/threads grew during the final run: %s -> %s" % ((mid_fds, mid_threads), (late_fds, late_threads)))
server.shutdown()
for pr in problems[:20]: print("soak: " + pr)
print("soak: %d tasks, %d runs, %d kills, %d completed, %d not completed; faults served %s; final run: %d samples, max fds/threads %s, last %s"
      % (len(listed), runs + 1, kills, completed, failed, faults, len(samples),
         (max(x[0] for x in samples), max(x[1] for x in samples)) if samples else None, samples[-1] if samples else None))
if not problems:
    subprocess.run(["rm", "-rf", work])
sys.exit(1 if problems else 0)
PY
