#!/usr/bin/env bash
# scripts/bench.sh — runs hotkeyd's load benchmarks (the bench/ module's loadrun) and prints
# markdown tables, each with the command that produced it, for docs/BENCHMARKS.md.
#
#   ./scripts/bench.sh            all four: proxy, ingest, rss, latency (about 5–8 minutes)
#   ./scripts/bench.sh -quick     tiny runs that only check that everything works
#   ./scripts/bench.sh proxy …    one subcommand with its flags (cd bench && go run ./cmd/loadrun proxy -h)
#
# It installs nothing: redis-server, redis-benchmark (redis-tools) and nutcracker come
# from scripts/test.sh. Every process it starts is on loopback and is killed at the end.
set -euo pipefail
cd "$(dirname "$0")/../bench"

missing=()
for tool in redis-server redis-benchmark nutcracker; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
	echo "bench.sh: missing ${missing[*]}; run ./scripts/test.sh once, it installs them" >&2
	exit 1
fi

if (($# == 0)) || [[ "$1" == -* ]]; then
	set -- all "$@"
fi
# Build loadrun (rather than go run) so that timeout's SIGTERM reaches it: it then kills
# its servers, and they die with it in any case. timeout bounds the whole run.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/loadrun" ./cmd/loadrun
timeout --signal=TERM --kill-after=30s 15m "$tmp/loadrun" "$@"
