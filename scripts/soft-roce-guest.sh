#!/usr/bin/env bash
# Soft-RoCE cases for roce-observe, run INSIDE a VM guest as root (scripts/vm.sh 7; see
# scripts/soft-roce-test.sh, which runs this and then scripts/soft-roce-check.py).
#
#   soft-roce-guest.sh BIN RESULTS [CASE...]
#   soft-roce-guest.sh --list              the cases run when none is named
#
# Two network namespaces, rxo-a and rxo-b. Case number i gets its own veth pair (va<i>
# 10.77.<i>.1 in rxo-a, vb<i> 10.77.<i>.2 in rxo-b) with an rxe device on each end (rxa<i>,
# rxb<i>), so that every case has its own observer, capture and device counters. roce-observe
# watches va<i> live (XDP ingress + tc egress, --plain, with its NIC source reading rxa<i>'s counters) while tcpdump captures va<i>, and
# real RC traffic runs between them: perftest servers in rxo-a, clients (requesters) in rxo-b.
# Faults are made on rxo-b's side (netem loss or 5 ms delay on vb<i>'s egress, nftables re-marking in rxo-b's
# output hook), so both observers of va<i> see the same frames; the delay_ack cases delay va<i>'s
# own egress (the responder's ACKs: 2 ms, 20 ms), which the live observer's tc egress sees
# before the delay and tcpdump after it (the frames are the same, their times not).
#
# The observers of all cases are started together first: loading and verifying the eBPF programs
# is what takes long under TCG (30 s to a minute each), so they load while the earlier cases
# run. Each case runs in turn once its observer is attached: counters, tcpdump, traffic, SIGINT to its observer (which writes
# summary.json), the capture stopped once its file stops growing, counters again.
#
# Per case, RESULTS/CASE/ holds: live/ (roce-observe's tree with summary.json), live.log,
# capture.pcap, tcpdump.log, server.log, client.log, counters-{before,after}.txt (rdma
# statistic and sysfs hw_counters of the case's two rxe devices), case.env (what ran), status
# (ok or the failure). RESULTS/guest.txt: kernel, rdma system, GIDs, timings.
# Exit status: 0 when every case ran (their checks are the host's), 1 otherwise.
set -uo pipefail

