#!/usr/bin/env bash
# The VM rig: boots one of Debian's kernels under QEMU with this machine's root file system shared
# read-only, runs one command in it as root, and brings its output and exit status back.
#
#   scripts/vm.sh KERNEL [OPTIONS] -- COMMAND [ARG...]   (also ./x vm ...)
#   scripts/vm.sh fetch [KERNEL...]                      download and unpack only (default: all)
#   scripts/vm.sh list                                   the kernels and what is cached
#
# KERNEL: 5.10 (Debian 11), 6.1 (Debian 12), 6.12 (Debian 13), 7 (Debian unstable), or a path
# to a vmlinuz whose modules sit beside it the way a Debian package lays them out.
# OPTIONS: --timeout SECONDS (default 900: the whole boot, command and power-off), --mem SIZE
# (default 2G), --cpus N (default 2), --rwdir DIR (written through to the host; repeatable; the
# current directory is not writable otherwise), --quiet (no console on success).
#
# Kernels are fetched by download only: a private apt configuration (its own source list, lists
# and cache under the cache directory) runs `apt-get update` and `apt-get download`; nothing is
# installed on this machine from another suite, and the machine's own apt sources are never
# touched. Cache: $ROCE_VM_CACHE, default ~/.cache/roce-observe/vm (kernels about 350 MB unpacked
# each). The guest runs COMMAND with `bash -c` in the current directory; its stdout and stderr
# come back as they are, the kernel console goes to $ROCE_VM_CACHE/console-KERNEL-PID.log (kept,
# and its tail printed, when the command fails or the VM does not come back; removed otherwise),
# and the exit status is COMMAND's: 124 when the time ran out, 125 when the VM never ran it
# (after 3 boots: a boot that dies or hangs before the command starts is retried).
# KVM is used when the CPU offers it and ROCE_VM_KVM is not 0 (this project's build machines
# expose a /dev/kvm that QEMU cannot use: it is probed, not trusted), else QEMU's TCG.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${ROCE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-observe/vm}"
KERNELS=(5.10 6.1 6.12 7)
log() { printf '[vm] %s\n' "$*" >&2; }
die() { printf '[vm] error: %s\n' "$*" >&2; exit 2; }

# Which suite serves a kernel line, and the pattern of its image package's name.
suite_of() {
  case "$1" in
    5.10) echo "debian-security bullseye-security" ;;
    6.1) echo "debian-security bookworm-security" ;;
    6.12) echo "debian-security trixie-security" ;;
    7) echo "debian sid" ;;
    *) return 1 ;;
  esac
}
pattern_of() {
  case "$1" in
    5.10) echo '^linux-image-5\.10\.0-[0-9]+-amd64$' ;;
    6.1) echo '^linux-image-6\.1\.0-[0-9]+-amd64$' ;;
    6.12) echo '^linux-image-6\.12\.[0-9]+\+deb13-amd64$' ;;
    7) echo '^linux-image-7\.[0-9]+\.[0-9]+\+deb14-amd64$' ;;
  esac
}

