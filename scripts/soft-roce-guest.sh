#!/usr/bin/env bash
# Soft-RoCE cases for roce-observe, run INSIDE a VM guest as root (scripts/vm.sh 7; see
# scripts/soft-roce-test.sh, which runs this and then scripts/soft-roce-check.py).
#
#   soft-roce-guest.sh BIN RESULTS [CASE...]
#
# Two network namespaces joined by a veth pair (veth-a 10.77.0.1 in rxo-a, veth-b 10.77.0.2 in
# rxo-b), an rxe device on each end (rxa, rxb). roce-observe watches veth-a live (XDP ingress +
# tc egress, --plain --no-nic) while tcpdump captures veth-a, and real RC traffic runs between
# them: perftest servers in rxo-a, clients (requesters) in rxo-b. Faults are made on rxo-b's side
# (netem loss on veth-b's egress, nftables re-marking in rxo-b's output hook), so both observers
# on veth-a see the same frames.
#
# Per case, RESULTS/CASE/ holds: live/ (roce-observe's tree with summary.json), live.log,
# capture.pcap, tcpdump.log, server.log, client.log, counters-{before,after}.txt (rdma
# statistic and sysfs hw_counters of rxa and rxb), case.env (what ran), status (ok or the
# failure). RESULTS/guest.txt: kernel, rdma system, GIDs, timings.
# Exit status: 0 when every case ran (its checks are the host's), 1 otherwise.
set -uo pipefail