ALL_CASES=(write_dscp26 write_tc0 send_dscp46 read_dscp26 atomic_dscp26 rc_pingpong loss_write delay_write delay_ack2 delay_ack20 remark_write qps_write qps_cm qps_err)
# `soft-roce-guest.sh --list`: the cases, one a line (what the host runs when it names none).
[ "${1:-}" = --list ] && { printf '%s\n' "${ALL_CASES[@]}"; exit 0; }
BIN="${1:?usage: soft-roce-guest.sh BIN RESULTS [CASE...]}"
RES="${2:?usage: soft-roce-guest.sh BIN RESULTS [CASE...]}"
shift 2
[ $# -gt 0 ] && CASES=("$@") || CASES=("${ALL_CASES[@]}")

NSA=rxo-a NSB=rxo-b
N=${SOFT_ROCE_N:-300}        # messages per case (TCG: about 1,600 messages/s)
T_TOOL=${SOFT_ROCE_TOOL_TIMEOUT:-90}
T_ATTACH=${SOFT_ROCE_ATTACH_TIMEOUT:-420}
QPS_D=${SOFT_ROCE_QPS_SECONDS:-45}  # seconds of traffic of the qps_* cases (under a busy TCG a
# process start alone can take 10 s)
# Their rate: software-limited, so that tcpdump under TCG keeps every packet (at full speed it
# loses some, and the capture no longer matches what the observer counted).
QPS_RATE="--rate_limit=300 --rate_units=p --rate_limit_type=SW --burst_size=1"

mkdir -p "$RES"
INFO="$RES/guest.txt"
: >"$INFO"
log() { printf '[guest %4ds] %s\n' "$SECONDS" "$*" | tee -a "$INFO" >&2; }

declare -A OBS=()  # case -> observer pid
PIDS=()            # every background process still to stop
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
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

# wait_listening NS PORT SECS: until namespace NS has a TCP listener or an rdma_cm listener on
# PORT (a server's readiness: its banner goes to a file, flushed only when it exits); at most
# SECS seconds.
wait_listening() {
  local ns="$1" port="$2" secs="$3" i
  for ((i = 0; i < secs * 5; i++)); do
    ip netns exec "$ns" ss -ltnH "sport = :$port" 2>/dev/null | grep -q . && return 0
    rdma res show cm_id 2>/dev/null | grep LISTEN | grep -q ":$port\b" && return 0
    sleep 0.2
  done
  return 1
}

# wait_intervals LOG N SECS: waits until roce-observe's LOG has N more interval lines than now;
# at most SECS seconds.
wait_intervals() {
  local file="$1" n="$2" secs="$3" base i
  base=$(grep -c 'observer::pipeline: interval ' "$file" 2>/dev/null)
  for ((i = 0; i < secs * 5; i++)); do
    [ "$(grep -c 'observer::pipeline: interval ' "$file" 2>/dev/null)" -ge $((base + n)) ] && return 0
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

# counters FILE DEV...: rdma statistic and sysfs hw_counters of each device (few processes:
# under TCG every process start costs a good fraction of a second).
counters() {
  local out="$1" d
  shift
  {
    for d in "$@"; do
      echo "## rdma statistic show link $d/1"
      timeout 20 rdma statistic show link "$d/1" 2>&1
      echo "## sysfs /sys/class/infiniband/$d/ports/1/hw_counters"
      (cd "/sys/class/infiniband/$d/ports/1/hw_counters" && grep -H . -- * 2>&1 | tr ':' ' ')
    done
  } >"$out"
}

# pair I: veth pair va<I>/vb<I> and rxe devices rxa<I>/rxb<I>; sets GA, GB (GID indices).
pair() {
  local i="$1" ipa="10.77.$1.1" ipb="10.77.$1.2" k
  ip link add "va$i" netns "$NSA" type veth peer name "vb$i" netns "$NSB" || return 1
  ip -n "$NSA" addr add "$ipa/24" dev "va$i"
  ip -n "$NSB" addr add "$ipb/24" dev "vb$i"
  ip -n "$NSA" link set "va$i" up
  ip -n "$NSB" link set "vb$i" up
  ip netns exec "$NSA" rdma link add "rxa$i" type rxe netdev "va$i" || return 1
  ip netns exec "$NSB" rdma link add "rxb$i" type rxe netdev "vb$i" || return 1
  GA="" GB=""
  for ((k = 0; k < 50; k++)); do
    GA=$(gid_index "rxa$i" "$ipa") && GB=$(gid_index "rxb$i" "$ipb") && return 0
    sleep 0.2
  done
  return 1
}

setup() {
  log "kernel $(uname -r)"
  modprobe rdma_rxe || { log "modprobe rdma_rxe failed"; return 1; }
  { echo "## rdma system"; rdma system show 2>&1; } >>"$INFO"
  ip netns add "$NSA" && ip netns add "$NSB" || return 1
  ip -n "$NSA" link set lo up
  ip -n "$NSB" link set lo up
}

# The server and client command lines of case C (number I); GA/GB set by pair.
commands() {
  local c="$1" i="$2" tool args
  case "$c" in
    write_dscp26) tool=ib_write_bw args="-n $N -s 4096 --tclass=106 -F" ;;
    write_tc0) tool=ib_write_bw args="-n $N -s 1024 --tclass=0 -F" ;;
    send_dscp46) tool=ib_send_bw args="-n $N -s 2048 --tclass=186 -F" ;;
    read_dscp26) tool=ib_read_bw args="-n $N -s 4096 --tclass=106 -F" ;;
    atomic_dscp26) tool=ib_atomic_bw args="-n $N --tclass=106 -F" ;;
    loss_write) tool=ib_write_bw args="-n $N -s 4096 --tclass=106 -F" ;;
    delay_write | delay_ack2 | delay_ack20) tool=ib_write_bw args="-n $N -s 4096 --tclass=106 -F" ;;
    remark_write) tool=ib_write_bw args="-n $N -s 4096 --tclass=106 -F" ;;
    # The QP inventory while traffic runs (see during_qps): for a duration, not a count, so that
    # the QPs live while it is read; one case out of band (GID exchange over TCP, traffic class
    # 106: DSCP 26 ECT(0), the policy's), one through rdma_cm (-R, ToS 96 by -T: DSCP 24
    # Not-ECT, off the policy).
    qps_write) tool=ib_write_bw args="-D $QPS_D -s 1024 --tclass=106 -F $QPS_RATE" ;;
    qps_cm)
      SRV="ib_write_bw -d rxa$i -R -T 96 -p $((18515 + i)) -D $QPS_D -s 1024 -F $QPS_RATE"
      CLI="ib_write_bw -d rxb$i -R -T 96 -p $((18515 + i)) -D $QPS_D -s 1024 -F $QPS_RATE 10.77.$i.1"
      return 0 ;;
    # QPs set up before the observer started, then one driven into ERR (see during_qps_err),
    # through rdma_cm for its retry count: rxe retries for ever with a retry count of 7 (which
    # perftest sets without rdma_cm), 6 gives up after 7 timeouts. The traffic runs until the
    # case stops the client.
    qps_err)
      SRV="ib_write_bw -d rxa$i -R -T 106 --retry_count=6 -p $((18515 + i)) -D $((T_ATTACH + 120)) -s 1024 -F $QPS_RATE"
      CLI="ib_write_bw -d rxb$i -R -T 106 --retry_count=6 -p $((18515 + i)) -D $((T_ATTACH + 120)) -s 1024 -F $QPS_RATE 10.77.$i.1"
      return 0 ;;
    rc_pingpong)
      SRV="ibv_rc_pingpong -d rxa$i -g $GA -n $N -s 1024"
      CLI="ibv_rc_pingpong -d rxb$i -g $GB -n $N -s 1024 10.77.$i.1"
      return 0 ;;
    *) return 1 ;;
  esac
  # A TCP port per case: perftest's out-of-band exchange, no wait for a previous one's socket.
  SRV="$tool -d rxa$i -x $GA -p $((18515 + i)) $args"
  CLI="$tool -d rxb$i -x $GB -p $((18515 + i)) $args 10.77.$i.1"
}

