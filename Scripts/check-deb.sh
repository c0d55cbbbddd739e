#!/usr/bin/env bash
# Proves the .deb from Scripts/package-deb.sh on a clean Debian 12 (bookworm) root with no Swift:
#
#   Scripts/check-deb.sh DEB
#
# 1. debootstrap --variant=minbase with only the package's Depends plus man-db, into a private temporary
#    directory. The debootstrap tarball is cached (--make-tarball / --unpack-tarball) under CHECK_DEB_CACHE
#    (default /var/cache/downloadkit-ci) when that is writable, keyed by suite, architecture and package
#    list; otherwise (or the first time) it is made in the temporary directory: a cold run works too.
#    Mirror: CHECK_DEB_MIRROR, else the first bookworm entry of the host's apt sources.
# 2. `dpkg -i` in the chroot must succeed (a missing Depends fails it); then in the chroot:
#    `downloadkit --version` is the package's version, `man -w downloadkit` / `downloadkitd` find the pages,
#    the completions and the user unit are installed, `ldd` resolves every library and none is the Swift
#    runtime, a real download (`downloadkit get`, one connection and four) from an nginx the script starts
#    on the host's loopback (the chroot shares the network namespace) matches the served file's SHA-256,
#    and `downloadkit demo` (its own origin on 127.0.0.1) completes.
# 3. `systemd-analyze verify --user` of the installed unit (on the host, see verify_unit).
# 4. No BoringSSL symbol in the installed binaries (PostgresNIO brings it; the CLI must not link it).
#
# Every check runs; the script exits 1 when any failed, naming them. Mounts (/proc, /dev for the chroot, the
# overlay for systemd-analyze) live only in private mount namespaces (unshare -m) that end with the command,
# so nothing stays mounted even if the script is killed; the temporary root is removed on exit (trap).
# Needs root, debootstrap, nginx, unshare (util-linux), systemd (systemd-analyze), binutils (nm):
# Scripts/install-deps.sh installs them.
set -euo pipefail
trap 'echo "check-deb: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."

die() { echo "check-deb: $*" >&2; exit 2; }
[ $# -eq 1 ] || { echo "usage: $0 DEB" >&2; exit 2; }
[ -f "$1" ] || die "$1: no such file"
deb="$(realpath "$1")"
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, unshare)"
for command in debootstrap dpkg-deb unshare chroot systemd-analyze nm sha256sum python3; do
    command -v "$command" >/dev/null || die "$command not found (Scripts/install-deps.sh installs it)"
done
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx_bin" ] || die "nginx not found (Scripts/install-deps.sh installs it)"
[ "$(dpkg-deb -f "$deb" Package)" = downloadkit ] || die "$deb is not the downloadkit package"

started=$SECONDS
suite=bookworm
arch="$(dpkg-deb -f "$deb" Architecture)"
deb_version="$(dpkg-deb -f "$deb" Version)"

# The packages the root gets: the package's Depends (first of each alternative, no version) and man-db.
depends="$(dpkg-deb -f "$deb" Depends)"
include="$(tr ',' '\n' <<<"$depends" | sed -e 's/|.*//' -e 's/(.*)//' -e 's/:any//' -e 's/[[:space:]]//g' |
    grep -v '^$' | { cat; echo man-db; } | sort -u | paste -sd, -)"

