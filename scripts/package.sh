#!/usr/bin/env bash
# The Debian package of roce-observe and roce-analyze (docs/install.md):
#
#   scripts/package.sh [--bins DIR] [--out DIR] [--compress xz|gzip|none]
#
# --bins DIR: take roce-observe and roce-analyze from DIR (default: build them with the dist
# profile, `./x build`). --out DIR: where the .deb goes (default target/package). Prints the
# package's path on its last line. What goes where:
#   /usr/bin/roce-observe, /usr/bin/roce-analyze
#   /lib/systemd/system/roce-observe.service     (deploy/debian/roce-observe.service)
#   /etc/default/roce-observe                    (conffile: the service's options)
#   /etc/roce-observe/policy.toml                (conffile: the nvidia profile, written out)
#   /var/lib/roce-observe                        (flow logs, alerts, summary.json)
#   /usr/share/doc/roce-observe/                 (README.md and docs/, deploy/ examples)
# Depends are read off the binaries (the newest GLIBC_ symbol version they use, libgcc_s).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bins="" out="target/package" compress="xz"
while [ $# -gt 0 ]; do
  case "$1" in
    --bins) bins="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --compress) compress="$2"; shift 2 ;;
    *) echo "usage: scripts/package.sh [--bins DIR] [--out DIR] [--compress xz|gzip|none]" >&2; exit 2 ;;
  esac
done
if [ -z "$bins" ]; then
  cargo build --profile dist -p roce-observe -p analysis --bin roce-observe --bin roce-analyze
  bins=target/dist
fi
for b in roce-observe roce-analyze; do
  [ -x "$bins/$b" ] || { echo "package: $bins/$b is missing or not executable" >&2; exit 1; }
done
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "package: no workspace version in Cargo.toml" >&2; exit 1; }
arch=$(dpkg --print-architecture)
glibc=$(objdump -T "$bins/roce-observe" "$bins/roce-analyze" | grep -o 'GLIBC_[0-9.]*' \
  | sed 's/GLIBC_//' | sort -uV | tail -n 1)
[ -n "$glibc" ] || { echo "package: no GLIBC symbol versions in the binaries" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -d "$stage/DEBIAN" "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/etc/default" \
  "$stage/etc/roce-observe" "$stage/var/lib/roce-observe" "$stage/usr/share/doc/roce-observe/docs" \
  "$stage/usr/share/doc/roce-observe/deploy"
install -m 0755 "$bins/roce-observe" "$bins/roce-analyze" "$stage/usr/bin/"
install -m 0644 deploy/debian/roce-observe.service "$stage/lib/systemd/system/"
install -m 0644 deploy/debian/default "$stage/etc/default/roce-observe"
install -m 0644 deploy/debian/policy.toml "$stage/etc/roce-observe/policy.toml"
install -m 0644 README.md "$stage/usr/share/doc/roce-observe/"
install -m 0644 docs/*.md "$stage/usr/share/doc/roce-observe/docs/"
ln -s docs/install.md "$stage/usr/share/doc/roce-observe/install.md"
cp -r deploy/prometheus deploy/grafana deploy/kubernetes deploy/container deploy/capabilities \
  "$stage/usr/share/doc/roce-observe/deploy/"
install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$stage/DEBIAN/"
printf '%s\n' /etc/default/roce-observe /etc/roce-observe/policy.toml > "$stage/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: roce-observe
Version: $version-1
Architecture: $arch
Maintainer: roce-observe developers <roce-observe@localhost>
Installed-Size: $size
Depends: libc6 (>= $glibc), libgcc-s1
Section: net
Priority: optional
Description: RoCEv2 fabric observer for GPU clusters on Ethernet
 roce-observe checks that a fabric is lossless enough for RDMA: DSCP/PCP marking
 across trust boundaries, ECN marks answered by CNPs, PFC on the RDMA priority
 only and never storming, no QP going back N. eBPF/XDP per QP on soft-RoCE hosts
 and capture ports, the NIC's counters and configuration and the host's QPs on
 hardware-RoCE hosts; Parquet flow logs, alerts, Prometheus metrics. Includes
 roce-analyze (reports over the flow logs) and a systemd service.
CONTROL
install -d "$out"
deb="$out/roce-observe_${version}-1_${arch}.deb"
dpkg-deb --root-owner-group -Z"$compress" --build "$stage" "$deb" >/dev/null
echo "$deb"
