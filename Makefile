# cove: two commands on a fresh Debian machine, as root:
#   make run    installs what the service needs, builds, and serves on 127.0.0.1:7070
#   make test   installs what the tests need, builds, and runs every test
SHELL := /bin/bash
GO ?= go
DATA_DIR ?= /var/lib/cove
LISTEN ?= 127.0.0.1:7070
# The managed image is built once and reused, by the service and the tests.
TEST_IMAGES ?= /var/cache/cove/images
# The Python SDK's dependencies at the upper end of its ranges (Debian's
# newest stable release's), fetched once by scripts/pydeps-newest.sh.
PYDEPS_NEWEST ?= /var/cache/cove/pydeps/trixie
DEB_PACKAGES := runc nftables debootstrap debian-archive-keyring busybox-static e2fsprogs iproute2 util-linux ca-certificates curl
# TEST_DEB_PACKAGES are what the SDKs' tests run on besides: Debian's Python
# (the Python SDK's dependencies, pytest, and venv to install it into),
# Node with npm for the TypeScript SDK, and Chromium for the console's
# test, and PostgreSQL for the postgres store's tests (a throwaway cluster
# each, internal/testsupport/pgserver). npm is installed only where no npm is
# on PATH: a Node package that carries npm itself conflicts with Debian's.
TEST_DEB_PACKAGES := python3 python3-venv python3-pip python3-setuptools python3-wheel python3-httpx python3-websockets python3-pytest python3-build python3-pathspec nodejs chromium postgresql-15 tmux
# systemd gives the units' test systemd-analyze (it verifies them, starts nothing).
TEST_DEB_PACKAGES += systemd
# libnss3-tools gives certutil: the TLS test trusts its own CA in a Chromium
# profile's NSS database, as a user trusts a private CA.
TEST_DEB_PACKAGES += libnss3-tools
# zstd is cove bench's baseline for sleep and wake (tar | zstd, zstd -d | tar).
TEST_DEB_PACKAGES += zstd

.PHONY: all build dist deps test-deps install-debs install run test test-unit test-repeat check-elf cross fuzz bench load clean openapi e2b-proto

all: build