start_observer() {
  local c="$1" i="$2" d="$RES/$1" extra=()
  # qps_write also turns on counter binding by QP type (and off again at its exit).
  [ "$c" = qps_write ] && extra=(--qp-counters type)
  ip netns exec "$NSA" "$BIN" --iface "va$i" --out "$d/live" --plain --interval 5s \
    --max-qps 1024 "${extra[@]}" >"$d/live.log" 2>&1 &
  OBS[$c]=$!
  PIDS+=("$!")
}

# The cases whose observer starts once their QPs are set up (from their during_ step, in a
# subshell: its pid goes to RESULTS/CASE/observer.pid, its exit status to live.rc).
LATE=(qps_err)
is_late() { [[ " ${LATE[*]} " == *" $1 "* ]]; }
start_late_observer() {
  local c="$1" i="$2" d="$RES/$1"
  bash -c 'ip netns exec "$1" "$2" --iface "$3" --out "$4/live" --plain --interval 5s \
      --max-qps 1024 >"$4/live.log" 2>&1 & echo $! >"$4/observer.pid"; wait $!; echo $? >"$4/live.rc"' \
    _ "$NSA" "$BIN" "va$i" "$d" &
  wait_for "$d/observer.pid" . 10
}

# Fault cases: the sender's side (rxo-b) drops or re-marks before the wire.
# The qps_* cases: once both ends' RC QPs exist (the client connects a few seconds after it
# starts under TCG), the kernel's own listing of the QPs and their rdma_cm ids (iproute2) and
# roce-observe's (the host's whole inventory, rates over 1 s), read one after the other while the
# traffic runs; the host's check compares them.
# during_qps D I N: N connected RC QPs on each end (rdma_cm perftest sets up its own exchange QP
# first, then the data QP).
# wait_connected D I N: polls the kernel's QP listing (into D/rdma-res-qp.json) until both ends
# have N RC QPs past INIT (their remote QP and PSNs set): RTR on a responder, RTS on a
# requester; at most 60 polls.
wait_connected() {
  local d="$1" i="$2" n="$3" k a b
  for ((k = 0; k < 60; k++)); do
    timeout 30 rdma -j res show qp >"$d/rdma-res-qp.json" 2>"$d/rdma-res.log"
    a=$(grep -o "\"ifname\":\"rxa$i\",[^}]*\"type\":\"RC\",\"state\":\"RT[RS]\"" "$d/rdma-res-qp.json" | wc -l)
    b=$(grep -o "\"ifname\":\"rxb$i\",[^}]*\"type\":\"RC\",\"state\":\"RT[RS]\"" "$d/rdma-res-qp.json" | wc -l)
    [ "$a" -ge "$n" ] && [ "$b" -ge "$n" ] && break
    sleep 1
  done
  echo "qps_wait_polls=$k" >>"$d/case.env"
  [ "$k" -lt 60 ]
}

