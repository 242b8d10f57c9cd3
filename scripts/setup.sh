#!/usr/bin/env bash
# Idempotent set-up for building and testing roce-observe on a fresh Debian 12 machine.
# Installs: Debian packages (LLVM 22 for bpf-linker, tshark, tcpreplay, nftables, iproute2,
# tcpdump for the lab's latency scenarios,
# Prometheus and Alertmanager with promtool for the monitoring tests, tmux for the terminal
# view's tests, Debian's JDK runtime for Apache Spark in the cross-engine SQL test, Chromium
# and a font for the HTML report's browser test),
# the pinned Rust toolchain (rust-toolchain.toml) with rust-src, bpf-linker built against
# LLVM 22, the Python reader (pyarrow) the tests use as an independent Parquet reader,
# DuckDB and PySpark, on which the cross-engine test runs roce-analyze's report SQL (DuckDB is also
# the baseline of the analysis benchmark), and
# Python playwright (drives the Debian chromium for analysis/tests/integration/html.rs; no browser download).
# Each step checks first and is skipped when already done, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

APT_PKGS=(llvm-22-dev libpolly-22-dev libzstd-dev zlib1g-dev libxml2-dev libffi-dev pkg-config
  build-essential tshark tcpreplay tcpdump nftables iproute2 ethtool libpcap-dev
  prometheus prometheus-alertmanager tmux default-jre-headless chromium fonts-dejavu-core
  debootstrap)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "apt: all packages present"
fi

TOOLCHAIN=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
if ! rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
  log "rustup: installing $TOOLCHAIN"
  rustup toolchain install "$TOOLCHAIN" --profile minimal --component rust-src,clippy,rustfmt
fi
for c in rust-src clippy rustfmt; do
  rustup component list --toolchain "$TOOLCHAIN" --installed 2>/dev/null | grep -q "^$c" \
    || rustup component add --toolchain "$TOOLCHAIN" "$c"
done

BPF_LINKER_VERSION=0.13.0
if ! bpf-linker --version 2>/dev/null | grep -q "$BPF_LINKER_VERSION"; then
  log "cargo: installing bpf-linker $BPF_LINKER_VERSION against LLVM 22"
  PATH=/usr/lib/llvm-22/bin:$PATH cargo +"$TOOLCHAIN" install --locked bpf-linker \
    --version "$BPF_LINKER_VERSION" --no-default-features --features llvm-22
fi

if ! python3 -c 'import pyarrow' 2>/dev/null; then
  log "pip: installing pyarrow (independent Parquet reader for tests)"
  python3 -m pip install -q pyarrow
fi
if ! python3 -c 'import duckdb, pyspark' 2>/dev/null; then
  log "pip: installing duckdb and pyspark (the report SQL on other engines, tests)"
  python3 -m pip install -q duckdb pyspark
fi
if ! command -v kubernetes-validate >/dev/null || ! kubernetes-validate --version 2>/dev/null | grep -q '1\.37\.0'; then
  log "pip: installing kubernetes-validate (the DaemonSet against the Kubernetes API schema, tests)"
  python3 -m pip install -q kubernetes-validate==1.37.0
fi
if ! python3 -c 'import playwright.sync_api' 2>/dev/null; then
  log "pip: installing playwright (drives /usr/bin/chromium in analysis/tests/integration/html.rs)"
  python3 -m pip install -q playwright==1.65.2
fi
log "ready: $(rustup run "$TOOLCHAIN" rustc --version), $(bpf-linker --version)"
