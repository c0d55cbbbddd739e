#!/usr/bin/env bash
# Builds the Debian package of the command line tools (issue #45): `downloadkit` and `downloadkitd`,
# release builds with the Swift runtime linked statically (--static-swift-stdlib), so the package needs
# only Debian 12 system libraries (libc6, libssl3, libsqlite3-0, libstdc++6, libgcc-s1 …) and no Swift.
#
#   Scripts/package-deb.sh [--bin-dir DIR] [--output DIR]
#
#   --bin-dir DIR   take DIR/downloadkit and DIR/downloadkitd as built (release, --static-swift-stdlib)
#                   instead of building them; they are checked the same way (ldd: no Swift runtime)
#   --output DIR    where the .deb goes (default: .build-deb/, gitignored); its path is the last line
#                   printed on stdout
#
# The package holds: /usr/bin/downloadkit, /usr/bin/downloadkitd (stripped); their man pages generated
# by swift-argument-parser's `generate-manual` (downloadkit.1 with every subcommand, downloadkitd.1);
# bash, zsh and fish completions from `--generate-completion-script`; the systemd user unit
# /usr/lib/systemd/user/downloadkitd.service made from contrib/systemd/downloadkitd.service (its ExecStart
# pointed at /usr/bin/downloadkitd, nothing else changed); /usr/share/doc/downloadkit/{copyright,
# changelog.Debian.gz}. Version: `downloadkit --version` (DownloadKitVersion.string) plus the Debian
# revision DEB_REVISION (default 1). Depends: dpkg-shlibdeps on the two binaries, so the package is for
# the Debian release of the build host (Debian 12 here). Scripts/check-deb.sh proves it on a clean root.
#
# Environment: DEB_SCRATCH (scratch path of the release build, default .build-deb), DEB_REVISION,
# DEB_MAINTAINER ("Name <email>", default: git config user.name/user.email).
# Needs swift (unless --bin-dir, which still resolves the packages once for the man page generator and the
# copyright file), dpkg-dev (dpkg-shlibdeps), binutils (strip), gzip. Scripts/install-deps.sh installs them.
set -euo pipefail
trap 'echo "package-deb: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
repo="$PWD"

die() { echo "package-deb: $*" >&2; exit 1; }
usage() { echo "usage: $0 [--bin-dir DIR] [--output DIR]" >&2; exit 2; }

bin_dir=""
output="$repo/.build-deb"
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) [ $# -ge 2 ] || usage; bin_dir="$2"; shift 2 ;;
        --bin-dir=*) bin_dir="${1#*=}"; shift ;;
        --output) [ $# -ge 2 ] || usage; output="$2"; shift 2 ;;
        --output=*) output="${1#*=}"; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "package-deb: unknown argument '$1'" >&2; usage ;;
    esac
done

scratch="${DEB_SCRATCH:-$repo/.build-deb}"
tools=(downloadkit downloadkitd)

# The flags of the packaged binaries' build, in this one place: release, the Swift runtime linked statically, and
# the package trait the executables need (tools_flags, Scripts/sanitizer-flags.sh).
source "$repo/Scripts/sanitizer-flags.sh"
swift_build_flags=(-c release --static-swift-stdlib "${tools_flags[@]}")

# The one `swift build` of the packaged binaries. Prints the directory that holds them.
build_tools() {
    local tool
    for tool in "${tools[@]}"; do
        swift build "${swift_build_flags[@]}" --scratch-path "$scratch" --product "$tool" >&2 ||
            die "swift build --product $tool failed"
    done
    swift build "${swift_build_flags[@]}" --scratch-path "$scratch" --show-bin-path
}

# swift-argument-parser's manual generator, built from its checkout under the scratch path (a host tool:
# it runs here, is not packaged). It reads the built binary's `--experimental-dump-help`, so it needs no
# product declaration: it works whether `downloadkit` is a product or an executable target only. (The
# `swift package plugin generate-manual` plugin would also see a root package's executable targets, but
# it builds the whole package again in its own configuration, without --static-swift-stdlib.)
manual_generator() {
    local checkout="$scratch/checkouts/swift-argument-parser"
    [ -f "$checkout/Package.swift" ] || swift package --scratch-path "$scratch" resolve >&2 ||
        die "swift package resolve failed (needed for generate-manual)"
    [ -f "$checkout/Package.swift" ] || die "no swift-argument-parser checkout under $scratch/checkouts"
    swift build --package-path "$checkout" --scratch-path "$scratch/manual-tool" --product generate-manual \
        >"$work/generate-manual-build.log" 2>&1 ||
        { cat "$work/generate-manual-build.log" >&2; die "building generate-manual failed"; }
    echo "$(swift build --package-path "$checkout" --scratch-path "$scratch/manual-tool" --show-bin-path)/generate-manual"
}