# build first builds the web console (console/, TypeScript bundled with
# esbuild) into internal/console/dist, which the binary embeds; it reruns
# only when the console's sources changed.
CONSOLE_SRC := $(wildcard console/src/* console/src/*/* sdk/typescript/src/*) console/package.json console/package-lock.json console/build.mjs console/tsconfig.json sdk/typescript/package-lock.json

# VERSION is the newest tag, or dev; COMMIT the checkout's commit
# (`cove version` prints both).
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git describe --always --dirty --exclude '*' 2>/dev/null || echo unknown)

build: internal/console/dist/index.html
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-X github.com/cove-dev/cove/internal/cli.version=$(VERSION) -X github.com/cove-dev/cove/internal/cli.commit=$(COMMIT)' -o bin/cove ./cmd/cove
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/cove-agent ./cmd/cove-agent

internal/console/dist/index.html: $(CONSOLE_SRC)
	@command -v npm >/dev/null || { echo "npm is missing: 'make deps' installs it"; exit 1; }
	cd sdk/typescript && npm ci --no-audit --no-fund --ignore-scripts
	cd console && npm ci --no-audit --no-fund && npm run build

# deps installs the Debian packages cove runs on, only those missing;
# test-deps those its tests need too.
deps:
	@$(MAKE) --no-print-directory install-debs PACKAGES="$(DEB_PACKAGES)"
	@command -v npm >/dev/null || $(MAKE) --no-print-directory install-debs PACKAGES="nodejs npm"
	@command -v $(GO) >/dev/null || { echo "Go is missing: install Go 1.22 or newer (it fetches the toolchain go.mod names)"; exit 1; }

test-deps: deps
	@$(MAKE) --no-print-directory install-debs PACKAGES="$(TEST_DEB_PACKAGES)"
	@command -v npm >/dev/null || $(MAKE) --no-print-directory install-debs PACKAGES=npm

install-debs:
	@missing=""; for p in $(PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

run: deps build
	bin/cove serve --data-dir $(DATA_DIR) --listen $(LISTEN)

# install puts cove and cove-agent in $(PREFIX)/bin, the systemd units of
# deploy/systemd in $(UNITDIR) (their ExecStart pointed at that binary) and
# docs/fleet.md, which they name as their documentation. It enables and
# starts nothing: docs/fleet.md says which unit a host runs. DESTDIR
# stages the whole tree elsewhere (for a package).
PREFIX ?= /usr/local
UNITDIR ?= /etc/systemd/system
SYSCONFDIR ?= /etc
UNITS := cove.service cove-control.service cove-node.service
install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)$(PREFIX)/share/doc/cove
	install -m 0755 bin/cove bin/cove-agent $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 docs/fleet.md $(DESTDIR)$(PREFIX)/share/doc/cove/fleet.md
	@# The commented example config, never over an operator's own file.
	install -d $(DESTDIR)$(SYSCONFDIR)/cove
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/cove/cove.toml ]; then echo "kept $(DESTDIR)$(SYSCONFDIR)/cove/cove.toml"; \
	else install -m 0644 deploy/cove.toml $(DESTDIR)$(SYSCONFDIR)/cove/cove.toml; echo "installed $(DESTDIR)$(SYSCONFDIR)/cove/cove.toml"; fi
	@set -e; for u in $(UNITS); do \
		sed -e 's#/usr/local/bin/cove#$(PREFIX)/bin/cove#g' -e 's#/usr/local/share/doc/cove#$(PREFIX)/share/doc/cove#g' \
			deploy/systemd/$$u > $(DESTDIR)$(UNITDIR)/$$u; \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$u; \
		echo "installed $(DESTDIR)$(UNITDIR)/$$u"; \
	done
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

# dist writes the Go modules users import (api, sdk/go) as a module proxy
# in dist/goproxy, at the version of their next release: the api version
# sdk/go/go.mod requires, since the two are tagged together
# (api/vX.Y.Z and sdk/go/vX.Y.Z). `GOPROXY=file://$(CURDIR)/dist/goproxy`
# serves them to `go get` before they are published.
#
# It also writes the release: for each of ARCHES a static cove and
# cove-agent (CGO_ENABLED=0), packed by internal/release/cmd/release into
# cove_$(VERSION)_linux_<arch>.tar.gz and a .deb (installing to /usr/bin,
# units in /lib/systemd/system, /etc/cove/cove.toml a conffile), and
# SHA256SUMS over them. `make test` runs it for amd64 only.
ARCHES ?= amd64 arm64
dist: internal/console/dist/index.html
	$(GO) run ./internal/modproxy/cmd/modproxy -tree . -out dist/goproxy
	rm -rf dist/build dist/*.tar.gz dist/*.deb dist/SHA256SUMS
	@set -e; for a in $(ARCHES); do \
		echo "build linux/$$a"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags='-X github.com/cove-dev/cove/internal/cli.version=$(VERSION) -X github.com/cove-dev/cove/internal/cli.commit=$(COMMIT)' -o dist/build/linux_$$a/cove ./cmd/cove; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags='-s -w' -o dist/build/linux_$$a/cove-agent ./cmd/cove-agent; \
	done
	$(GO) run ./internal/release/cmd/release -tree . -out dist -bin dist/build -version '$(VERSION)' \
		-arch '$(shell echo $(ARCHES) | tr ' ' ,)' -mtime $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

# MODULES are the Go modules of this tree: the root uses api/ and sdk/go/
# through go.work, so `go test ./...` at the root skips their tests.
MODULES := . api sdk/go

# TEST_ENV is what the tests are told: real S3 and PostgreSQL required, the
# managed image's cache, the binaries, the newest Python dependencies.
TEST_ENV = COVE_REQUIRE_S3=1 COVE_REQUIRE_PG=1 COVE_PYDEPS_NEWEST=$(PYDEPS_NEWEST) COVE_TEST_IMAGES=$(TEST_IMAGES) COVE_BIN=$(CURDIR)/bin

# BROWSER_PACKAGES drive Chromium, which fails every request it has in
# flight whenever any address of the host changes (ERR_NETWORK_CHANGED; no
# switch turns that watch off). The other root packages add and remove
# sandboxes' interfaces all the time, so make test runs these after them,
# one package at a time.
BROWSER_PACKAGES := internal/e2e/console internal/e2e/consolefiles internal/e2e/consolelive internal/e2e/consolestorage internal/e2e/previews internal/e2e/tls

# test runs unit tests and the root integration tests against real runc,
# overlayfs and namespaces, in every module; checks that the CLI builds off
# Linux and that git holds no binary. The managed image is cached in
# $(TEST_IMAGES).
test: test-deps build check-elf cross
	$(MAKE) --no-print-directory dist ARCHES=amd64
	GO=$(GO) scripts/versitygw.sh
	COVE_PYDEPS_NEWEST=$(PYDEPS_NEWEST) scripts/pydeps-newest.sh
	@set -e; for m in $(MODULES); do echo "vet $$m"; (cd $$m && $(GO) vet ./...); done
	@set -e; for m in api sdk/go; do echo "test $$m"; (cd $$m && $(GO) test -count=1 ./...); done
	@set -e; pkgs=$$($(GO) list ./... | grep -v -x -F $(foreach p,$(BROWSER_PACKAGES),-e github.com/cove-dev/cove/$(p))); \
		echo "test ./... but $(BROWSER_PACKAGES)"; \
		$(TEST_ENV) $(GO) test -count=1 -timeout 40m $$pkgs
	$(TEST_ENV) $(GO) test -count=1 -p 1 -timeout 20m $(addprefix ./,$(BROWSER_PACKAGES))
	$(MAKE) fuzz

# ROOT_PACKAGES hold the root integration tests (real runc, overlayfs,
# nftables, namespaces).
ROOT_PACKAGES := ./internal/e2e/... ./internal/node/runtime/ ./internal/node/image/ ./internal/node/network/ ./internal/agent/... ./cmd/cove-agent/...

# test-repeat runs the root integration tests three times, to shake out
# flakes.
test-repeat: deps build
	GO=$(GO) scripts/versitygw.sh
	COVE_REQUIRE_S3=1 COVE_TEST_IMAGES=$(TEST_IMAGES) COVE_BIN=$(CURDIR)/bin $(GO) test -count=3 -timeout 90m $(ROOT_PACKAGES)

# check-elf fails when git tracks a binary.
check-elf:
	scripts/check-no-elf.sh

# cross builds the CLI for macOS and Linux on ARM: everything but
# `cove serve` builds off Linux.
cross:
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/cove
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/cove

# fuzz runs every fuzz target for a bounded number of inputs (FUZZTIME each) on
# top of its committed corpus.
FUZZTIME ?= 10000x
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "fuzz $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

# test-unit runs the unit tests of every module, and the Python SDK's
# model checks against api/openapi.json (Debian's pytest) when pytest is
# there; they need no root and no server.
test-unit:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -count=1 -short ./...); done
	@if /usr/bin/python3 -c 'import pytest' 2>/dev/null; then \
		cd sdk/python && PYTHONPATH=src /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/test_models.py tests/test_contract.py; \
	fi

# openapi rewrites the schemas of api/openapi.json (components.schemas)
# from the Go types in api/, their doc comments and schema tags; the rest
# of the document (paths, parameters, responses) is written by hand there.
# Run it after changing a type in api/: `go test ./internal/apischema/`
# (part of test and test-unit) fails while the two differ.
openapi:
	$(GO) run ./internal/apischema/cmd/openapi

# e2b-proto regenerates the Go of envd's protocol (internal/e2b/envd),
# which is checked in: it needs protoc (Debian's protobuf-compiler) and
# the two plugins at the versions of go.mod.
e2b-proto:
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOBIN=$(CURDIR)/bin $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.19.1
	cd internal/e2b/envd && PATH=$(CURDIR)/bin:$$PATH protoc --go_out=. --go_opt=paths=source_relative \
		--connect-go_out=. --connect-go_opt=paths=source_relative process/process.proto filesystem/filesystem.proto

# bench runs `cove bench` against a throwaway server on the managed image,
# then the Go benchmarks (each starts its own server on a busybox image),
# then a fleet (control plane and a remote node) against cove serve, then
# the control plane's placement at scale (100 fake nodes, 10,000
# sandboxes, one replica against two), then the gateway's injected HTTPS
# against spliced, and its CA's leaves.
bench: deps build
	@$(MAKE) --no-print-directory install-debs PACKAGES=zstd
	scripts/bench.sh $(TEST_IMAGES) --idle-target 2000
	COVE_TEST_IMAGES=$(TEST_IMAGES) COVE_BIN=$(CURDIR)/bin $(GO) test -run '^$$' -bench . -benchtime 3x ./internal/node/runtime/ ./internal/e2e/
	GO=$(GO) scripts/versitygw.sh
	COVE_REQUIRE_S3=1 COVE_TEST_IMAGES=$(TEST_IMAGES) COVE_BIN=$(CURDIR)/bin $(GO) test -run '^$$' -bench FleetVsServe -benchtime 15x ./internal/e2e/fleet/
	COVE_TEST_IMAGES=$(TEST_IMAGES) COVE_BIN=$(CURDIR)/bin $(GO) test -run '^$$' -bench Fork -benchtime 1x -timeout 60m ./internal/e2e/snapshots/
	$(GO) test -run '^$$' -bench ControlScale -benchtime 1x -timeout 30m ./internal/control/fleet/fleetscale/
	$(GO) test -run '^$$' -bench 'Inject|SandboxCALeaf' -benchtime 200x ./internal/netpolicy/

# load runs 50 sandboxes × 20 concurrent workers of commands and file
# calls for LOAD_SECONDS, then checks that nothing leaked. It counts only
# what its own server made, so it can run beside `make test`.
LOAD_SECONDS ?= 20
load: deps build
	COVE_LOAD=1 COVE_LOAD_SECONDS=$(LOAD_SECONDS) COVE_BIN=$(CURDIR)/bin $(GO) test -count=1 -timeout 30m -run '^TestLoad$$' -v ./internal/e2e/

clean:
	rm -rf bin dist console/node_modules
	find internal/console/dist -type f ! -name '.*' -delete
