#!/usr/bin/env bash
# check-no-elf.sh: fail when git tracks an ELF file. Binaries are built by
# `make build`, never committed. Outside a git checkout there is nothing
# to check.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "check-no-elf: not a git checkout; skipped"
	exit 0
fi
export LC_ALL=C # read counts bytes
bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue # deleted in the work tree
	magic=
	IFS= read -r -N 4 magic <"$f" || true
	if [ "$magic" = $'\x7fELF' ]; then
		echo "ELF binary tracked by git: $f"
		bad=1
	fi
done < <(git ls-files -z)
exit $bad