# Host packages: QEMU, what virtme-ng needs, and what the guest tests run (the guest sees this
# machine's root, so its tools are this machine's). All from the machine's own Debian suite.
host_setup() {
  local pkgs=(qemu-system-x86 busybox-static cpio kmod file python3-venv perftest ibverbs-utils
    ibverbs-providers rdmacm-utils tcpdump iproute2 nftables tshark)
  local missing=() p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt: installing ${missing[*]} (from this machine's own sources)"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  if [ ! -x "$CACHE/venv/bin/vng" ]; then
    log "pip: virtme-ng into $CACHE/venv"
    mkdir -p "$CACHE"
    /usr/bin/python3 -m venv "$CACHE/venv"
    "$CACHE/venv/bin/pip" install -q 'virtme-ng==1.42'
  fi
}

# The private apt configuration: its own sources, lists, cache and (empty) dpkg status.
apt_private() {
  local a="$CACHE/apt"
  mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$a/parts" "$a/debs"
  : >"$a/status"
  local k line
  : >"$a/sources.list.new"
  for k in "${KERNELS[@]}"; do
    read -r repo suite <<<"$(suite_of "$k")"
    line="deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/$repo $suite main"
    grep -qxF "$line" "$a/sources.list.new" || echo "$line" >>"$a/sources.list.new"
  done
  mv "$a/sources.list.new" "$a/sources.list"
  cat >"$a/apt.conf" <<EOF
Dir::Etc::SourceList "$a/sources.list";
Dir::Etc::SourceParts "$a/parts";
Dir::State::Lists "$a/lists";
Dir::State::status "$a/status";
Dir::Cache "$a/cache";
APT::Architecture "amd64";
Acquire::Languages "none";
Acquire::IndexTargets::deb::DEP-11::DefaultEnabled "false";
Debug::NoLocking "true";
APT::Sandbox::User "root";
EOF
  export APT_CONFIG="$a/apt.conf"
}

# Downloads and unpacks the newest kernel of a line into $CACHE/kernels/<line>; once.
fetch_kernel() {
  local k="$1" dir="$CACHE/kernels/$1"
  [ -f "$dir/ready" ] && return 0
  suite_of "$k" >/dev/null || die "unknown kernel '$k' (one of: ${KERNELS[*]}, or a vmlinuz path)"
  apt_private
  if [ -z "${APT_UPDATED:-}" ]; then
    log "apt (private configuration, download only): updating the kernel suites' indices"
    apt-get update -qq >/dev/null || die "apt-get update with $APT_CONFIG failed"
    APT_UPDATED=1
  fi
  local image
  image=$(apt-cache search --names-only "$(pattern_of "$k")" | awk '{print $1}' | sort -V | tail -n 1)
  [ -n "$image" ] || die "no package matching $(pattern_of "$k") in $(suite_of "$k")"
  local kv="${image#linux-image-}" pkgs=("$image") p
  # Debian 14 splits the kernel: the image package is a meta package over these.
  for p in "linux-binary-$kv" "linux-modules-$kv" "linux-base-$kv"; do
    apt-cache show "$p" >/dev/null 2>&1 && pkgs+=("$p")
  done
  log "downloading ${pkgs[*]}"
  (cd "$CACHE/apt/debs" && rm -f ./*.deb && apt-get download -q "${pkgs[@]}" >/dev/null 2>&1) \
    || die "apt-get download ${pkgs[*]} failed"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/root"
  for p in "$CACHE"/apt/debs/*.deb; do dpkg-deb -x "$p" "$dir.tmp/root"; done
  rm -f "$CACHE"/apt/debs/*.deb
  local vmlinuz mods
  vmlinuz=$(find "$dir.tmp/root" \( -path '*/boot/vmlinuz-*' -o -path '*/lib/modules/*/vmlinuz' \) | head -n 1)
  [ -n "$vmlinuz" ] || die "no vmlinuz in ${pkgs[*]}"
  mods=$(find "$dir.tmp/root" -type d -name "$kv" -path '*/lib/modules/*' | head -n 1)
  [ -n "$mods" ] || die "no modules in ${pkgs[*]}"
  depmod -b "${mods%/lib/modules/*}" "$kv" 2>/dev/null || die "depmod for $kv failed"
  ln -s "${vmlinuz#"$dir.tmp/"}" "$dir.tmp/vmlinuz"
  echo "$kv" >"$dir.tmp/version"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  touch "$dir/ready"
  log "kernel $k: $kv in $dir"
}

kvm_usable() {
  [ "${ROCE_VM_KVM:-1}" != 0 ] && [ -w /dev/kvm ] && grep -qE '\b(vmx|svm)\b' /proc/cpuinfo
}

run_vm() {
  local k="$1"
  shift
  local timeout=900 mem=2G cpus=2 quiet=0 rw=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --timeout) timeout="$2"; shift 2 ;;
      --mem) mem="$2"; shift 2 ;;
      --cpus) cpus="$2"; shift 2 ;;
      --rwdir) rw+=("--rwdir=$(cd "$2" && pwd)"); shift 2 ;;
      --quiet) quiet=1; shift ;;
      --) shift; break ;;
      *) die "unknown option '$1' (usage: scripts/vm.sh KERNEL [OPTIONS] -- COMMAND)" ;;
    esac
  done
  [ $# -gt 0 ] || die "no command (usage: scripts/vm.sh KERNEL [OPTIONS] -- COMMAND)"
  host_setup
  local vmlinuz
  if [ -f "$k" ]; then
    vmlinuz="$k"
  else
    fetch_kernel "$k"
    # The real path: virtme finds the modules by walking up from it.
    vmlinuz=$(readlink -f "$CACHE/kernels/$k/vmlinuz")
  fi
  # The command's output and status come back through a directory written through to the host.
  VM_IO=$(mktemp -d "${TMPDIR:-/tmp}/roce-vm.XXXXXX")
  trap 'rm -rf "$VM_IO"' EXIT
  local io="$VM_IO"
  printf '%s\0' "$@" >"$io/argv"
  cat >"$io/run" <<'EOF'
#!/bin/bash
io="$(dirname "$0")"
: >"$io/started"
mapfile -d '' -t argv <"$io/argv"
cd "$ROCE_VM_CWD" 2>/dev/null || cd /
"${argv[@]}" >"$io/stdout" 2>"$io/stderr" </dev/null
echo $? >"$io/rc"
sync
EOF
  chmod +x "$io/run"
  local accel=(--disable-kvm)
  kvm_usable && accel=()
  # The console of this run (kept when the command fails or the VM does not come back).
  local console="$CACHE/console-$(basename "$k")-$$.log" rc=0 start=$SECONDS attempt pid waited
  mkdir -p "$CACHE"
  # A guest that never starts the command (under TCG a boot now and then dies early, e.g. an
  # int3 oops in text patching, or hangs) is booted again, at most 3 times; each boot has its
  # own --timeout, and BOOT_S (ROCE_VM_BOOT_TIMEOUT, default 300) to start the command.
  local boot_s="${ROCE_VM_BOOT_TIMEOUT:-300}"
  for attempt in 1 2 3; do
    rm -f "$io/started" "$io/rc" "$io/stdout" "$io/stderr"
    rc=0 start=$SECONDS waited=0
    PATH="$CACHE/venv/bin:$PATH" timeout --kill-after=15 "$timeout" \
      vng --run "$vmlinuz" "${accel[@]}" --verbose -m "$mem" -p "$cpus" --rwdir="$io" "${rw[@]}" \
      --exec "ROCE_VM_CWD='$PWD' $io/run" >"$console" 2>&1 </dev/null &
    pid=$!
    while [ ! -f "$io/started" ] && kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$boot_s" ]; do
      sleep 1
      waited=$((waited + 1))
    done
    if [ ! -f "$io/started" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null
      pkill -TERM -f -- "$io" 2>/dev/null || true # QEMU itself (its command line names $io)
      wait "$pid" 2>/dev/null || true
      log "kernel $k: boot $attempt did not start the command within ${boot_s} s; console tail:"
      tail -n 15 "$console" >&2
      continue
    fi
    wait "$pid" || rc=$?
    [ -f "$io/started" ] && break
    log "kernel $k: boot $attempt ended ($rc) before the command started; console tail:"
    tail -n 15 "$console" >&2
  done
  local secs=$((SECONDS - start))
  [ -f "$io/stdout" ] && cat "$io/stdout"
  [ -f "$io/stderr" ] && cat "$io/stderr" >&2
  if [ -f "$io/rc" ]; then
    rc=$(cat "$io/rc")
    [ "$quiet" = 1 ] || log "kernel $(cat "$CACHE/kernels/$k/version" 2>/dev/null || echo "$k"): exit $rc in ${secs} s"
    if [ "$rc" = 0 ]; then
      rm -f "$console"
    else
      log "console: $console (last lines below)"
      tail -n 30 "$console" >&2
    fi
    return "$rc"
  fi
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    log "kernel $k: no result within ${timeout} s (console: $console)"
    tail -n 40 "$console" >&2
    return 124
  fi
  log "kernel $k: the VM never ran the command ($attempt boots, the last exited $rc; console: $console)"
  tail -n 40 "$console" >&2
  return 125
}

case "${1:-}" in
  fetch)
    shift
    [ $# -gt 0 ] || set -- "${KERNELS[@]}"
    host_setup
    for k in "$@"; do fetch_kernel "$k"; done
    ;;
  list)
    for k in "${KERNELS[@]}"; do
      if [ -f "$CACHE/kernels/$k/ready" ]; then
        echo "$k $(cat "$CACHE/kernels/$k/version") cached"
      else
        echo "$k $(suite_of "$k" | cut -d' ' -f2) not fetched"
      fi
    done
    ;;
  "" | -h | --help)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    run_vm "$@"
    ;;
esac