during_qps() {
  local d="$1" i="$2" n="${3:-1}"
  wait_connected "$d" "$i" "$n"
  timeout 60 "$BIN" qps --json --sample 1s >"$d/qps.json" 2>"$d/qps.log"
  echo "qps_exit=$?" >>"$d/case.env"
  timeout 30 rdma -j res show cm_id >"$d/rdma-res-cm_id.json" 2>>"$d/rdma-res.log"
  timeout 30 rdma -j res show qp >"$d/rdma-res-qp-after.json" 2>>"$d/rdma-res.log"
  # Counter binding as the kernel reports it while the observer runs, and its bound counters.
  timeout 30 rdma statistic qp mode link "rxa$i/1" >"$d/counter-mode-during.txt" 2>&1
  timeout 30 rdma statistic qp show link "rxa$i/1" >"$d/counter-show-during.txt" 2>&1
}
during_qps_write() { during_qps "$@"; }
during_qps_cm() { during_qps "$1" "$2" 2; }

# qps_err: the QPs are set up, then its observer starts (so that the probe never sees their
# set-up), reads them in RTS, and then the requester's traffic is dropped (netem loss 100 % on
# vb<i>) and the client stopped (SIGSTOP) so that it cannot destroy its QP when the error
# completes: the kernel moves the requester's data QP to ERR once its retries are spent, and the
# observer reads it there. The client is then let go (it reads its error completion and exits
# non-zero) and the server, left waiting, is stopped.
during_qps_err() {
  local rc=0
  qps_err_steps "$@" || rc=$?
  # Whatever happened: nothing of the case's traffic outlives it.
  pkill -CONT -f "^ib_write_bw -d rxb$2 "
  pkill -KILL -f "^ib_write_bw -d rxb$2 "
  pkill -INT -f "^ib_write_bw -d rxa$2 "
  return "$rc"
}
qps_err_steps() {
  local d="$1" i="$2" k cpid t
  # rdma_cm: perftest's exchange QP and the data QP on each end.
  wait_connected "$d" "$i" 2 || return 1
  t=$SECONDS
  start_late_observer qps_err "$i" || return 1
  wait_for "$d/live.log" "attached ingress" "$T_ATTACH" || { log "case qps_err: the observer did not attach"; return 1; }
  echo "observer_attach_s=$((SECONDS - t))" >>"$d/case.env"
  # Reads of the inventory with the QPs in RTS (one per interval; under a busy TCG an
  # interval's end can come late, so its log line is waited for, not a time).
  wait_intervals "$d/live.log" 3 120 || { log "case qps_err: the observer logged no intervals"; return 1; }
  cpid=$(pgrep -f "^ib_write_bw -d rxb$i ")
  [ -n "$cpid" ] || { log "case qps_err: no client to stop"; return 1; }
  echo "client_pid=$cpid" >>"$d/case.env"
  # The client is stopped, the loss starts, and the client runs for 50 ms more: what it posts
  # then is dropped and retried by the kernel, and it is stopped again long before its 7
  # timeouts are spent. (Stopped with nothing outstanding, its QP never fails; let run for
  # 0.3 s once, it read its error and destroyed its QP first.)
  kill -STOP "$cpid" || { log "case qps_err: the client is gone before the loss"; return 1; }
  ip netns exec "$NSB" tc qdisc add dev "vb$i" root netem loss 100% || return 1
  kill -CONT "$cpid"; sleep 0.05; kill -STOP "$cpid" || { log "case qps_err: the client could not be stopped"; return 1; }
  echo "loss_at_s=$SECONDS" >>"$d/case.env"
  for ((k = 0; k < 60; k++)); do
    timeout 30 rdma -j res show qp >"$d/rdma-res-qp-err.json" 2>>"$d/rdma-res.log"
    grep -q "\"ifname\":\"rxb$i\",[^}]*\"type\":\"RC\",\"state\":\"ERR\"" "$d/rdma-res-qp-err.json" && break
    sleep 1
  done
  echo "err_polls=$k" >>"$d/case.env"
  [ "$k" -lt 60 ] || { log "case qps_err: the requester's QP never reached ERR"; return 1; }
  # Two reads with the QP in ERR.
  wait_intervals "$d/live.log" 2 120 || { log "case qps_err: the observer logged no intervals"; return 1; }
  kill -CONT "$cpid"
  wait_pid "$cpid" 30 || log "case qps_err: the client did not exit after its error"
}
post_qps_err() {
  ip netns exec "$NSB" tc -s qdisc show dev "vb$2" >"$1/netem.txt" 2>&1
  ip netns exec "$NSB" tc qdisc del dev "vb$2" root
}

