#!/usr/bin/env bash
# scripts/proxystat.sh — one redis-benchmark run through a proxy (or straight to Redis),
# with what docs/BENCHMARKS.md ("Redis's batches, counted") reads around it: requests/s,
# the proxy's system calls and context switches per request (perf stat), the proxy's and
# Redis's CPU per request (/proc/PID/stat), and Redis's commands per read (INFO stats).
#
#   ./scripts/proxystat.sh PORT REDIS_PORT [PROXY_PID] [N]
#
# PORT is where redis-benchmark connects; REDIS_PORT the Redis behind it; PROXY_PID the
# proxy's process (omit it, or give 0, for direct Redis); N the GETs (default 300000),
# from 50 clients, unpipelined. It starts nothing: start Redis and the proxies first, and
# run it against each in turn. perf (linux-perf) is needed only with a PROXY_PID.
set -euo pipefail

if (($# < 2)); then
	sed -n '2,12p' "$0" >&2
	exit 2
fi
port=$1 redis_port=$2 pid=${3:-0} n=${4:-300000}
redis_pid=$(redis-cli -p "$redis_port" info server 2>/dev/null | tr -d '\r' | awk -F: '/^process_id:/{print $2}' || true)
if [[ -z "$redis_pid" ]]; then
	echo "proxystat.sh: no Redis answers INFO on port $redis_port" >&2
	exit 1
fi

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }          # user + system, in 1/100 s
counters() { redis-cli -p "$redis_port" info stats | tr -d '\r' |
	awk -F: '/^total_commands_processed:|^total_reads_processed:/{printf "%s ", $2}'; }

read -r cmds0 reads0 <<<"$(counters)"
redis0=$(ticks "$redis_pid")
proxy0=0 perfpid=
if ((pid != 0)); then
	proxy0=$(ticks "$pid")
	perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$pid" -o "/tmp/proxystat.$$" &
	perfpid=$!
	sleep 0.1
fi
rps=$(redis-benchmark -p "$port" -c 50 -n "$n" -r 100000 -t get -P 1 --csv 2>/dev/null |
	tail -1 | cut -d, -f2 | tr -d '"')
redis1=$(ticks "$redis_pid")
read -r cmds1 reads1 <<<"$(counters)"

per() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a / b}'; }
line="port=$port rps=$rps redis_us=$(per $(((redis1 - redis0) * 10000)) "$n")"
line+=" cmds/read=$(per $((cmds1 - cmds0)) $((reads1 - reads0)))"
if [[ -n "$perfpid" ]]; then
	kill -INT "$perfpid"
	wait "$perfpid" || true
	proxy1=$(ticks "$pid")
	sys=$(awk -F, '/sys_enter/{print $1}' "/tmp/proxystat.$$")
	cs=$(awk -F, '/context-switches/{print $1}' "/tmp/proxystat.$$")
	rm -f "/tmp/proxystat.$$"
	line+=" proxy_us=$(per $(((proxy1 - proxy0) * 10000)) "$n") sys/req=$(per "$sys" "$n") cs/req=$(per "$cs" "$n")"
fi
echo "$line"