# The first bookworm (not -security/-updates) source of the host: one-line .list or deb822 .sources.
host_mirror() {
    local file
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$file" ] || continue
        awk -v suite="$suite" '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
            if ($(i + 1) == suite) { print $i; exit } }' "$file"
    done
    for file in /etc/apt/sources.list.d/*.sources; do
        [ -f "$file" ] || continue
        awk -v suite="$suite" 'BEGIN { RS = ""; FS = "\n" } {
            uri = ""; ok = 0
            for (n = 1; n <= NF; n++) {
                if ($n ~ /^URIs:/) { split($n, u, /[[:space:]]+/); uri = u[2] }
                if ($n ~ /^Suites:/) { m = split($n, s, /[[:space:]]+/); for (k = 2; k <= m; k++) if (s[k] == suite) ok = 1 }
            }
            if (ok && uri != "") { print uri; exit } }' "$file"
    done
}
mirror="${CHECK_DEB_MIRROR:-$(host_mirror | sed -n 1p)}"
mirror="${mirror:-http://deb.debian.org/debian}"

work="$(mktemp -d /tmp/dk-check-deb.XXXXXX)"
root="$work/root"
nginx_pid=""
cleanup() {
    [ -n "$nginx_pid" ] && kill -TERM "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
    # The mounts were made in namespaces that are gone; refuse to delete through one that is not.
    local mounts
    mounts="$(findmnt -rn -o TARGET)" || mounts="$work (findmnt failed)"
    if grep -q "^$work" <<<"$mounts"; then
        echo "check-deb: something is still mounted under $work; not removing it" >&2
    else
        rm -rf --one-file-system "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Runs a command in the chroot with /proc and /dev mounted in a private mount namespace of its own.
in_root() {
    # shellcheck disable=SC2016  # the inner shell expands its own arguments
    unshare --mount --propagation private -- /bin/sh -ec '
        root="$1"; shift
        mount -t proc proc "$root/proc"
        mount --bind /dev "$root/dev"
        exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb "$@"
    ' check-deb "$root" "$@"
}

# 1. The root, from the cached tarball when there is one.
cache="${CHECK_DEB_CACHE:-/var/cache/downloadkit-ci}"
if ! { mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; }; then
    echo "check-deb: $cache is not writable; the debootstrap tarball is not cached" >&2
    cache="$work"
fi
key="$(printf '%s\n' "$suite" "$arch" "$include" "$mirror" | sha256sum | cut -c1-16)"
tarball="$cache/debootstrap-$suite-$arch-minbase-$key.tgz"
# Tarballs of other package lists (an older Depends) go when unused for 14 days; the one used is touched.
find "$cache" -maxdepth 1 -name "debootstrap-*-minbase-*.tgz" -mtime +14 -delete 2>/dev/null || true
if [ -s "$tarball" ]; then
    echo "check-deb: using the cached $tarball" >&2
    touch "$tarball"
else
    echo "check-deb: debootstrap --make-tarball ($suite, $mirror, include: $include)" >&2
    unshare --mount --propagation private -- \
        debootstrap --variant=minbase --arch="$arch" --include="$include" --make-tarball="$work/tarball.tgz" \
        "$suite" "$work/tarball-root" "$mirror" >"$work/debootstrap-tarball.log" 2>&1 ||
        { tail -n 20 "$work/debootstrap-tarball.log" >&2; die "debootstrap --make-tarball failed"; }
    mv "$work/tarball.tgz" "$tarball.partial.$$" && mv "$tarball.partial.$$" "$tarball"
    rm -rf --one-file-system "$work/tarball-root"
fi
echo "check-deb: debootstrap --unpack-tarball into $root" >&2
# In a private mount namespace: the /proc and /sys debootstrap mounts in the root end with it, even if killed.
unshare --mount --propagation private -- \
    debootstrap --variant=minbase --arch="$arch" --include="$include" --unpack-tarball="$tarball" \
    "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap --unpack-tarball failed"; }
root_ready=$SECONDS

failures=()
pass() { echo "ok:   $1"; }
fail() { echo "FAIL: $1${2:+: $2}"; failures+=("$1"); }

# 2. Install and run.
cp "$deb" "$root/tmp/downloadkit.deb"
if ! in_root dpkg -i /tmp/downloadkit.deb >"$work/dpkg.log" 2>&1; then
    cat "$work/dpkg.log"
    fail "dpkg -i"
    echo "check-deb: FAILED (${failures[*]}) in $((SECONDS - started)) s"
    exit 1
fi
pass "dpkg -i (Depends: $depends)"

version="$(in_root downloadkit --version 2>&1)" || true
if [ "$version" = "${deb_version%-*}" ]; then pass "downloadkit --version: $version"
else fail "downloadkit --version" "'$version', the package is $deb_version"; fi

for tool in downloadkit downloadkitd; do
    page="$(in_root man -w "$tool" 2>&1)" || true
    if [ "$page" = "/usr/share/man/man1/$tool.1.gz" ]; then pass "man -w $tool: $page"
    else fail "man -w $tool" "$page"; fi
done
# The page renders (groff in the chroot) and documents the subcommands, `get` among them.
rendered="$(in_root man -P cat downloadkit 2>/dev/null)" || true
if grep -Eq '^[[:space:]]+get[[:space:]]+Download' <<<"$rendered"; then
    pass "man downloadkit renders, with the get subcommand"
else fail "man downloadkit renders"; fi

for file in /usr/share/bash-completion/completions/downloadkit /usr/share/zsh/vendor-completions/_downloadkit \
    /usr/share/fish/vendor_completions.d/downloadkit.fish /usr/share/bash-completion/completions/downloadkitd \
    /usr/share/zsh/vendor-completions/_downloadkitd /usr/share/fish/vendor_completions.d/downloadkitd.fish \
    /usr/lib/systemd/user/downloadkitd.service /usr/share/doc/downloadkit/copyright \
    /usr/share/doc/downloadkit/changelog.Debian.gz; do
    if [ -s "$root$file" ]; then pass "installed $file"; else fail "installed $file"; fi
done

for tool in downloadkit downloadkitd; do
    libs="$(in_root ldd "/usr/bin/$tool" 2>&1)" || true
    if grep -Eq 'not found|libswift|libFoundation|libicu|libdispatch|libBlocksRuntime|not a dynamic' <<<"$libs"; then
        fail "ldd /usr/bin/$tool" "$(tr '\n' ' ' <<<"$libs")"
    else
        pass "ldd /usr/bin/$tool: $(awk '{print $1}' <<<"$libs" | paste -sd' ' -)"
    fi
done

# A real download from nginx on the host's loopback (as Scripts/chaos.sh starts it), checked by SHA-256.
mkdir -p "$work/www"
head -c $((24 << 20)) /dev/urandom >"$work/www/file.bin"
source Scripts/nginx-origin.sh
start_nginx_origin "$work" || die "the loopback nginx did not start"
port=$nginx_port
served="$(sha256sum <"$work/www/file.bin" | cut -d' ' -f1)"
for connections in 1 4; do
    rm -f "$root/tmp/file.bin"
    if in_root downloadkit get --connections "$connections" --progress none \
        "http://127.0.0.1:$port/file.bin" -o /tmp/file.bin >"$work/get.log" 2>&1 &&
        [ "$(sha256sum <"$root/tmp/file.bin" | cut -d' ' -f1)" = "$served" ]; then
        pass "downloadkit get --connections $connections: 24 MiB, SHA-256 of the served file"
    else
        fail "downloadkit get --connections $connections" "$(tail -n 5 "$work/get.log" | tr '\n' ' ')"
    fi
done

if in_root downloadkit demo --size 32 --rate 16 --directory /tmp/demo >"$work/demo.log" 2>&1; then
    pass "downloadkit demo (offline, its own origin)"
else
    fail "downloadkit demo" "$(tail -n 5 "$work/demo.log" | tr '\n' ' ')"
fi

# 3. The unit, with the host's systemd-analyze. Not in the chroot: systemd there would pull in libraries
# (libssl3 among them) that hide a Depends the package lacks, and a second root costs a debootstrap.
# `--root` does not combine with `--user` in systemd 252 ("Failed to initialize unit search paths"), and
# verify checks that ExecStart's /usr/bin/downloadkitd exists: so, in a private mount namespace, an overlay
# shows the host's /usr/bin plus the chroot's (host first). Any message (unknown key, bad value) fails.
verify_unit() {
    mkdir -p "$work/xdg" && chmod 0700 "$work/xdg"
    # shellcheck disable=SC2016  # the inner shell expands its own arguments
    unshare --mount --propagation private -- /bin/sh -ec '
        mount -t overlay overlay -o "lowerdir=/usr/bin:$1/usr/bin" /usr/bin
        XDG_RUNTIME_DIR="$2" systemd-analyze verify --user --man=no "$1/usr/lib/systemd/user/downloadkitd.service"
    ' check-deb "$root" "$work/xdg" 2>&1
}
if unit_messages="$(verify_unit)" && [ -z "$unit_messages" ]; then
    pass "systemd-analyze verify --user downloadkitd.service ($(grep '^ExecStart=' "$root/usr/lib/systemd/user/downloadkitd.service"))"
else
    fail "systemd-analyze verify" "$unit_messages"
fi

# 4. BoringSSL (swift-crypto's CCryptoBoringSSL and swift-nio-ssl's CNIOBoringSSL, both brought by PostgresNIO)
# must not be in the CLI. The installed binaries are stripped, but a Swift executable on Linux exports its
# symbols (--export-dynamic), so `nm -D` still names every BoringSSL function it links.
for tool in downloadkit downloadkitd; do
    # shellcheck disable=SC2016  # a literal $s: the prefix of Swift's mangled names
    exported="$(nm -D --defined-only "$root/usr/bin/$tool" | grep -c ' T \$s' || true)"
    count="$(nm -D "$root/usr/bin/$tool" | grep -c 'BoringSSL' || true)"
    if [ "$exported" = 0 ]; then fail "BoringSSL check of /usr/bin/$tool" "it exports no Swift symbol, nm -D cannot see what it links"
    elif [ "$count" = 0 ]; then pass "no BoringSSL symbol in /usr/bin/$tool (nm -D)"
    else fail "BoringSSL in /usr/bin/$tool" "nm -D names it $count times (CCryptoBoringSSL: $(nm -D "$root/usr/bin/$tool" | grep -c CCryptoBoringSSL || true))"; fi
done

echo "check-deb: root ready after $((root_ready - started)) s, all checks after $((SECONDS - started)) s"
if [ ${#failures[@]} -gt 0 ]; then
    echo "check-deb: FAILED: ${failures[*]}"
    exit 1
fi
echo "check-deb: passed"
