#!/usr/bin/env bash
# The install artifacts, tested as far as this machine allows (docs/install.md#tests):
#  1. the Debian package (scripts/package.sh, with the debug build's binaries, debug info
#     stripped) has its files, modes, conffiles and Depends;
#  2. it installs with dpkg into a fresh Debian 12 root (debootstrap, cached) whose base
#     packages satisfy its Depends: what the Containerfile's apt-get install does;
#  3. its systemd unit passes `systemd-analyze verify` there;
#  4. the unit's ExecStart, with /etc/default/roce-observe naming a veth, runs from that root
#     in a network namespace under exactly the unit's CapabilityBoundingSet: it attaches,
#     stops on SIGTERM and writes its flow logs under /var/lib/roce-observe; the packaged
#     roce-analyze reports on them; purge removes the conffiles and keeps the flow logs;
#  5. the Kubernetes manifest validates against the Kubernetes API schema (1.29, 1.33, 1.37,
#     strict), a misspelt field fails, its capabilities are deploy/capabilities, and its
#     container command runs like the unit's.
# Not done here: building the container image (no container engine on this machine).
#
#   scripts/package-test.sh [BIN_DIR]   default: target/debug
#
# Prints one line per check, then 'package-test: N passed, M failed'. Outside CI a machine
# that cannot run it (not root, no network for debootstrap) skips with the reason; with
# CI=true that is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bin_dir="${1:-target/debug}"
log() { printf '[package-test] %s\n' "$*" >&2; }
skip_or_fail() {
  if [ "${CI:-}" = true ]; then log "FAILED: $* (CI=true: required)"; exit 1; fi
  log "SKIPPED: $* (outside CI this test may skip; CI fails here)"; exit 0
}
[ "$(id -u)" -eq 0 ] || skip_or_fail "not root: chroot and network namespaces"
for t in debootstrap dpkg-deb objcopy setpriv unshare kubernetes-validate; do
  command -v "$t" >/dev/null || skip_or_fail "$t is missing (scripts/setup.sh installs it)"
done
for b in roce-observe roce-analyze; do
  [ -x "$bin_dir/$b" ] || skip_or_fail "$bin_dir/$b not built (cargo build --workspace)"
done

