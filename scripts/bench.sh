#!/usr/bin/env bash
# bench.sh: start a throwaway `cove serve` on the managed image, run
# `cove bench` against it, and remove everything it made. Root only.
# Usage: scripts/bench.sh IMAGES_DIR [cove bench flags...]
set -euo pipefail
images=${1:?usage: scripts/bench.sh IMAGES_DIR [cove bench flags...]}
shift
bin=$(cd "$(dirname "$0")/../bin" && pwd)
dir=$(mktemp -d /var/tmp/cove-bench-XXXXXX)
chmod 711 "$dir"
port=$((20000 + RANDOM % 20000))
cgroup=/cove-bench-$(basename "$dir")
HOME="$dir/home" "$bin/cove" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" \
	--images-dir "$images" --cgroup-parent "$cgroup" >"$dir/serve.log" 2>&1 &
pid=$!
cleanup() {
	export COVE_URL="http://127.0.0.1:$port" COVE_API_KEY
	for id in $("$bin/cove" ls --json 2>/dev/null | grep -o '"id": "sbx_[0-9a-z]*"' | cut -d'"' -f4); do
		"$bin/cove" rm "$id" >/dev/null 2>&1 || true
	done
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for d in /sys/fs/cgroup/*"$cgroup"; do rmdir "$d" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 1 3000); do
	curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$dir/serve.log"; exit 1; }
	sleep 0.2
done
COVE_API_KEY=$(cat "$dir/data/admin-api-key")
COVE_URL="http://127.0.0.1:$port" COVE_API_KEY="$COVE_API_KEY" "$bin/cove" bench --images-dir "$images" "$@"
