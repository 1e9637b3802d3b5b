#!/usr/bin/env bash
# pydeps-newest.sh puts the Python SDK's dependencies as Debian's newest
# stable release ships them (httpx, websockets, pathspec and what httpx
# needs of them) into one folder, once, so that the SDK's tests run on the
# upper end of its declared ranges as well as on Debian 12's lower end
# (internal/e2e/sdks: TestPythonSDKNewestDeps). The packages come through
# apt from the archive the machine already uses, checked against Debian's
# archive keyring; nothing is installed on the host: they are unpacked
# into $out/site, which the test copies into a virtual environment.
# COVE_PYDEPS_NEWEST names the folder (default below).
set -euo pipefail
suite=trixie
out=${COVE_PYDEPS_NEWEST:-/var/cache/cove/pydeps/$suite}
packages="python3-httpx python3-httpcore python3-anyio python3-sniffio python3-typing-extensions python3-websockets python3-pathspec"
if [ -f "$out/site/.complete" ]; then
	exit 0
fi
echo "fetching the Python SDK's newest dependencies from Debian $suite into $out (once)"
# The Debian archive the machine's own apt uses (one-line or deb822
# sources).
mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
	grep -oE 'https?://[^ ]+/debian/?( |$)' | head -n1 | tr -d ' ' || true)
if [ -z "$mirror" ]; then
	echo "pydeps-newest.sh: no Debian archive in /etc/apt/sources.list{,.d}" >&2
	exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/prefs" "$work/debs" "$work/site"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror%/} $suite main" >"$work/sources.list"
apt=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
	-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work" -o Dir::Etc::Preferences=/nonexistent
	-o "Dir::Etc::PreferencesParts=$work/prefs" -o APT::Architecture="$(dpkg --print-architecture)" -o Debug::NoLocking=1
	-o APT::Sandbox::User=root)
apt-get "${apt[@]}" -qq update
(cd "$work/debs" && apt-get "${apt[@]}" -qq download $packages)
for deb in "$work"/debs/*.deb; do
	dpkg-deb -x "$deb" "$work/x"
done
cp -r "$work"/x/usr/lib/python3/dist-packages/. "$work/site/"
(cd "$work/debs" && ls *.deb) >"$work/site/.complete"
mkdir -p "$(dirname "$out")"
rm -rf "$out.tmp" && mkdir -p "$out.tmp" && cp -r "$work/site" "$out.tmp/site" && rm -rf "$out" && mv "$out.tmp" "$out"
