#!/usr/bin/env bash
# versitygw.sh installs versitygw, the S3 server the tests of the S3 save
# store run against, into /var/cache/cove/bin once; later runs find it
# there and do nothing. COVE_VERSITYGW names another binary to use.
set -euo pipefail
version=v1.8.0
bin=${COVE_VERSITYGW:-/var/cache/cove/bin/versitygw}
if [ -x "$bin" ]; then
	exit 0
fi
if [ -n "${COVE_VERSITYGW:-}" ]; then
	echo "COVE_VERSITYGW=$COVE_VERSITYGW is not an executable" >&2
	exit 1
fi
echo "installing versitygw $version into /var/cache/cove/bin (once)"
mkdir -p /var/cache/cove/bin
GOBIN=/var/cache/cove/bin CGO_ENABLED=0 ${GO:-go} install "github.com/versity/versitygw/cmd/versitygw@$version"
