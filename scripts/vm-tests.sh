#!/usr/bin/env bash
# The kernel matrix: the datapath's privileged test binaries run inside a VM of each kernel
# (scripts/vm.sh): every program passes the verifier (with and without the kernel log), the
# BPF_PROG_TEST_RUN conformance cases (kernel equals userspace on every metrics.md count), and
# attaching to a veth pair between namespaces (XDP native, generic, tc; the packet clock); and
# the modify-QP probe (its own object: kprobes on ib_core) against soft-RoCE QPs between
# namespaces (ebpf_qp_probe: QP set-up needs no RDMA traffic, so it runs on every kernel, 5.10
# included, where it must pass while the datapath refuses).
# On 6.1 the same again with the compat object forced (ROCE_OBSERVE_EBPF=compat: what kernels
# before 5.18 load); on 5.10, which has no BPF atomics with fetch (5.12), that the tests' loader
# and the live command both refuse, naming the feature and the minimum version.
#
#   scripts/vm-tests.sh [KERNEL...]     default: every kernel of scripts/vm.sh
#
# Run by ./x test after the host's own tests. Prints one line per kernel and test binary, then
# 'vm-matrix: N passed, M failed'; exits non-zero when any failed. Outside CI a rig that cannot
# run (no QEMU, no download) is skipped with its reason; with CI=true that is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
[ $# -gt 0 ] || set -- 5.10 6.1 6.12 7
TESTS=(ebpf_load ebpf_load_log ebpf_cases ebpf_netns ebpf_qp_probe)
log() { printf '[vm-matrix] %s\n' "$*" >&2; }

skip_or_fail() {
  if [ "${CI:-}" = true ]; then
    log "FAILED: $* (CI=true: the VM rig is required)"
    exit 1
  fi
  log "SKIPPED: $* (outside CI the VM tests may skip; CI fails here)"
  exit 0
}

if [ "$(id -u)" -ne 0 ]; then
  skip_or_fail "not root: the guest tests load BPF programs"
fi
if ! bash scripts/vm.sh fetch "$@" >/dev/null; then
  skip_or_fail "the kernels could not be fetched (scripts/vm.sh fetch $*)"
fi

# The test binaries, built by cargo on the host; the guest sees them through the shared root.
bins=()
while IFS= read -r line; do bins+=("$line"); done < <(
  cargo test -p observer $(printf -- '--test %s ' "${TESTS[@]}") --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"] + " " + m["executable"])
')
cargo build -q -p roce-observe --bin roce-observe || { log "FAILED: building roce-observe"; exit 1; }
[ ${#bins[@]} -eq ${#TESTS[@]} ] || { log "FAILED: building the test binaries (${#bins[@]} of ${#TESTS[@]})"; exit 1; }

passed=0 failed=0 results=()
out_dir="${VM_TESTS_OUT:-target/vm-tests}"
mkdir -p "$out_dir"

# One VM boot per leg: KERNEL, a label, the object (full: what the probe chooses; compat: forced),
# and the test binaries. On 5.10 the datapath cannot run (no BPF atomics with fetch, 5.12): the
# leg checks that both the tests' loader and the live command refuse with that named.
run_leg() {
  local k="$1" label="$2" object="$3" names=("${@:4}") script="set -u" b name exe
  local env="CI=true"
  [ "$object" = compat ] && env+=" ROCE_OBSERVE_EBPF=compat"
  for name in "${names[@]}"; do
    exe=""
    for b in "${bins[@]}"; do [ "${b%% *}" = "$name" ] && exe="${b#* }"; done
    # One thread: the guest has two slow (emulated) CPUs and the cases share one loaded object.
    script+="; echo \"=== $name\"; $env $exe --test-threads=1 2>&1; echo \"=== $name rc=\$?\""
  done
  if [ "$k" = 5.10 ]; then
    script+="; echo '=== live'; timeout 120 target/debug/roce-observe --iface lo --plain --no-nic --out /tmp/roce-vm-live 2>&1; echo \"=== live rc=\$?\""
  fi
  local log="$out_dir/$k-$label.log" start=$SECONDS vm_rc=0
  log "kernel $k ($label): ${names[*]}"
  bash scripts/vm.sh "$k" --quiet --timeout 900 -- bash -c "$script" >"$log" 2>&1 || vm_rc=$?
  [ "$k" = 5.10 ] && names+=(live)
  for name in "${names[@]}"; do
    local line summary ok=0
    line=$(grep -E "^=== $name rc=" "$log" | tail -n 1)
    summary=$(sed -n "/^=== $name\$/,/^=== $name rc=/p" "$log" | grep -E '^test result:' | tail -n 1)
    if [ "$k" = 5.10 ] && [ "$name" != ebpf_qp_probe ]; then
      # Refused, by name: the missing feature and the minimum version.
      sed -n "/^=== $name\$/,/^=== $name rc=/p" "$log" | grep -q 'lacks the BPF atomic instructions.*needs Linux 5.12 or later' \
        && [ -n "$line" ] && [ "$line" != "=== $name rc=0" ] && ok=1
      summary="refused: needs Linux 5.12 (BPF atomics with fetch)"
    elif [ "$line" = "=== $name rc=0" ]; then
      ok=1
    fi
    if [ "$ok" = 1 ]; then
      passed=$((passed + 1)); results+=("$k $label $name ok: $summary")
    else
      failed=$((failed + 1)); results+=("$k $label $name FAILED (${line:-no result, VM exit $vm_rc}; log $log): $summary")
      grep -E 'panicked at|FAILED|rejected|Error' "$log" | head -n 12 | sed "s/^/[vm-matrix] $k $label: /" >&2
    fi
  done
  log "kernel $k ($label): $((SECONDS - start)) s"
}

for k in "$@"; do
  case "$k" in
    # The datapath refuses; the modify-QP probe (its own object) works there.
    5.10) run_leg "$k" refused full ebpf_load ebpf_qp_probe ;;
    6.1)
      run_leg "$k" full full "${TESTS[@]}"
      # The compat object (kernels before 5.18, e.g. Ubuntu 22.04's 5.15), forced on the oldest
      # kernel that runs both.
      run_leg "$k" compat compat ebpf_load ebpf_cases ebpf_netns
      ;;
    *) run_leg "$k" full full "${TESTS[@]}" ;;
  esac
done
for r in "${results[@]}"; do echo "[vm-matrix] $r"; done
echo "vm-matrix: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
