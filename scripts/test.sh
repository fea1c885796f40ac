#!/usr/bin/env bash
# scripts/test.sh — the one command that runs every check on a fresh Debian machine.
#
# It installs what the tests need and is missing (redis-server, redis-tools,
# prometheus, nutcracker, xz-utils, staticcheck), then runs, failing on the first error:
#   gofmt (fails on any diff), go vet, staticcheck, go test -race ./...
# Extra arguments are passed to `go test` (for example: ./scripts/test.sh -run Sketch).
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(redis-server redis-tools prometheus nutcracker xz-utils)
missing=()
for p in "${debs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "== installing Debian packages: ${missing[*]}"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's redis-server package starts a system instance on :6379; tests start their own
# servers on free ports and never use it, so it is left alone.

export PATH="$(go env GOPATH)/bin:$PATH"
if ! command -v staticcheck >/dev/null 2>&1; then
	echo "== installing staticcheck"
	go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi

echo "== gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt would change these files:"
	echo "$unformatted"
	exit 1
fi

echo "== go vet"
go vet ./...

echo "== staticcheck"
staticcheck ./...

echo "== go test -race"
go test -race -timeout 15m "$@" ./...

# bench/ is a module of its own (loadrun and its dependencies stay out of hotkeyd's):
# its checks, and its tests but the one that runs every load (-short skips it; the
# benchmarks in docs/BENCHMARKS.md run it in full).
echo "== bench: go vet, staticcheck, go test -race -short"
(cd bench && go vet ./... && staticcheck ./... && go test -race -short -timeout 5m ./...)