# After qps_write's observer exited: the counter mode it turned on is off again.
post_qps_write() {
  timeout 30 rdma statistic qp mode link "rxa$2/1" >"$1/counter-mode-after.txt" 2>&1
}

pre_loss_write() { ip netns exec "$NSB" tc qdisc add dev "vb$2" root netem loss 2%; }
post_loss_write() {
  ip netns exec "$NSB" tc -s qdisc show dev "vb$2" >"$1/netem.txt" 2>&1
  ip netns exec "$NSB" tc qdisc del dev "vb$2" root
}
pre_delay_write() { ip netns exec "$NSB" tc qdisc add dev "vb$2" root netem delay 5ms; }
post_delay_write() {
  ip netns exec "$NSB" tc -s qdisc show dev "vb$2" >"$1/netem.txt" 2>&1
  ip netns exec "$NSB" tc qdisc del dev "vb$2" root
}
# Delay on the responder's ACKs (va<i>'s egress, rxo-a): inside the ACK round trip the capture
# of va<i> shows (tcpdump sees a sent frame after the qdisc), so replay's latency is the
# responder's turnaround plus the delay (docs/latency.md).
pre_delay_ack2() { ip netns exec "$NSA" tc qdisc add dev "va$2" root netem delay 2ms; }
post_delay_ack2() {
  ip netns exec "$NSA" tc -s qdisc show dev "va$2" >"$1/netem.txt" 2>&1
  ip netns exec "$NSA" tc qdisc del dev "va$2" root
}
pre_delay_ack20() { ip netns exec "$NSA" tc qdisc add dev "va$2" root netem delay 20ms; }
post_delay_ack20() { post_delay_ack2 "$@"; }
pre_remark_write() {
  ip netns exec "$NSB" nft -f - <<EOF
table ip remark {
  chain out {
    type filter hook output priority 0; policy accept;
    oifname "vb$2" udp dport 4791 ip dscp set af41 ip ecn set ce counter
  }
}
EOF
}
post_remark_write() {
  ip netns exec "$NSB" nft list ruleset >"$1/nft.txt" 2>&1
  ip netns exec "$NSB" nft delete table ip remark
}

