#!/usr/bin/env bash
# Soft-RoCE end to end: roce-observe live on a veth carrying real rxe RC traffic in a VM guest
# (kernel 7.x: rxe between namespaces carries traffic there, not on 6.12), checked against
# tshark's decode of a capture of the same veth and against a replay of that capture.
#
#   scripts/soft-roce-test.sh ROCE_OBSERVE_BINARY [--results DIR] [--timeout S] [CASE...]
#
# Builds nothing. Runs scripts/vm.sh 7 with a results directory written through to the host,
# scripts/soft-roce-guest.sh inside (cases: see that script), then scripts/soft-roce-check.py
# here. Cases the guest never finished because the VM ended early run once more in a new VM
# (said in the output). The last line is `soft-roce: N passed, M failed`. Without the rig (QEMU, a cached or
# fetchable kernel 7) it skips with exit 0, except with CI=true, where that is a failure.
# Results default to a new directory under ${TMPDIR:-/tmp}; each case keeps its capture, the live
# and replay trees, logs and the rxe counters there.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
BIN="${1:-}"
[ -n "$BIN" ] && [ "${BIN#-}" = "$BIN" ] || usage
shift
RES="" TIMEOUT=1800 CASES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --results) RES="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    -h | --help) usage ;;
    *) CASES+=("$1"); shift ;;
  esac
done
[ -x "$BIN" ] || { echo "soft-roce: $BIN is not an executable roce-observe" >&2; echo "soft-roce: 0 passed, 1 failed"; exit 1; }
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"

skip() {
  if [ "${CI:-}" = true ]; then
    echo "soft-roce: the VM rig is missing: $* (CI=true: a failure)" >&2
    echo "soft-roce: 0 passed, 1 failed"
    exit 1
  fi
  echo "soft-roce: skipped: the VM rig is missing: $* (scripts/vm.sh fetch 7 sets it up)" >&2
  echo "soft-roce: 0 passed, 0 failed (skipped)"
  exit 0
}
VM="$ROOT/scripts/vm.sh"
[ -x "$VM" ] || skip "no $VM"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
for t in tshark python3; do command -v "$t" >/dev/null || skip "no $t on this host"; done
if ! "$VM" list 2>/dev/null | grep -q '^7 .*cached'; then
  [ "${CI:-}" = true ] || skip "kernel 7 not in the cache"
fi

if [ -z "$RES" ]; then
  RES=$(mktemp -d "${TMPDIR:-/tmp}/soft-roce.XXXXXX")
else
  mkdir -p "$RES"
fi
RES="$(cd "$RES" && pwd)"
echo "soft-roce: results in $RES" >&2

# The cases asked for, or all the guest script runs.
WANT=("${CASES[@]}")
[ ${#WANT[@]} -gt 0 ] || mapfile -t WANT < <(bash "$ROOT/scripts/soft-roce-guest.sh" --list)
# unran: the cases of WANT the guest never finished (no status file: the VM died or ran out of
# time during them, or before them).
unran() {
  local c
  UNRAN=()
  for c in "${WANT[@]}"; do [ -f "$RES/$c/status" ] || UNRAN+=("$c"); done
}
# guest WHICH CASE...: one VM running the guest script on CASE...; sets vm_rc.
guest() {
  local which="$1" start=$SECONDS s
  shift
  vm_rc=0
  "$VM" 7 --timeout "$TIMEOUT" --mem 3G --rwdir "$RES" -- \
    bash "$ROOT/scripts/soft-roce-guest.sh" "$BIN" "$RES" "$@" || vm_rc=$?
  s=$((SECONDS - start))
  echo "soft-roce: ${which}VM run $s s ($(awk "BEGIN{printf \"%.1f\", $s/60}") min), exit $vm_rc" >&2
}
guest "" "${WANT[@]}"
unran
# A guest that ended before every case had run (under TCG a kernel now and then oopses, as vm.sh
# says of boots; its console's tail is printed above) runs the cases it never finished once more,
# in a new VM; a case that ran and failed is never run again.
# Not after a run that ran out of time (124): a guest that slow would run out again.
if [ "$vm_rc" != 0 ] && [ "$vm_rc" != 124 ] && [ ${#UNRAN[@]} -gt 0 ]; then
  echo "soft-roce: the VM ended (exit $vm_rc) before ${#UNRAN[@]} of ${#WANT[@]} cases had run (${UNRAN[*]}); running them once more in a new VM (the first guest's log: $RES/guest-1.txt)" >&2
  mv "$RES/guest.txt" "$RES/guest-1.txt" 2>/dev/null
  guest "second " "${UNRAN[@]}"
fi
if [ "$vm_rc" = 124 ] || [ "$vm_rc" = 125 ]; then
  # The VM did not come back, or never ran the guest script: no case result to check.
  if ! ls "$RES"/*/case.env >/dev/null 2>&1; then
    echo "soft-roce: the VM run failed (exit $vm_rc) before any case ran"
    echo "soft-roce: 0 passed, 1 failed"
    exit 1
  fi
fi

python3 "$ROOT/scripts/soft-roce-check.py" --bin "$BIN" "$RES" "${CASES[@]}"
rc=$?
# A guest that failed without leaving a failed case behind (set-up) is a failure too.
if [ "$vm_rc" != 0 ] && [ "$rc" = 0 ]; then
  echo "soft-roce: the guest script failed (exit $vm_rc); see $RES/guest.txt"
  echo "soft-roce: 0 passed, 1 failed"
  exit 1
fi
exit "$rc"
