#!/usr/bin/env bash
# gpu-check.sh: the manual check of a GPU node. On a host with an NVIDIA
# GPU whose CDI spec is in place (`nvidia-ctk cdi generate --output
# /etc/cdi/nvidia.yaml`), it runs `nvidia-smi` as a GPU workload through
# the API with the CLI and prints its output; it exits with the
# workload's status.
#
# With COVE_URL and COVE_API_KEY set it uses that server (its team needs
# the gpu admission). Otherwise (root only) it starts a throwaway
# `cove serve` on IMAGES_DIR (default /var/lib/cove/images) reading the
# CDI specs in CDI_DIRS (default /etc/cdi,/var/run/cdi), and removes
# everything it made afterwards.
# Usage: scripts/gpu-check.sh [IMAGES_DIR]
set -euo pipefail
bin=$(cd "$(dirname "$0")/../bin" && pwd)
cdi_dirs=${CDI_DIRS:-/etc/cdi,/var/run/cdi}

if [ -z "${COVE_URL:-}" ] || [ -z "${COVE_API_KEY:-}" ]; then
	[ "$(id -u)" = 0 ] || { echo "gpu-check: run as root, or set COVE_URL and COVE_API_KEY" >&2; exit 2; }
	images=${1:-/var/lib/cove/images}
	dir=$(mktemp -d /var/tmp/cove-gpu-check-XXXXXX)
	chmod 711 "$dir"
	name=$(basename "$dir")
	cgroup=/$name
	table=${name//-/_}
	ready="$dir/ready.json"
	HOME="$dir/home" "$bin/cove" serve --listen 127.0.0.1:0 --gateway-port 0 --dns-port 0 \
		--ready-file "$ready" --data-dir "$dir/data" --images-dir "$images" --warm-pool 0 \
		--cdi-spec-dirs "$cdi_dirs" --cgroup-parent "$cgroup" --nft-table "$table" >"$dir/serve.log" 2>&1 &
	pid=$!
	cleanup() {
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		nft delete table inet "$table" 2>/dev/null || true
		for d in /sys/fs/cgroup/*"$cgroup" /sys/fs/cgroup/*/*"$cgroup"; do rmdir "$d"/* "$d" 2>/dev/null || true; done
		rm -rf "$dir"
	}
	trap cleanup EXIT
	until [ -s "$ready" ]; do
		kill -0 "$pid" 2>/dev/null || { cat "$dir/serve.log"; exit 1; }
		sleep 0.2
	done
	# What the node found in the CDI specs.
	grep -o '"msg":"gpus"[^}]*' "$dir/serve.log" || true
	if grep -q '"msg":"gpus".*"count":0' "$dir/serve.log"; then
		echo "gpu-check: no GPUs in the CDI specs of $cdi_dirs; run: nvidia-ctk cdi generate --output /etc/cdi/nvidia.yaml" >&2
		exit 1
	fi
	export COVE_URL="http://$(grep -o '"api": *"[^"]*"' "$ready" | cut -d'"' -f4)"
	COVE_API_KEY=$(cat "$dir/data/admin-api-key")
	export COVE_API_KEY
fi

# nvidia-smi comes into the container from the host through the CDI
# spec's mounts; the workload waits at most 2 minutes for a free GPU.
set +e
"$bin/cove" workloads submit --gpus 1 --max-queue 120 --timeout 300 --follow -- nvidia-smi
status=$?
set -e
"$bin/cove" workloads list --state exited,failed,cancelled | tail -n 3
echo "gpu-check: nvidia-smi workload exited with status $status"
exit "$status"