# run_case C I: the traffic of case C on pair I, its observer already attached (a late case's
# observer is started by its during_ step).
run_case() {
  local name="$1" i="$2" d="$RES/$1" t0=$SECONDS st=ok late=0 tt=$T_TOOL
  local obs="${OBS[$1]:-}" server="$SRV" client="$CLI"
  fail() { [ "$st" = ok ] && st="$1"; return 0; }
  # A late case's tools run until its observer has attached and its fault is read.
  is_late "$name" && late=1 tt=$((T_ATTACH + 180))
  printf 'server=%s\nclient=%s\nipa=10.77.%s.1\nipb=10.77.%s.2\nobserved=va%s\ndevices=rxa%s rxb%s\nlate_observer=%s\n' \
    "$server" "$client" "$i" "$i" "$i" "$i" "$i" "$late" >>"$d/case.env"
  log "case $name: start"
  if [ "$late" = 0 ]; then
    # Its observer was started with the others; the cases run while the later ones still load.
    wait_for "$d/live.log" "attached ingress" "$T_ATTACH" || fail "roce-observe did not attach"
    log "case $name: observer attached"
  fi
  if declare -F "pre_$name" >/dev/null; then "pre_$name" "$d" "$i" || fail "pre failed"; fi
  counters "$d/counters-before.txt" "rxa$i" "rxb$i"

  ip netns exec "$NSA" tcpdump -i "va$i" -B 262144 -s 256 -U -w "$d/capture.pcap" >"$d/tcpdump.log" 2>&1 &
  local tcpd=$!
  PIDS+=("$tcpd")
  wait_for "$d/tcpdump.log" "listening on" 30 || fail "tcpdump did not start"

  if [ "$st" = ok ]; then
    local ts=$SECONDS
    # shellcheck disable=SC2086
    timeout "$tt" ip netns exec "$NSA" $server >"$d/server.log" 2>&1 &
    local srv=$!
    # the client once the server listens (a fixed wait once lost the race under a slow VM:
    # rdma_cm rejected the client, which then crashed); its port: -p, else perftest's 18515
    local port
    port=$(sed -n 's/.* -p \([0-9][0-9]*\).*/\1/p' <<<"$server")
    wait_listening "$NSA" "${port:-18515}" 30 ||
      log "case $name: nothing listens on port ${port:-18515} after 30 s; the client starts anyway"
    echo "server_listening_s=$((SECONDS - ts))" >>"$d/case.env"
    sleep 0.5
    local during=""
    if declare -F "during_$name" >/dev/null; then
      "during_$name" "$d" "$i" &
      during=$!
    fi
    # (its output line-buffered: what it printed before a crash is in its log)
    # shellcheck disable=SC2086
    timeout "$tt" ip netns exec "$NSB" stdbuf -oL $client >"$d/client.log" 2>&1
    local crc=$?
    # perftest's rdma_cm client crashes (SIGSEGV) when its connection is refused or times out
    # under a slow VM: once, when it crashed before it connected (no remote address printed)
    # while its server still waits, it starts again against that server, said in the log and
    # case.env. Not in a late case, whose client is stopped and killed by design.
    if [ "$late" = 0 ] && [ "$crc" -ge 128 ] && kill -0 "$srv" 2>/dev/null &&
      ! grep -q "remote address" "$d/client.log"; then
      log "case $name: client crashed before connecting (exit $crc); starting it once more"
      tail -n 15 "$d/client.log" | sed "s/^/[guest] case $name: client.log: /" | tee -a "$INFO" >&2
      mv "$d/client.log" "$d/client-1.log"
      echo "client_retry_after_exit=$crc" >>"$d/case.env"
      sleep 1
      # shellcheck disable=SC2086
      timeout "$tt" ip netns exec "$NSB" stdbuf -oL $client >"$d/client.log" 2>&1
      crc=$?
    fi
    if [ -n "$during" ]; then wait "$during" || fail "during_$name failed"; fi
    wait "$srv"
    local src=$?
    echo "traffic_s=$((SECONDS - ts))" >>"$d/case.env"
    echo "client_exit=$crc" >>"$d/case.env"
    echo "server_exit=$src" >>"$d/case.env"
    # A late case's client fails by design (its QP in ERR): the host's check reads its exit.
    if [ "$late" = 0 ]; then
      [ "$crc" = 0 ] || fail "client exit $crc"
      [ "$src" = 0 ] || fail "server exit $src"
    fi
  fi
  if [ "$late" = 1 ]; then
    obs=$(cat "$d/observer.pid" 2>/dev/null)
    [ -n "$obs" ] && PIDS+=("$obs") || fail "roce-observe was not started"
  fi

  # Stop the observer cleanly, then the capture once its file stops growing.
  if [ -n "$obs" ]; then
    kill -INT "$obs" 2>/dev/null
    wait_pid "$obs" 60 || { fail "roce-observe did not stop"; kill -KILL "$obs" 2>/dev/null; }
    if [ "$late" = 1 ]; then
      wait_for "$d/live.rc" . 10
      echo "live_exit=$(cat "$d/live.rc" 2>/dev/null)" >>"$d/case.env"
    else
      wait "$obs" 2>/dev/null
      echo "live_exit=$?" >>"$d/case.env"
    fi
  fi
  wait_stable "$d/capture.pcap" 2 60 || log "case $name: capture still growing after 60 s"
  kill -INT "$tcpd" 2>/dev/null
  wait_pid "$tcpd" 30 || kill -KILL "$tcpd" 2>/dev/null
  wait "$tcpd" 2>/dev/null
  counters "$d/counters-after.txt" "rxa$i" "rxb$i"
  if declare -F "post_$name" >/dev/null; then "post_$name" "$d" "$i" || fail "post failed"; fi
  [ -f "$d/live/summary.json" ] || fail "no live summary.json"
  echo "case_s=$((SECONDS - t0))" >>"$d/case.env"
  echo "$st" >"$d/status"
  log "case $name: $st ($((SECONDS - t0)) s)"
  # A case that failed: what its tools printed, into the log CI shows (their files stay in the
  # guest's results, which CI does not keep).
  if [ "$st" != ok ]; then
    local f
    for f in client.log server.log; do
      [ -s "$d/$f" ] || { log "case $name: $f empty"; continue; }
      tail -n 15 "$d/$f" | sed "s/^/[guest] case $name: $f: /" | tee -a "$INFO" >&2
    done
  fi
  [ "$st" = ok ]
}