BIN="${1:?usage: soft-roce-guest.sh BIN RESULTS [CASE...]}"
RES="${2:?usage: soft-roce-guest.sh BIN RESULTS [CASE...]}"
shift 2
ALL_CASES=(write_dscp26 write_tc0 send_dscp46 read_dscp26 atomic_dscp26 rc_pingpong loss_write remark_write)
[ $# -gt 0 ] && CASES=("$@") || CASES=("${ALL_CASES[@]}")

NSA=rxo-a NSB=rxo-b IPA=10.77.0.1 IPB=10.77.0.2
N=${SOFT_ROCE_N:-300}        # messages per perftest case (TCG: about 1,600 messages/s)
T_TOOL=${SOFT_ROCE_TOOL_TIMEOUT:-90}

mkdir -p "$RES"
INFO="$RES/guest.txt"
log() { printf '[guest %4ds] %s\n' "$SECONDS" "$*" | tee -a "$INFO" >&2; }

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  ip netns exec "$NSA" rdma link delete rxa 2>/dev/null
  ip netns exec "$NSB" rdma link delete rxb 2>/dev/null
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
  sync
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# Waits until FILE contains PATTERN; at most SECS seconds.
wait_for() {
  local file="$1" pat="$2" secs="$3" i
  for ((i = 0; i < secs * 5; i++)); do
    grep -q -- "$pat" "$file" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# Waits until PID exits; at most SECS seconds. 0 when it exited.
wait_pid() {
  local pid="$1" secs="$2" i
  for ((i = 0; i < secs * 5; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.2
  done
  return 1
}

# Waits until FILE's size stays the same for STABLE seconds; at most SECS seconds.
wait_stable() {
  local file="$1" stable="$2" secs="$3" last=-1 same=0 i s
  for ((i = 0; i < secs; i++)); do
    s=$(stat -c %s "$file" 2>/dev/null || echo 0)
    if [ "$s" = "$last" ]; then
      same=$((same + 1))
      [ "$same" -ge "$stable" ] && return 0
    else
      same=0
    fi
    last=$s
    sleep 1
  done
  return 1
}

# The index of the RoCE v2 GID holding IPv4 address $2 on device $1.
gid_index() {
  local dev="$1" ip="$2" hex g i
  hex=$(printf '%02x%02x:%02x%02x' ${ip//./ })
  for g in /sys/class/infiniband/"$dev"/ports/1/gids/*; do
    i=${g##*/}
    if [ "$(cat "$g" 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:$hex" ] &&
      grep -q 'v2' "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$i" 2>/dev/null; then
      echo "$i"
      return 0
    fi
  done
  return 1
}

counters() {
  local out="$1" d f
  {
    for d in rxa rxb; do
      echo "## rdma statistic show link $d/1"
      rdma statistic show link "$d/1" 2>&1
      echo "## sysfs /sys/class/infiniband/$d/ports/1/hw_counters"
      for f in /sys/class/infiniband/"$d"/ports/1/hw_counters/*; do
        [ -f "$f" ] && echo "${f##*/} $(cat "$f" 2>/dev/null)"
      done
    done
  } >"$out"
}

setup() {
  log "kernel $(uname -r)"
  modprobe rdma_rxe || { log "modprobe rdma_rxe failed"; return 1; }
  { echo "## rdma system"; rdma system show 2>&1; } >>"$INFO"
  ip netns add "$NSA" && ip netns add "$NSB" || return 1
  ip link add veth-a netns "$NSA" type veth peer name veth-b netns "$NSB" || return 1
  ip -n "$NSA" addr add "$IPA/24" dev veth-a
  ip -n "$NSB" addr add "$IPB/24" dev veth-b
  local ns
  for ns in "$NSA" "$NSB"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$NSA" link set veth-a up
  ip -n "$NSB" link set veth-b up
  ip netns exec "$NSA" rdma link add rxa type rxe netdev veth-a || { log "rdma link add rxa failed"; return 1; }
  ip netns exec "$NSB" rdma link add rxb type rxe netdev veth-b || { log "rdma link add rxb failed"; return 1; }
  # The IPv4 GIDs appear once the addresses are up; give them a moment.
  local i
  for ((i = 0; i < 50; i++)); do
    GA=$(gid_index rxa "$IPA") && GB=$(gid_index rxb "$IPB") && break
    sleep 0.2
  done
  [ -n "${GA:-}" ] && [ -n "${GB:-}" ] || { log "no RoCE v2 IPv4 GID on rxa/rxb"; return 1; }
  {
    echo "## rdma link"; rdma link show 2>&1
    echo "## gid index rxa=$GA rxb=$GB"
    echo "## veth-a"; ip -n "$NSA" -d link show veth-a
    echo "## ping"; ip netns exec "$NSB" ping -c 1 -W 5 "$IPA" 2>&1 | tail -n 2
  } >>"$INFO"
  log "rxa gid $GA, rxb gid $GB"
}

# run_case NAME SERVER_CMD CLIENT_CMD: SERVER_CMD runs in rxo-a, CLIENT_CMD in rxo-b (the peer
# address is part of it). The case's extra set-up and tear-down are the functions
# pre_NAME / post_NAME when defined.
run_case() {
  local name="$1" server="$2" client="$3"
  local d="$RES/$name" t0=$SECONDS st=ok
  rm -rf "$d" && mkdir -p "$d"
  printf 'server=%s\nclient=%s\nipa=%s\nipb=%s\nobserved=veth-a\n' "$server" "$client" "$IPA" "$IPB" >"$d/case.env"
  log "case $name: start"
  fail() { [ "$st" = ok ] && st="$1"; return 0; }
  if declare -F "pre_$name" >/dev/null; then "pre_$name" "$d" || fail "pre failed"; fi
  counters "$d/counters-before.txt"

  ip netns exec "$NSA" tcpdump -i veth-a -B 262144 -s 256 -U -w "$d/capture.pcap" >"$d/tcpdump.log" 2>&1 &
  local tcpd=$!
  PIDS+=("$tcpd")
  wait_for "$d/tcpdump.log" "listening on" 30 || fail "tcpdump did not start"

  ip netns exec "$NSA" "$BIN" --iface veth-a --out "$d/live" --plain --no-nic --interval 1s \
    >"$d/live.log" 2>&1 &
  local obs=$!
  PIDS+=("$obs")
  wait_for "$d/live.log" "attached ingress" 90 || fail "roce-observe did not attach"
  log "case $name: observers ready ($((SECONDS - t0)) s)"

  if [ "$st" = ok ]; then
    local ts=$SECONDS
    # shellcheck disable=SC2086
    timeout "$T_TOOL" ip netns exec "$NSA" $server >"$d/server.log" 2>&1 &
    local srv=$!
    sleep 2
    # shellcheck disable=SC2086
    timeout "$T_TOOL" ip netns exec "$NSB" $client >"$d/client.log" 2>&1
    local crc=$?
    wait "$srv"
    local src=$?
    echo "traffic_s=$((SECONDS - ts))" >>"$d/case.env"
    [ "$crc" = 0 ] || fail "client exit $crc"
    [ "$src" = 0 ] || fail "server exit $src"
  fi

  # Stop the observer cleanly, then the capture once its file stops growing.
  kill -INT "$obs" 2>/dev/null
  wait_pid "$obs" 60 || { fail "roce-observe did not stop"; kill -KILL "$obs" 2>/dev/null; }
  wait "$obs" 2>/dev/null
  echo "live_exit=$?" >>"$d/case.env"
  wait_stable "$d/capture.pcap" 3 60 || log "case $name: capture still growing after 60 s"
  kill -INT "$tcpd" 2>/dev/null
  wait_pid "$tcpd" 30 || kill -KILL "$tcpd" 2>/dev/null
  wait "$tcpd" 2>/dev/null
  PIDS=()
  counters "$d/counters-after.txt"
  if declare -F "post_$name" >/dev/null; then "post_$name" "$d" || fail "post failed"; fi
  [ -f "$d/live/summary.json" ] || fail "no live summary.json"
  echo "case_s=$((SECONDS - t0))" >>"$d/case.env"
  echo "$st" >"$d/status"
  log "case $name: $st ($((SECONDS - t0)) s)"
  [ "$st" = ok ]
}

# Fault cases: the sender's side (rxo-b) drops or re-marks before the wire.
pre_loss_write() { ip netns exec "$NSB" tc qdisc add dev veth-b root netem loss 2% && tc_show "$1"; }
post_loss_write() { tc_show "$1"; ip netns exec "$NSB" tc qdisc del dev veth-b root; }
tc_show() { ip netns exec "$NSB" tc -s qdisc show dev veth-b >>"$1/netem.txt" 2>&1; }
pre_remark_write() {
  ip netns exec "$NSB" nft -f - <<'EOF'
table ip remark {
  chain out {
    type filter hook output priority 0; policy accept;
    udp dport 4791 ip dscp set af41 ip ecn set ce counter
  }
}
EOF
}
post_remark_write() {
  ip netns exec "$NSB" nft list ruleset >"$1/nft.txt" 2>&1
  ip netns exec "$NSB" nft delete table ip remark
}

perf() { # perf TOOL ARGS...: server and client command lines of a perftest tool
  local tool="$1"
  shift
  SRV="$tool -d rxa -x $GA $*"
  CLI="$tool -d rxb -x $GB $* $IPA"
}

main() {
  local t0=$SECONDS ok=0 bad=0 c
  setup || { log "set-up failed"; return 1; }
  for c in "${CASES[@]}"; do
    case "$c" in
      write_dscp26) perf ib_write_bw -n "$N" -s 4096 --tclass=106 -F ;;
      write_tc0) perf ib_write_bw -n "$N" -s 1024 --tclass=0 -F ;;
      send_dscp46) perf ib_send_bw -n "$N" -s 2048 --tclass=186 -F ;;
      read_dscp26) perf ib_read_bw -n "$N" -s 4096 --tclass=106 -F ;;
      atomic_dscp26) perf ib_atomic_bw -n "$N" --tclass=106 -F ;;
      rc_pingpong)
        SRV="ibv_rc_pingpong -d rxa -g $GA -n $N -s 1024"
        CLI="ibv_rc_pingpong -d rxb -g $GB -n $N -s 1024 $IPA" ;;
      loss_write) perf ib_write_bw -n "$N" -s 4096 --tclass=106 -F ;;
      remark_write) perf ib_write_bw -n "$N" -s 4096 --tclass=106 -F ;;
      *) log "unknown case $c"; bad=$((bad + 1)); continue ;;
    esac
    if run_case "$c" "$SRV" "$CLI"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
  done
  log "guest: $ok cases ran, $bad failed to run, $((SECONDS - t0)) s"
  [ "$bad" = 0 ]
}

main
