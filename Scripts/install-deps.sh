#!/usr/bin/env bash
# Installs what the build, tests and benchmarks need on Debian/Ubuntu (run as root, or with sudo).
# Idempotent: packages already present are skipped quickly.
set -euo pipefail
need=()
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists openssl 2>/dev/null || need+=(libssl-dev)
command -v openssl >/dev/null || need+=(openssl)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v curl >/dev/null || need+=(curl)
command -v tinyproxy >/dev/null || need+=(tinyproxy)      # HTTP proxy + CONNECT with Basic auth (proxy tests)
command -v microsocks >/dev/null || need+=(microsocks)    # SOCKS5 with RFC 1929 auth (proxy tests)
# Apache httpd with mod_auth_digest and a 2-second nonce lifetime (ApacheDigestTests: stale nonces
# answered on every connection of a segmented download).
command -v apache2 >/dev/null || [ -x /usr/sbin/apache2 ] || need+=(apache2)
# squid with only Digest proxy authentication, absolute-form GET and CONNECT (SquidDigestProxyTests).
command -v squid >/dev/null || [ -x /usr/sbin/squid ] || need+=(squid)
command -v nft >/dev/null || [ -x /usr/sbin/nft ] || need+=(nftables)   # Happy Eyeballs test: drop SYNs in a netns
# The attacker suite plays another local user (setpriv --reuid=65534, user nobody) and starts the daemon
# under a low descriptor limit (prlimit): both from util-linux.
{ command -v setpriv >/dev/null && command -v prlimit >/dev/null; } || need+=(util-linux)
command -v ip >/dev/null || [ -x /usr/sbin/ip ] || need+=(iproute2)
# Fleet tests (Fleet/Tests/FleetTests, Scripts/test-fleet.sh): a private PostgreSQL server started from /usr/lib/postgresql/*/bin.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
# RPC tests: a real aria2c side by side, and aria2p (PyPI) as an independent client (below).
command -v aria2c >/dev/null || need+=(aria2)
command -v python3 >/dev/null || need+=(python3 python3-pip)
# The Debian package (Scripts/package-deb.sh, Scripts/check-deb.sh): dpkg-shlibdeps for its Depends, a clean
# bookworm root to install it in, `man -w`, and systemd-analyze to verify the user unit.
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
command -v man >/dev/null || need+=(man-db)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v gdb >/dev/null || need+=(gdb)                  # Scripts/watchdog.sh: backtraces of a test process that hangs
if [ "${1:-}" = "--bench" ]; then
    command -v wget >/dev/null || need+=(wget)
    command -v aria2c >/dev/null || need+=(aria2)
    command -v axel >/dev/null || need+=(axel)
    [ -x /usr/bin/time ] || need+=(time)
fi
install_aria2p() {
    python3 -c 'import aria2p, websocket' 2>/dev/null && return 0
    echo "install-deps: installing aria2p (PyPI)"
    python3 -m pip install -q aria2p 2>/dev/null || python3 -m pip install -q --break-system-packages aria2p
}
if [ ${#need[@]} -eq 0 ]; then install_aria2p; exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${need[*]}"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
install_aria2p