passed=0 failed=0
ok() { passed=$((passed + 1)); log "ok: $*"; }
bad() { failed=$((failed + 1)); log "FAILED: $*"; }
check() { local what="$1"; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

work=$(mktemp -d /tmp/roce-pkg-XXXX)
ns="ro-pkg-$$"
cleanup() {
  ip netns del "$ns" 2>/dev/null
  # the root's mounts were made in a private mount namespace and went with it
  rm -rf "$work"
}
trap cleanup EXIT

# 1. the package
mkdir -p "$work/bins"
for b in roce-observe roce-analyze; do objcopy --strip-debug "$bin_dir/$b" "$work/bins/$b"; done
deb=$(bash scripts/package.sh --bins "$work/bins" --out "$work/out" --compress gzip | tail -n 1)
[ -f "$deb" ] || { bad "scripts/package.sh made no package"; echo "package-test: $passed passed, $((failed)) failed"; exit 1; }
ok "package built: $(basename "$deb") ($(du -h "$deb" | cut -f1))"
info=$(dpkg-deb --info "$deb")
check "control: package, Depends on libc6 and libgcc-s1" \
  grep -q '^ Depends: libc6 (>= 2\.[0-9]*), libgcc-s1$' <<<"$info"
contents=$(dpkg-deb --contents "$deb")
modes=$(awk '{print $1, $2, $6}' <<<"$contents")
want_files=(
  "-rwxr-xr-x root/root ./usr/bin/roce-observe"
  "-rwxr-xr-x root/root ./usr/bin/roce-analyze"
  "-rw-r--r-- root/root ./lib/systemd/system/roce-observe.service"
  "-rw-r--r-- root/root ./etc/default/roce-observe"
  "-rw-r--r-- root/root ./etc/roce-observe/policy.toml"
  "drwxr-xr-x root/root ./var/lib/roce-observe/"
  "-rw-r--r-- root/root ./usr/share/doc/roce-observe/docs/install.md"
)
for w in "${want_files[@]}"; do
  check "contents: $w" grep -qxF -e "$w" <<<"$modes"
done
check "conffiles: /etc/default/roce-observe and the policy" \
  test "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)" = $'/etc/default/roce-observe\n/etc/roce-observe/policy.toml'

# 2. a fresh Debian 12 root (debootstrap once into the cache, copied for each run)
cache="${ROCE_PKG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-observe/pkg}"
base="$cache/bookworm"
if [ ! -x "$base/usr/bin/systemd-analyze" ]; then
  mkdir -p "$cache"; rm -rf "$base.tmp"
  log "debootstrap: Debian 12 (minbase and systemd) into $base"
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
  debootstrap --variant=minbase --include=systemd bookworm "$base.tmp" "${mirror:-http://deb.debian.org/debian}" \
    >"$cache/debootstrap.log" 2>&1 || skip_or_fail "debootstrap failed (network?): $cache/debootstrap.log"
  mv "$base.tmp" "$base"
fi
root="$work/root"
cp -a "$base" "$root"
cp "$deb" "$root/tmp/roce-observe.deb"
check "dpkg -i in a fresh Debian 12 root (its base satisfies Depends)" \
  chroot "$root" dpkg -i /tmp/roce-observe.deb
check "the installed roce-observe and roce-analyze run there" \
  sh -c "chroot '$root' roce-observe --version >/dev/null && chroot '$root' roce-analyze --version >/dev/null"

# 3. the unit
check "systemd-analyze verify roce-observe.service" \
  chroot "$root" systemd-analyze verify --man=no /lib/systemd/system/roce-observe.service

# 4. the unit's command, as systemd would run it, in a namespace, from the root
unit="$root/lib/systemd/system/roce-observe.service"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$unit")
granted=$(grep -v '^#' deploy/capabilities | tr '\n' ' ' | sed 's/ *$//')
check "the unit grants deploy/capabilities: $granted" test "$caps" = "$granted"
bounding=$(for c in $caps; do printf ',+%s' "$(echo "${c#CAP_}" | tr 'A-Z' 'a-z')"; done)
ip netns add "$ns"
ip -n "$ns" link add veth-a type veth peer name veth-b
ip -n "$ns" link set lo up; ip -n "$ns" link set veth-a up; ip -n "$ns" link set veth-b up
sed -i 's/^ROCE_OBSERVE_OPTS=.*/ROCE_OBSERVE_OPTS="--iface veth-b --duration 90s"/' "$root/etc/default/roce-observe"
# systemd's $VAR expansion splits on white space, as the shell's unquoted expansion does
# (it execs: call it in a subshell, `$(...)` or `&`)
run_in_root() {
  exec ip netns exec "$ns" unshare -m --propagation private sh -c '
    r="$1"; shift
    mount --rbind /sys "$r/sys" && mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" || exit 99
    exec chroot "$r" setpriv --bounding-set="-all'"$bounding"'" --inh-caps=-all sh -c "$*"
  ' sh "$root" "$@"
}
# 20 RoCE data packets at DSCP 0 from the peer while it runs (AF_PACKET)
send_roce() {
  ip netns exec "$ns" python3 -c '
import socket, struct
def csum(b):
    s = sum(struct.unpack("!10H", b))
    s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
sk = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sk.bind(("veth-a", 0))
for psn in range(20):
    bth = struct.pack("!BBHII", 0x0a, 0, 0xffff, 0x45, 0x80000000 | psn) + bytes(64) + bytes(4)
    udp = struct.pack("!HHHH", 49152, 4791, 8 + len(bth), 0) + bth
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                     bytes([10, 77, 7, 1]), bytes([10, 77, 7, 2]))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    sk.send(bytes([2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa]) + b"\x08\x00" + ip + udp)
'
}
# The frames once it has attached (a fixed wait lost the race on a loaded machine, where
# loading the programs took longer), then SIGINT, its usual stop; --duration bounds the run.
# (run_in_root execs, and so does every step after it: $! is roce-observe's own pid)
run_in_root ". /etc/default/roce-observe; exec $exec_start" >"$work/observe.log" 2>&1 &
obs=$!
for ((i = 0; i < 300; i++)); do
  grep -q "attached ingress" "$work/observe.log" && break
  kill -0 "$obs" 2>/dev/null || break
  sleep 0.2
done
if grep -q "attached ingress" "$work/observe.log"; then
  send_roce || bad "sending RoCE frames into the namespace"
  sleep 1
  kill -INT "$obs" 2>/dev/null
fi
wait "$obs"
rc=$?
out=$(cat "$work/observe.log")
check "the unit's ExecStart runs (exit $rc) under its CapabilityBoundingSet only" test "$rc" = 0
check "it attached to the veth" grep -q "attached ingress" <<<"$out"
check "it wrote summary.json under /var/lib/roce-observe/flows" test -s "$root/var/lib/roce-observe/flows/summary.json"
chroot "$root" roce-analyze report /var/lib/roce-observe/flows >"$work/report.txt" 2>&1
check "the packaged roce-analyze reports on them: the 20 packets at DSCP 0" \
  grep -q "20 data packets off the policy's DSCP" "$work/report.txt"
grep -q "20 data packets off" "$work/report.txt" || log "its report: $(head -c 2000 "$work/report.txt")"
[ "$rc" = 0 ] || log "its output: $out"

# purge: conffiles go, the flow logs stay
check "dpkg --purge removes binaries and conffiles, keeps the flow logs" sh -c "
  chroot '$root' dpkg --purge roce-observe >/dev/null &&
  ! test -e '$root/usr/bin/roce-observe' && ! test -e '$root/etc/roce-observe/policy.toml' &&
  ! test -e '$root/etc/default/roce-observe' && test -s '$root/var/lib/roce-observe/flows/summary.json'"

# 5. the Kubernetes manifest
manifest=deploy/kubernetes/daemonset.yaml
for v in 1.29.0 1.33.0 1.37.0; do
  check "kubernetes-validate --strict -k $v $manifest" kubernetes-validate --quiet --strict -k "$v" "$manifest"
done
sed 's/hostNetwork: true/hostNetwrk: true/' "$manifest" > "$work/misspelt.yaml"
check "a misspelt field fails the validation" sh -c "! kubernetes-validate --quiet --strict -k 1.33.0 '$work/misspelt.yaml' >/dev/null 2>&1"
k8s_caps=$(python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "DaemonSet":
        c = d["spec"]["template"]["spec"]["containers"][0]
        print(" ".join("CAP_" + x for x in c["securityContext"]["capabilities"]["add"]))
        print(c["args"][0])
' "$manifest")
check "the DaemonSet adds deploy/capabilities: $granted" test "$(head -n 1 <<<"$k8s_caps")" = "$granted"
k8s_cmd=$(tail -n 1 <<<"$k8s_caps")
rm -rf "$root/var/lib/roce-observe/flows"
chroot "$root" dpkg -i /tmp/roce-observe.deb >/dev/null 2>&1
out=$(run_in_root "ROCE_OBSERVE_OPTS='--iface veth-b --duration 2s'; ${k8s_cmd}" 2>&1)
rc=$?
check "the DaemonSet's command runs (exit $rc) with its capabilities" test "$rc" = 0
[ "$rc" = 0 ] || log "its output: $out"

echo "package-test: $passed passed, $failed failed"
[ "$failed" = 0 ]