main() {
  local t0=$SECONDS ok=0 bad=0 c i=0
  setup || { log "set-up failed"; return 1; }
  declare -A NUM=() SRVS=() CLIS=()
  for c in "${CASES[@]}"; do
    i=$((i + 1))
    rm -rf "${RES:?}/$c" && mkdir -p "$RES/$c"
    if ! pair "$i"; then
      log "case $c: veth/rxe pair $i failed"
      echo "set-up of pair $i failed" >"$RES/$c/status"
      bad=$((bad + 1))
      continue
    fi
    if ! commands "$c" "$i"; then
      log "unknown case $c"
      echo "unknown case" >"$RES/$c/status"
      bad=$((bad + 1))
      continue
    fi
    NUM[$c]=$i SRVS[$c]="$SRV" CLIS[$c]="$CLI"
    echo "gid_a=$GA gid_b=$GB" >"$RES/$c/case.env"
    is_late "$c" || start_observer "$c" "$i"
  done
  {
    echo "## rdma link"; rdma link show 2>&1
    echo "## veth va1"; ip -n "$NSA" -d link show va1 2>&1
  } >>"$INFO"
  log "set-up done; ${#OBS[@]} observers loading"
  for c in "${CASES[@]}"; do
    [ -n "${NUM[$c]:-}" ] || continue
    SRV="${SRVS[$c]}" CLI="${CLIS[$c]}"
    if run_case "$c" "${NUM[$c]}"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
  done
  log "guest: $ok cases ran, $bad failed to run, $((SECONDS - t0)) s"
  [ "$bad" = 0 ]
}

main