# Fails when a binary needs the Swift runtime (or anything ldd cannot resolve) at run time.
check_static_runtime() {
    local binary="$1" libs
    libs="$(ldd "$binary")" || die "ldd $binary failed"
    if grep -Eq 'not found|libswift|libFoundation|libicu|libdispatch|libBlocksRuntime|lib_FoundationICU' <<<"$libs"; then
        echo "$libs" >&2
        die "$binary needs the Swift runtime or a missing library (build with --static-swift-stdlib)"
    fi
}

for command in dpkg-deb dpkg-shlibdeps strip gzip; do
    command -v "$command" >/dev/null || die "$command not found (Scripts/install-deps.sh installs it)"
done

if [ -z "$bin_dir" ]; then
    echo "package-deb: building ${tools[*]} (swift build ${swift_build_flags[*]})" >&2
    bin_dir="$(build_tools)"
fi
for tool in "${tools[@]}"; do
    [ -x "$bin_dir/$tool" ] || die "$bin_dir/$tool is not an executable"
    check_static_runtime "$bin_dir/$tool"
done

version="$("$bin_dir/downloadkit" --version)" || die "downloadkit --version failed"
[[ "$version" =~ ^[0-9][0-9A-Za-z.+~]*$ ]] || die "downloadkit --version printed '$version', not a version"
deb_version="$version-${DEB_REVISION:-1}"
arch="$(dpkg --print-architecture)"
maintainer="${DEB_MAINTAINER:-$(git config user.name) <$(git config user.email)>}"
[[ "$maintainer" =~ ^[^\<]+\ \<[^\>]+@[^\>]+\>$ ]] || die "maintainer '$maintainer' is not 'Name <email>' (set DEB_MAINTAINER)"
# Timestamps from the commit, so two packages of one commit are the same bytes (dpkg-deb reads it too).
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"
commit="$(git rev-parse --short=12 HEAD)"
[ -z "$(git status --porcelain --untracked-files=no)" ] || commit="$commit (with uncommitted changes)"

work="$(mktemp -d /tmp/dk-deb.XXXXXX)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
doc="$root/usr/share/doc/downloadkit"
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/man/man1" "$doc" \
    "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d" "$root/usr/lib/systemd/user"

# Binaries, stripped.
for tool in "${tools[@]}"; do
    strip --strip-all -o "$root/usr/bin/$tool" "$bin_dir/$tool"
    chmod 0755 "$root/usr/bin/$tool"
done

# Man pages: one page per tool, subcommands included (`man downloadkit` covers `downloadkit get` …).
generator="$(manual_generator)"
manual_date="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)"
for tool in "${tools[@]}"; do
    "$generator" "$root/usr/bin/$tool" --date "$manual_date" --output-directory "$work" >&2 ||
        die "generate-manual failed for $tool"
    [ -s "$work/$tool.1" ] || die "generate-manual wrote no $tool.1"
    # A blank line (a paragraph break in a command's discussion) is `.Pp` in mdoc; groff warns on blanks.
    sed 's/^$/.Pp/' "$work/$tool.1" | gzip -9n >"$root/usr/share/man/man1/$tool.1.gz"
done

# Shell completions where Debian's bash-completion, zsh and fish look for them.
for tool in "${tools[@]}"; do
    # Sourced by bash-completion, not run: without the #! line the script starts with.
    "$root/usr/bin/$tool" --generate-completion-script bash | sed '1{/^#!/d}' \
        >"$root/usr/share/bash-completion/completions/$tool"
    "$root/usr/bin/$tool" --generate-completion-script zsh >"$root/usr/share/zsh/vendor-completions/_$tool"
    "$root/usr/bin/$tool" --generate-completion-script fish >"$root/usr/share/fish/vendor_completions.d/$tool.fish"
done

