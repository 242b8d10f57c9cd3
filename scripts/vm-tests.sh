#!/usr/bin/env bash
# The kernel matrix: the datapath's privileged test binaries run inside a VM of each kernel
# (scripts/vm.sh): every program passes the verifier (with and without the kernel log), the
# BPF_PROG_TEST_RUN conformance cases (kernel equals userspace on every metrics.md count), and
# attaching to a veth pair between namespaces (XDP native, generic, tc; the packet clock).
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
TESTS=(ebpf_load ebpf_load_log ebpf_cases ebpf_netns)
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
[ ${#bins[@]} -eq ${#TESTS[@]} ] || { log "FAILED: building the test binaries (${#bins[@]} of ${#TESTS[@]})"; exit 1; }

passed=0 failed=0 results=()
out_dir="${VM_TESTS_OUT:-target/vm-tests}"
mkdir -p "$out_dir"
for k in "$@"; do
  start=$SECONDS
  script="set -u; rc=0"
  for b in "${bins[@]}"; do
    name="${b%% *}" exe="${b#* }"
    # One thread: the guest has two slow (emulated) CPUs and the cases share one loaded object.
    script+="; echo \"=== $name\"; CI=true $exe --test-threads=1 2>&1; echo \"=== $name rc=\$?\""
  done
  log "kernel $k: ${TESTS[*]}"
  bash scripts/vm.sh "$k" --quiet --timeout 900 -- bash -c "$script" >"$out_dir/$k.log" 2>&1
  vm_rc=$?
  for b in "${bins[@]}"; do
    name="${b%% *}"
    line=$(grep -E "^=== $name rc=" "$out_dir/$k.log" | tail -n 1)
    summary=$(sed -n "/^=== $name\$/,/^=== $name rc=/p" "$out_dir/$k.log" | grep -E '^test result:' | tail -n 1)
    if [ "$line" = "=== $name rc=0" ]; then
      passed=$((passed + 1)); results+=("$k $name ok: $summary")
    else
      failed=$((failed + 1)); results+=("$k $name FAILED (${line:-no result, VM exit $vm_rc}): $summary")
    fi
  done
  log "kernel $k: $((SECONDS - start)) s (log: $out_dir/$k.log)"
done
for r in "${results[@]}"; do echo "[vm-matrix] $r"; done
if [ "$failed" -gt 0 ]; then
  for k in "$@"; do
    grep -E 'panicked at|FAILED|failed|error' "$out_dir/$k.log" | grep -v '^test .* ok$' | head -n 20 | sed "s/^/[vm-matrix] $k: /"
  done
fi
echo "vm-matrix: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
