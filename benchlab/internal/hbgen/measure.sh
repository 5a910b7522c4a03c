#!/bin/sh
# measure.sh ROLLCALL_BINARY [SESSIONS_PER_GENERATOR] [PORT]
#
# Starts a --dev agent, connects two hbgen processes of SESSIONS_PER_GENERATOR
# heartbeating sessions each (default 9990: 19,980 in all, as many as the
# agent's 20,000 file descriptors hold), and prints the agent's VmRSS before
# and after, the RSS per session, and the agent's CPU per heartbeat over a
# 30 s window. Build hbgen first: go -C benchlab build -o /tmp/hbgen ./internal/hbgen
# ROLLCALL_ARGS adds agent flags (e.g. ROLLCALL_ARGS=--io-uring=false for epoll).
set -eu
bin=$1
per=${2:-9990}
port=${3:-17400}
gen=${HBGEN:-/tmp/hbgen}
addr=127.0.0.1:$port
g1= g2=
$bin agent --dev --name hbbench --client-addr "$addr" --http-addr "" --gossip-addr "" \
	--max-connections 30000 --max-connections-per-ip 1000 --log-level error ${ROLLCALL_ARGS:-} &
agent=$!
trap 'kill $agent $g1 $g2 2>/dev/null' EXIT
sleep 2
rss() { awk '/VmRSS/ {print $2}' /proc/$agent/status; }
cpu() { awk '{print $14 + $15}' /proc/$agent/stat; }
before=$(rss)
out=$(mktemp -d)
$gen -addr "$addr" -n "$per" -src 127.0.1.1 -ips 100 -user a >"$out/g1" 2>&1 &
g1=$!
$gen -addr "$addr" -n "$per" -src 127.0.2.1 -ips 100 -user b >"$out/g2" 2>&1 &
g2=$!
for i in $(seq 120); do
	if grep -q ready "$out/g1" && grep -q ready "$out/g2"; then break; fi
	if ! kill -0 $g1 2>/dev/null || ! kill -0 $g2 2>/dev/null; then cat "$out/g1" "$out/g2"; exit 1; fi
	sleep 1
done
grep -q ready "$out/g1" && grep -q ready "$out/g2" || { cat "$out/g1" "$out/g2"; exit 1; }
sleep 20 # several heartbeat rounds, a few GCs
after=$(rss)
c0=$(cpu)
sleep 30
c1=$(cpu)
after2=$(rss)
sessions=$((2 * per))
tck=$(getconf CLK_TCK)
echo "sessions=$sessions rss_before_kB=$before rss_after_kB=$after rss_after30s_kB=$after2"
awk -v b="$before" -v a="$after2" -v s="$sessions" 'BEGIN { printf "rss_per_session_B=%.0f\n", (a - b) * 1024 / s }'
# heartbeats in the window: sessions / 5 s * 30 s
awk -v c0="$c0" -v c1="$c1" -v t="$tck" -v s="$sessions" 'BEGIN { hb = s / 5 * 30; printf "cpu_s=%.2f hb=%d cpu_us_per_hb=%.2f\n", (c1 - c0) / t, hb, (c1 - c0) / t / hb * 1e6 }'
tail -n 1 "$out/g1" "$out/g2" | grep heartbeats || true
rm -rf "$out"