# The systemd user unit: contrib's file with the packaged binary's path, the only difference.
unit_source="contrib/systemd/downloadkitd.service"
unit="$root/usr/lib/systemd/user/downloadkitd.service"
sed 's|^ExecStart=%h/\.local/bin/downloadkitd |ExecStart=/usr/bin/downloadkitd |' "$unit_source" >"$unit"
grep -q '^ExecStart=/usr/bin/downloadkitd ' "$unit" ||
    die "$unit_source: no 'ExecStart=%h/.local/bin/downloadkitd …' line to point at /usr/bin/downloadkitd"

# changelog.Debian: one entry for this build.
{
    echo "downloadkit ($deb_version) unstable; urgency=medium"
    echo
    echo "  * Built from commit $commit"
    echo "    with swift build ${swift_build_flags[*]}."
    echo
    echo " -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$doc/changelog.Debian.gz"

# copyright (machine-readable format): this project, and in the header every package of the resolved
# dependency graph (the binaries link the Swift runtime and a subset of them statically) with the license
# its LICENSE file states.
license_of() {  # DIR: the SPDX name of the license in DIR's LICENSE file, or "see upstream"
    local file
    file="$(find "$1" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'COPYING*' \) | sort | sed -n 1p)"
    if [ -z "$file" ]; then echo "see upstream"
    elif grep -q 'Runtime Library Exception' "$file"; then echo "Apache-2.0 with Runtime Library Exception"
    elif grep -q 'Apache License' "$file" && grep -q 'Version 2.0' "$file"; then echo "Apache-2.0"
    elif grep -q 'Permission is hereby granted, free of charge' "$file"; then echo "MIT"
    else echo "see upstream"
    fi
}
years="$(git log --reverse --format=%ad --date=format:%Y | sed -n 1p)"
[ "$years" = "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)" ] || years="$years-$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)"
swift_version="$(swift --version 2>/dev/null | sed -n 's/.*Swift version \([^ ]*\).*/\1/p' | sed -n 1p)"
{
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: DownloadKit"
    echo "Comment: /usr/bin/downloadkit and /usr/bin/downloadkitd link statically the Swift runtime and"
    echo " Foundation (Swift ${swift_version:-toolchain}: Apache-2.0 with Runtime Library Exception,"
    echo " https://swift.org/LICENSE.txt) and a subset of these Swift packages (Apache-2.0: see"
    echo " /usr/share/common-licenses/Apache-2.0; MIT and others: the package's LICENSE file):"
    for checkout in "$scratch"/checkouts/*/; do
        [ -d "$checkout" ] || continue
        echo "  $(basename "$checkout") $(git -C "$checkout" describe --tags --always 2>/dev/null || echo '?'): $(license_of "$checkout")"
    done
    echo
    echo "Files: *"
    echo "Copyright: $years DownloadKit maintainers"
    echo "License: UNSPECIFIED"
    echo " The DownloadKit repository states no license (commit $commit)."
} >"$doc/copyright"

# Depends from the shared libraries the binaries need (dpkg-shlibdeps wants a debian/control to exist).
mkdir -p "$work/shlibs/debian"
touch "$work/shlibs/debian/control"
substvars="$(cd "$work/shlibs" && dpkg-shlibdeps -O "${tools[@]/#/$root/usr/bin/}")" || die "dpkg-shlibdeps failed"
depends="$(sed -n 's/^shlibs:Depends=//p' <<<"$substvars")"
[ -n "$depends" ] || die "dpkg-shlibdeps computed no Depends: $substvars"

find "$root" -type d -exec chmod 0755 {} +
find "$root/usr/share" -type f -exec chmod 0644 {} +
chmod 0644 "$unit"
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"
cat >"$root/DEBIAN/control" <<CONTROL
Package: downloadkit
Version: $deb_version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Section: net
Priority: optional
Description: resumable HTTP/1.1 and HTTPS downloads that never fetch a byte twice
 downloadkit downloads over HTTP/1.1 and HTTPS (OpenSSL) and resumes from the
 bytes already on disk after an interruption, a crash or a reboot: segmented
 downloads, checksums, rate limits, proxies, a download queue kept in SQLite,
 and an aria2-compatible JSON-RPC server.
 .
 downloadkitd keeps background download sessions running after the program that
 asked for them has exited; it ships as a systemd user unit
 (systemctl --user enable --now downloadkitd).
CONTROL

mkdir -p "$output"
deb="$(cd "$output" && pwd)/downloadkit_${deb_version}_${arch}.deb"
dpkg-deb --build --root-owner-group -Zxz "$root" "$deb" >&2
echo "package-deb: $(du -k "$deb" | cut -f1) KiB, Depends: $depends" >&2
echo "$deb"
