#!/usr/bin/env bash
# bench.sh: start a throwaway `cove serve` on the managed image, run
# `cove bench` against it, and remove everything it made. Root only.
# Every listener takes a free port (port 0); the ones bound are read from
# the server's ready file.
# Usage: scripts/bench.sh IMAGES_DIR [cove bench flags...]
# BENCH_SERVER_LOG=FILE keeps the server's log there (it says why a create
# was refused when the density measure stops short).
set -euo pipefail
images=${1:?usage: scripts/bench.sh IMAGES_DIR [cove bench flags...]}
shift
bin=$(cd "$(dirname "$0")/../bin" && pwd)
dir=$(mktemp -d /var/tmp/cove-bench-XXXXXX)
chmod 711 "$dir"
name=$(basename "$dir")
cgroup=/$name
table=${name//-/_}
ready="$dir/ready.json"
url=
# The density measure holds up to 2,000 idle sandboxes (make bench), whose
# 64 MiB disks are admitted against 4 times the data disk's free space, as
# a node that expects idle sandboxes to use little of their disks (at 1, a
# disk with 59 GiB free admits some 900).
HOME="$dir/home" "$bin/cove" serve --listen 127.0.0.1:0 --gateway-port 0 --dns-port 0 \
	--ready-file "$ready" --data-dir "$dir/data" --images-dir "$images" \
	--cgroup-parent "$cgroup" --nft-table "$table" --disk-overcommit 4 >"$dir/serve.log" 2>&1 &
pid=$!
cleanup() {
	if [ -n "$url" ]; then
		export COVE_URL="$url" COVE_API_KEY
		for id in $("$bin/cove" ls --json 2>/dev/null | grep -o '"id": "sbx_[0-9a-z]*"' | cut -d'"' -f4); do
			"$bin/cove" rm "$id" >/dev/null 2>&1 || true
		done
	fi
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	nft delete table inet "$table" 2>/dev/null || true
	for d in /sys/fs/cgroup/*"$cgroup"; do rmdir "$d" 2>/dev/null || true; done
	if [ -n "${BENCH_SERVER_LOG:-}" ]; then cp "$dir/serve.log" "$BENCH_SERVER_LOG" || true; fi
	rm -rf "$dir"
}
trap cleanup EXIT
# The ready file appears, whole, once the server serves (the first start
# may build the managed image for minutes).
until [ -s "$ready" ]; do
	kill -0 "$pid" 2>/dev/null || { cat "$dir/serve.log"; exit 1; }
	sleep 0.2
done
url="http://$(grep -o '"api": *"[^"]*"' "$ready" | cut -d'"' -f4)"
COVE_API_KEY=$(cat "$dir/data/admin-api-key")
COVE_URL="$url" COVE_API_KEY="$COVE_API_KEY" "$bin/cove" bench --images-dir "$images" "$@"
