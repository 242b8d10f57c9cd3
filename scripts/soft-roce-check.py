#!/usr/bin/env python3
"""Checks the soft-RoCE cases written by scripts/soft-roce-guest.sh (host side).

    soft-roce-check.py --bin ROCE_OBSERVE RESULTS [CASE...]

For each case directory RESULTS/CASE (capture.pcap of veth-a, live/summary.json of roce-observe
on veth-a):

1. derives the per-QP counts from tshark's fields of the capture, independently, following
   docs/metrics.md the way observer/tests/replay_tshark.rs does (same fields and logic),
   READ windows included: an RDMA READ request of DMA length L consumes ceil(L/pmtu)
   PSNs, so the next PSN of the key within [p + ceil(L/4096), p + ceil(L/256)] after a READ
   request at p is not a gap;
2. compares them with the live summary.json, key by key and field by field, and the live
   Parquet flow log summed per key over its intervals with summary.json;
3. replays the capture (`roce-observe replay --out RESULTS/CASE/replay`) and compares the
   replay's summary.json with the live one (times and ICRC verdicts aside: live never checks
   the ICRC);
4. checks what the case is about (the marking it set, the loss it injected) is visible;
5. reads the rxe counters recorded before and after (`rdma statistic` and sysfs hw_counters)
   and reports whether the two agree and how they compare with the observed packets;
6. checks the live observer's NIC source: its `nic` table's rxe quantities (rdma_tx_packets,
   rdma_rx_packets, duplicate_requests, out_of_sequence, nak_seq_err_rx), summed over the run,
   equal the change of the counters they map (sent_pkts, ...) in `rdma statistic`.

The capture is a pcap of one Ethernet interface, so it carries no direction: a key is egress
when its source is veth-a's address (case.env `ipa`), else ingress; replay (which calls every
frame of such a file ingress) is compared by (source, destination, QP).

Prints a table per case; the last line is `soft-roce: N passed, M failed`. Exit status 1 when a
case failed, naming the first mismatch.
"""

import argparse
import glob
import json
import re
import math
import os
import subprocess
import sys
from collections import defaultdict

FIELDS = [
    "frame.len", "frame.cap_len", "frame.time_epoch", "frame.interface_name",
    "frame.packet_flags_direction", "sll.pkttype", "ieee8021ad.priority", "vlan.priority",
    "ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "ip.len", "ipv6.plen", "ip.flags.mf",
    "ip.frag_offset", "ip.dsfield.dscp", "ip.dsfield.ecn", "ipv6.tclass", "udp.srcport",
    "udp.dstport", "udp.length", "infiniband.bth.opcode", "infiniband.bth.tver",
    "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.aeth.syndrome",
    "infiniband.bth.padcnt", "infiniband.bth.a",
]
# The RETH DMA length: Wireshark 4.0 calls it infiniband.reth.dmalen, later ones dma_length.
DMALEN_NAMES = ["infiniband.reth.dma_length", "infiniband.reth.dmalen"]

# Fields compared between the tshark reference and live (and replay).
COUNT_FIELDS = [
    "pkts", "bytes_l2", "bytes_ip", "bytes_udp", "data_pkts", "ack_pkts", "cnp", "ce",
    "not_ect_data", "acks", "naks", "nak_psn_seq_err", "rnr_naks", "suspect", "psn_gaps",
    "psn_missing", "psn_retrans", "psn_behind", "qp_incarnations", "max_udp_payload",
    "last_udp_sport", "opcodes", "dscp", "ecn", "pcp",
]
# Fields of a summary QP record not compared between live and replay.
NOT_REPLAYED = {"first_ns", "last_ns", "icrc_ok", "icrc_bad", "icrc_unverifiable", "iface", "dir"}

READ_REQUEST = 0x0C


def tshark_dmalen_field():
    out = subprocess.run(["tshark", "-G", "fields"], capture_output=True, text=True).stdout
    names = {line.split("\t")[2] for line in out.splitlines() if line.count("\t") >= 2}
    for n in DMALEN_NAMES:
        if n in names:
            return n
    sys.exit("tshark has no RETH DMA length field (tried %s)" % ", ".join(DMALEN_NAMES))


def num(s):
    s = s.strip()
    return int(s, 16) if s.startswith("0x") else int(s)


def tshark_rows(pcap, fields):
    cmd = ["tshark", "-r", pcap, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a",
           "-E", "aggregator=,"]
    for f in fields:
        cmd += ["-e", f]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("tshark failed on %s: %s" % (pcap, p.stderr.strip()))
    rows = []
    for line in p.stdout.splitlines():
        cols = line.split("\t")
        if len(cols) != len(fields):
            raise RuntimeError("tshark row with %d columns: %r" % (len(cols), line))
        rows.append({f: (c.split(",") if c else []) for f, c in zip(fields, cols)})
    return rows


def last(r, f):
    v = r[f]
    return v[-1] if v else None


def lnum(r, f):
    v = last(r, f)
    return None if v is None else num(v)


def class_of(op):
    if op == 0x81:
        return "cnp"
    if op in (0x11, 0x12, 0x51, 0x52):
        return "ack"
    return "data"


def defined(op):
    return (0x00 <= op <= 0x17 or 0x20 <= op <= 0x2B or 0x40 <= op <= 0x55
            or 0x64 <= op <= 0x65 or op == 0x81)


def is_roce(r):
    return (lnum(r, "udp.dstport") == 4791 and (lnum(r, "udp.length") or 0) >= 20
            and last(r, "infiniband.bth.psn") is not None
            and (lnum(r, "ip.flags.mf") or 0) == 0 and (lnum(r, "ip.frag_offset") or 0) == 0)


def path_mtu(rows):
    """The path MTU the capture shows: the payload of FIRST/MIDDLE packets (send, write, read
    response), which is exactly one PMTU; None when there is none."""
    # opcode: header bytes after the BTH
    hdr = {0x00: 0, 0x01: 0, 0x06: 16, 0x07: 0, 0x0D: 4, 0x0E: 0}
    seen = set()
    for r in rows:
        if not is_roce(r):
            continue
        op = lnum(r, "infiniband.bth.opcode")
        if op in hdr:
            seen.add(lnum(r, "udp.length") - 8 - 12 - hdr[op] - 4 - (lnum(r, "infiniband.bth.padcnt") or 0))
    seen = {s for s in seen if s in (256, 512, 1024, 2048, 4096)}
    return max(seen) if len(seen) == 1 else (max(seen) if seen else None)


def addrs(r):
    """(IPv6?, source, destination, destination QP, time in ns) of a RoCE row."""
    v6 = last(r, "ip.src") is None
    a, _, b = r["frame.time_epoch"][0].partition(".")
    return (v6, last(r, "ipv6.src" if v6 else "ip.src"), last(r, "ipv6.dst" if v6 else "ip.dst"),
            lnum(r, "infiniband.bth.destqp"), int(a) * 10**9 + int((b + "000000000")[:9]))


def derive(rows, ipa, dmalen_field):
    """Per-QP totals by metrics.md from tshark's rows; key (dir, src, dst, qp)."""
    pmtu = path_mtu(rows)
    qps = {}
    roce = defaultdict(int)
    for r in rows:
        if not is_roce(r):
            continue
        v6, src, dst, qpn, ts = addrs(r)
        d = "egress" if src == ipa else "ingress"
        roce[d] += 1
        q = qps.setdefault((d, src, dst, qpn), {
            "pkts": 0, "bytes_l2": 0, "bytes_ip": 0, "bytes_udp": 0, "data_pkts": 0,
            "ack_pkts": 0, "cnp": 0, "ce": 0, "not_ect_data": 0, "acks": 0, "naks": 0,
            "nak_psn_seq_err": 0, "rnr_naks": 0, "suspect": 0, "psn_gaps": 0, "psn_missing": 0,
            "psn_retrans": 0, "psn_behind": 0, "qp_incarnations": 0, "max_udp_payload": 0,
            "last_udp_sport": 0, "opcodes": {}, "dscp": {c: {} for c in ("data", "ack", "cnp")},
            "ecn": {c: {} for c in ("data", "ack", "cnp")},
            "pcp": {c: {} for c in ("data", "ack", "cnp")},
            "_max": None, "_last_ns": 0, "_read": None,
        })
        ip_len = lnum(r, "ipv6.plen") + 40 if v6 else lnum(r, "ip.len")
        op = lnum(r, "infiniband.bth.opcode")
        c = class_of(op)
        if v6:
            tc = lnum(r, "ipv6.tclass")
            dscp, ecn = tc >> 2, tc & 3
        else:
            dscp, ecn = lnum(r, "ip.dsfield.dscp"), lnum(r, "ip.dsfield.ecn")
        pcp = (r["ieee8021ad.priority"] or r["vlan.priority"] or ["none"])[0]
        udp_payload = lnum(r, "udp.length") - 8
        q["pkts"] += 1
        q["bytes_l2"] += lnum(r, "frame.len")
        q["bytes_ip"] += ip_len
        q["bytes_udp"] += udp_payload
        q[c + "_pkts" if c != "cnp" else "cnp"] += 1
        if ecn == 3:
            q["ce"] += 1
        if c == "data" and ecn == 0:
            q["not_ect_data"] += 1
        if op == 0x11:
            q["acks"] += 1
        s = lnum(r, "infiniband.aeth.syndrome")
        if s is not None:
            if s & 0x60 == 0x60:
                q["naks"] += 1
                if s == 0x60:
                    q["nak_psn_seq_err"] += 1
            elif s & 0x60 == 0x20:
                q["rnr_naks"] += 1
        if (lnum(r, "infiniband.bth.tver") or 0) != 0 or not defined(op):
            q["suspect"] += 1
        if c == "data":
            psn_step(q, lnum(r, "infiniband.bth.psn") & 0xFFFFFF, ts, op,
                     lnum(r, dmalen_field) if op == READ_REQUEST else None, pmtu)
        q["_last_ns"] = ts
        q["max_udp_payload"] = max(q["max_udp_payload"], udp_payload)
        q["last_udp_sport"] = lnum(r, "udp.srcport")
        name = "0x%02x" % op if defined(op) else "other"
        q["opcodes"][name] = q["opcodes"].get(name, 0) + 1
        for h, v in (("dscp", str(dscp)), ("ecn", str(ecn)), ("pcp", pcp)):
            q[h][c][v] = q[h][c].get(v, 0) + 1
    for q in qps.values():
        for k in [k for k in q if k.startswith("_")]:
            del q[k]
    return qps, dict(roce), pmtu


def signed24(x):
    x %= 1 << 24
    return x - (1 << 24) if x >= 1 << 23 else x


def psn_step(q, psn, ts, op, dmalen, pmtu):
    """metrics.md's PSN analysis, plus the READ rule (see the module's doc): after a READ request
    at p for L bytes the key's highest PSN is p + ceil(L/pmtu) - 1 (pmtu as the capture shows
    it), and a next PSN within [p + ceil(L/4096), p + ceil(L/256)] is never a gap."""
    mx = q["_max"]
    adv = False
    if mx is None:
        q["_max"] = psn
        adv = True
    else:
        d = signed24(psn - mx)
        rd = q["_read"]
        idle = q["_last_ns"] != 0 and ts > q["_last_ns"] + 10_000_000_000
        if (idle and d != 1) or abs(d) >= 1 << 22:
            q["_max"] = psn
            q["qp_incarnations"] += 1
            adv = True
        elif rd is not None and rd[1] <= signed24(psn - rd[0]) <= rd[2]:
            q["_max"] = psn  # the READ request's PSNs were taken by its responses
            adv = True
        elif d >= 1:
            q["_max"] = psn
            adv = True
            if d > 1:
                q["psn_gaps"] += 1
                q["psn_missing"] += d - 1
        else:
            q["psn_retrans"] += 1
            if d < 0:
                q["psn_behind"] += 1
    if adv:
        q["_read"] = None
        if op == READ_REQUEST:
            n = max(dmalen or 0, 1)
            lo, hi = max(1, math.ceil(n / 4096)), max(1, math.ceil(n / 256))
            est = max(1, math.ceil(n / pmtu)) if pmtu else lo
            q["_read"] = (psn, lo, hi)
            q["_max"] = (psn + est - 1) & 0xFFFFFF


def summary_qps(path, ipa):
    with open(path) as f:
        s = json.load(f)
    out = {}
    for q in s["qps"]:
        k = ("egress" if q["src"] == ipa else "ingress", q["src"], q["dst"], q["qp"])
        if k in out:
            raise RuntimeError("%s: two records for %s" % (path, k))
        out[k] = q
    roce = defaultdict(int)
    for i in s["interfaces"]:
        roce[i["dir"]] += i["roce"]
    return s, out, dict(roce)


def norm_hist(v):
    """Histograms per class with empty classes dropped (both sides list non-zero buckets)."""
    if isinstance(v, dict) and set(v) <= {"data", "ack", "cnp"}:
        return {c: h for c, h in v.items() if h}
    return v


def compare(a_name, a, b_name, b, fields=None, skip=()):
    """Mismatches between two key -> record maps: a list of strings."""
    out = []
    for k in sorted(set(a) | set(b), key=str):
        if k not in a or k not in b:
            out.append("key %s only in %s" % (fmt_key(k), a_name if k in a else b_name))
            continue
        fs = fields or sorted(set(a[k]) | set(b[k]))
        for f in fs:
            if f in skip:
                continue
            va, vb = norm_hist(a[k].get(f)), norm_hist(b[k].get(f))
            if va != vb:
                out.append("key %s field %s: %s %s vs %s %s" % (fmt_key(k), f, a_name,
                                                               json.dumps(va), b_name, json.dumps(vb)))
    return out


def fmt_key(k):
    return "%s %s->%s qp %d" % k


def parse_counters(path):
    """{(dev, 'rdma'|'sysfs'): {counter: value}} from counters-*.txt."""
    out = {}
    cur = None
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    for line in lines:
        if line.startswith("## rdma statistic show link "):
            cur = (line.split()[-1].split("/")[0], "rdma")
            out[cur] = {}
        elif line.startswith("## sysfs "):
            cur = (line.split("/")[4], "sysfs")
            out[cur] = {}
        elif cur and cur[1] == "rdma" and line.startswith("link "):
            w = line.split()[2:]
            for i in range(0, len(w) - 1, 2):
                try:
                    out[cur][w[i]] = int(w[i + 1])
                except ValueError:
                    pass
        elif cur and cur[1] == "sysfs":
            w = line.split()
            if len(w) == 2 and w[1].lstrip("-").isdigit():
                out[cur][w[0]] = int(w[1])
    return out


def counter_report(d, live_roce, devs):
    before = parse_counters(os.path.join(d, "counters-before.txt"))
    after = parse_counters(os.path.join(d, "counters-after.txt"))
    lines, agree = [], True
    deltas = {}
    for dev in devs:
        for src in ("rdma", "sysfs"):
            b, a = before.get((dev, src), {}), after.get((dev, src), {})
            deltas[(dev, src)] = {k: a[k] - b.get(k, 0) for k in a if k != "lifespan"}
        r, s = deltas[(dev, "rdma")], deltas[(dev, "sysfs")]
        common = sorted(set(r) & set(s))
        diff = [k for k in common if r[k] != s[k]]
        only = sorted(set(r) ^ set(s))
        if diff or not common:
            agree = False
        nz = {k: r[k] for k in common if r[k]}
        lines.append("  %s counters (delta): %s; rdma statistic vs sysfs: %s%s" % (
            dev, " ".join("%s=%d" % kv for kv in sorted(nz.items())) or "all 0",
            "agree on %d counters" % len(common) if not diff and common else
            ("DIFFER on %s" % diff if diff else "nothing to compare"),
            (" (only in one: %s)" % only) if only else ""))
    ra = deltas[(devs[0], "rdma")] or deltas[(devs[0], "sysfs")]
    if ra:
        lines.append("  " + devs[0] + " sent_pkts %s vs live egress roce %s ; rcvd_pkts %s vs live ingress roce %s" % (
            ra.get("sent_pkts"), live_roce.get("egress", 0), ra.get("rcvd_pkts"), live_roce.get("ingress", 0)))
    return lines, agree


# The NIC source's vendor-neutral quantities for rxe (nic/src/normalize.rs
# RXE_RDMA): nic table column -> rxe hw counter.
RXE_NIC_COLUMNS = {
    "rdma_tx_packets": "sent_pkts",
    "rdma_rx_packets": "rcvd_pkts",
    "duplicate_requests": "duplicate_request",
    "out_of_sequence": "out_of_seq_request",
    "nak_seq_err_rx": "rcvd_seq_err",
}


def nic_report(d, iface, dev):
    """The live observer's `nic` table for IFACE (its NIC source read DEV's counters through
    RDMA netlink every interval): each quantity summed over the run must equal the counter's
    change from before the case's traffic to after it in `rdma statistic` (the device carries
    only this case's traffic, and the observer was attached before and stopped after)."""
    import pyarrow.parquet as pq
    lines, problems = [], []
    files = sorted(glob.glob(os.path.join(d, "live", "nic", "**", "*.parquet"), recursive=True))
    if not files:
        return ["  nic table: none written"], ["no nic table from the live observer"]
    rows = []
    for f in files:
        rows += pq.read_table(f).to_pylist()
    rows = [r for r in rows if r["iface"] == iface]
    if not rows:
        return ["  nic table: no row for %s" % iface], ["no nic row for %s" % iface]
    drivers = sorted({r["driver"] for r in rows})
    devs = sorted({r["rdma_device"] or "" for r in rows})
    if drivers != ["rxe"] or devs != [dev]:
        problems.append("nic rows name driver %s, device %s (want rxe, %s)" % (drivers, devs, dev))
    before = parse_counters(os.path.join(d, "counters-before.txt")).get((dev, "rdma"), {})
    after = parse_counters(os.path.join(d, "counters-after.txt")).get((dev, "rdma"), {})
    got = []
    for col, name in RXE_NIC_COLUMNS.items():
        vals = [r.get(col) for r in rows]
        if any(v is None for v in vals) or name not in after:
            problems.append("nic %s: %s (rdma statistic %s: %s)" % (
                col, "null in some interval" if any(v is None for v in vals) else "read",
                name, "absent" if name not in after else "present"))
            continue
        total, want = sum(vals), after[name] - before.get(name, 0)
        got.append("%s=%d" % (col, total))
        if total != want:
            problems.append("nic %s summed over %d intervals = %d, rdma statistic %s changed by %d"
                            % (col, len(rows), total, name, want))
    lines.append("  nic source (%s, %d intervals): %s; == rdma statistic: %s" % (
        dev, len(rows), " ".join(got), "yes" if not problems else "NO"))
    return lines, problems


# Scalar counts the flows table carries per interval (deltas), summed per key over the run.
FLOW_SUM_FIELDS = [f for f in COUNT_FIELDS if f not in (
    "max_udp_payload", "last_udp_sport", "opcodes", "dscp", "ecn", "pcp")]


def flows_report(d, live, ipa):
    """The live Parquet flow log, summed per key over every interval, against summary.json."""
    import pyarrow.parquet as pq
    files = sorted(glob.glob(os.path.join(d, "live", "flows", "**", "*.parquet"), recursive=True))
    if not files:
        return ["  flows table: none written"], ["no flows table from the live observer"]
    sums = defaultdict(lambda: defaultdict(int))
    n = 0
    for f in files:
        for r in pq.read_table(f, columns=["dir", "src", "dst", "qp"] + FLOW_SUM_FIELDS).to_pylist():
            k = ("egress" if r["src"] == ipa else "ingress", r["src"], r["dst"], r["qp"])
            n += 1
            for c in FLOW_SUM_FIELDS:
                sums[k][c] += r[c]
    problems = compare("summary.json", live, "flows Parquet", sums, FLOW_SUM_FIELDS)
    return ["  flows Parquet (%d rows in %d files) summed per key == summary.json: %s" % (
        n, len(files), "yes" if not problems else "NO")], ["flows: " + m for m in problems]


def hist_str(h):
    return ",".join("%s:%s" % kv for kv in sorted(h.items())) or "-"


def table(qps):
    cols = ["dir", "src->dst", "qp", "pkts", "bytes_l2", "data", "ack", "acks", "naks", "nakseq",
            "rnr", "cnp", "ce", "dscp(data|ack)", "ecn(data|ack)", "opcodes", "gaps", "miss",
            "retr", "behind"]
    rows = []
    for k in sorted(qps, key=str):
        q = qps[k]
        rows.append([k[0], "%s->%s" % (k[1], k[2]), str(k[3]), str(q["pkts"]), str(q["bytes_l2"]),
                     str(q["data_pkts"]), str(q["ack_pkts"]), str(q["acks"]), str(q["naks"]),
                     str(q["nak_psn_seq_err"]), str(q["rnr_naks"]), str(q["cnp"]), str(q["ce"]),
                     "%s|%s" % (hist_str(q["dscp"]["data"]), hist_str(q["dscp"]["ack"])),
                     "%s|%s" % (hist_str(q["ecn"]["data"]), hist_str(q["ecn"]["ack"])),
                     hist_str(q["opcodes"]), str(q["psn_gaps"]), str(q["psn_missing"]),
                     str(q["psn_retrans"]), str(q["psn_behind"])])
    w = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    out = ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(cols))]
    out += ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    return out


# What each case is about, checked on the tshark reference: (description, predicate).
def data_keys(qps, d="ingress"):
    return [q for k, q in qps.items() if k[0] == d and q["data_pkts"]]


def all_data(qps, f):
    ks = data_keys(qps)
    return bool(ks) and all(f(q) for q in ks)


EXPECT = {
    "write_dscp26": ("data DSCP 26 ECT(0)", lambda q: all_data(q, lambda x: x["dscp"]["data"] == {"26": x["data_pkts"]} and x["ecn"]["data"] == {"2": x["data_pkts"]})),
    "write_tc0": ("data DSCP 0 Not-ECT", lambda q: all_data(q, lambda x: x["dscp"]["data"] == {"0": x["data_pkts"]} and x["not_ect_data"] == x["data_pkts"])),
    "send_dscp46": ("data DSCP 46 ECT(0)", lambda q: all_data(q, lambda x: x["dscp"]["data"] == {"46": x["data_pkts"]} and x["ecn"]["data"] == {"2": x["data_pkts"]})),
    "read_dscp26": ("READ requests in, READ responses out, no gap by the READ rule", lambda q: all_data(q, lambda x: x["opcodes"].get("0x0c", 0) > 0 and x["psn_gaps"] == 0) and any(x["opcodes"].get("0x0f", 0) or x["opcodes"].get("0x10", 0) for x in data_keys(q, "egress"))),
    "atomic_dscp26": ("atomic requests in, atomic ACKs out", lambda q: all_data(q, lambda x: x["opcodes"].get("0x13", 0) + x["opcodes"].get("0x14", 0) > 0) and any(x["opcodes"].get("0x12", 0) for k, x in q.items() if k[0] == "egress")),
    "rc_pingpong": ("sends both ways", lambda q: bool(data_keys(q)) and bool(data_keys(q, "egress"))),
    "loss_write": ("gaps and retransmissions in, NAK sequence errors out", lambda q: all_data(q, lambda x: x["psn_gaps"] > 0 and x["psn_retrans"] > 0) and sum(x["nak_psn_seq_err"] for k, x in q.items() if k[0] == "egress") > 0),
    "delay_write": ("5 ms of delay, no loss: no gap", lambda q: all_data(q, lambda x: x["psn_gaps"] == 0 and x["data_pkts"] > 0)),
    "delay_ack2": ("2 ms of delay on the ACKs, no loss: no gap", lambda q: all_data(q, lambda x: x["psn_gaps"] == 0 and x["data_pkts"] > 0)),
    "delay_ack20": ("20 ms of delay on the ACKs, no loss: no gap", lambda q: all_data(q, lambda x: x["psn_gaps"] == 0 and x["data_pkts"] > 0)),
    "qps_write": ("data DSCP 26 ECT(0) (traffic class 106)", lambda q: all_data(q, lambda x: x["dscp"]["data"] == {"26": x["data_pkts"]} and x["ecn"]["data"] == {"2": x["data_pkts"]})),
    # rdma_cm: the WRITE QP carries the ToS; perftest's own SEND exchange and the CM's MADs (QP 1)
    # are other keys, partly set up before the ToS.
    "qps_cm": ("WRITE data DSCP 24 Not-ECT (rdma_cm ToS 96)", lambda q: bool([x for x in data_keys(q) if x["opcodes"].get("0x0a")]) and all(x["dscp"]["data"] == {"24": x["data_pkts"]} and x["not_ect_data"] == x["data_pkts"] for x in data_keys(q) if x["opcodes"].get("0x0a"))),
    "remark_write": ("data re-marked DSCP 34 CE by nftables", lambda q: all_data(q, lambda x: x["dscp"]["data"] == {"34": x["data_pkts"]} and x["ce"] == x["data_pkts"])),
}


def qps_report(d, env, name):
    """roce-observe qps --json against the kernel's own listing (rdma res show qp / cm_id) of
    the case's two devices, read while the traffic ran: (lines, problems)."""
    lines, problems = [], []
    devs = env.get("devices", "").split()
    try:
        kern = json.load(open(os.path.join(d, "rdma-res-qp.json")))
        after = json.load(open(os.path.join(d, "rdma-res-qp-after.json")))
        rep = json.load(open(os.path.join(d, "qps.json")))
    except (OSError, ValueError) as e:
        return ["  qps: %s" % e], ["qps: no usable listing (%s); see qps.log, rdma-res.log" % e]
    if env.get("qps_exit") != "0":
        problems.append("roce-observe qps exited %s" % env.get("qps_exit"))
    ours = {(q["dev"], q["lqpn"]): q for q in rep.get("qps", [])}
    # The QPs of this case's devices that existed before and after roce-observe's reads.
    stable = {(k["ifname"], k["lqpn"]) for k in after}
    rc = [k for k in kern if k.get("ifname") in devs and k.get("type") == "RC" and (k["ifname"], k["lqpn"]) in stable]
    lines.append("  qps: %d RC QPs of %s in the kernel's listing, %d QPs in roce-observe's (result %s)" % (
        len(rc), " ".join(devs), len(ours), rep.get("result")))
    if len(rc) < 2:
        problems.append("qps: the kernel listed %d RC QPs of %s while the traffic ran (expected both ends)" % (len(rc), devs))
    for k in rc:
        q = ours.get((k["ifname"], k["lqpn"]))
        if q is None:
            problems.append("qps: %s QP %d (kernel) missing from roce-observe qps" % (k["ifname"], k["lqpn"]))
            continue
        want = {"rqpn": k.get("rqpn"), "pid": k.get("pid"), "comm": k.get("comm"), "state": k.get("state"), "qp_type": "RC"}
        got = {f: q.get(f) for f in want}
        lines.append("    %s QP %d: rqpn %s pid %s %s %s, tx %s pkt/s, rx %s pkt/s, peer %s, verdict %s" % (
            k["ifname"], k["lqpn"], got["rqpn"], got["pid"], got["comm"], got["state"],
            q.get("tx_pps"), q.get("rx_pps"), q.get("dst"), q.get("verdict")))
        if got != want:
            problems.append("qps: %s QP %d: roce-observe %s, kernel %s" % (k["ifname"], k["lqpn"], got, want))
    mine = [ours[(k["ifname"], k["lqpn"])] for k in rc if (k["ifname"], k["lqpn"]) in ours]
    # The requester (the client, on rxb) sends WRITEs: its send PSN moves, the responder's
    # receive PSN moves.
    client = [q for q in mine if q["dev"].startswith("rxb")]
    server = [q for q in mine if q["dev"].startswith("rxa")]
    if not any((q.get("tx_pps") or 0) > 0 for q in client):
        problems.append("qps: no requester QP on %s with packets sent per second > 0" % devs[1:])
    if not any((q.get("rx_pps") or 0) > 0 for q in server):
        problems.append("qps: no responder QP on %s with packets received per second > 0" % devs[:1])
    if name == "qps_cm":
        ipa, ipb = env.get("ipa"), env.get("ipb")
        if not any((q.get("dst") or "").startswith(ipa + ":") for q in client):
            problems.append("qps: the rdma_cm client's QP has no peer %s (got %s)" % (ipa, [q.get("dst") for q in client]))
        if not any((q.get("dst") or "").startswith(ipb + ":") for q in server):
            problems.append("qps: the rdma_cm server's QP has no peer %s (got %s)" % (ipb, [q.get("dst") for q in server]))
    elif any(q.get("dst") for q in mine):
        problems.append("qps: a peer address on QPs set up without rdma_cm: %s" % [q.get("dst") for q in mine])
    if rep.get("result") != "pass" or any(q.get("verdict") == "error" for q in mine):
        problems.append("qps: result %s with no QP in error expected" % rep.get("result"))
    ll, lp = live_qps_report(d, env, rc)
    if name == "qps_write":
        cl, cp = counters_report(d, env, rc)
        ll, lp = ll + cl, lp + cp
    return lines + ll, problems + lp


def counters_report(d, env, rc):
    """--qp-counters type on a real kernel: the ports' auto mode turned on by the observer (as
    rdma statistic says while it runs), off again after it exits, and what the device bound."""
    lines, problems = [], []
    summary = json.load(open(os.path.join(d, "live", "summary.json")))
    c = (summary.get("host_qps") or {}).get("counters")
    if not c:
        return ["  counters: none in summary.json"], ["counters: summary.json host_qps.counters is %s" % c]
    devs = env.get("devices", "").split()
    ports = {(p["device"], p["port"]): p for p in c.get("ports", [])}

    def text(f):
        try:
            return open(os.path.join(d, f)).read().strip()
        except OSError as e:
            return "unreadable: %s" % e
    during, after = text("counter-mode-during.txt"), text("counter-mode-after.txt")
    groups = c.get("groups", [])
    mine = [g for g in groups if g["device"] in devs]
    lines.append("  counters (--qp-counters %s): ports %s; during: %r; after exit: %r; %d groups on %s, bound QPs %s" % (
        c.get("grouping"), {"%s/%s" % k: p["state"] for k, p in ports.items() if k[0] in devs},
        during, after, len(mine), " ".join(devs), [g["qps"] for g in mine]))
    if c.get("grouping") != "type":
        problems.append("counters: grouping %s, expected type" % c.get("grouping"))
    for dev in devs:
        p = ports.get((dev, 1))
        if p is None or p["state"] != "turned_on":
            problems.append("counters: %s/1 is %s, expected turned_on" % (dev, p))
    # iproute2 prints "link rxa1/1 mode qp auto type on", and "... auto off" once it is off.
    if "auto type on" not in during:
        problems.append("counters: the kernel did not report auto mode by type on rxa while the observer ran: %r" % during)
    if "auto off" not in after:
        problems.append("counters: auto mode not off after the observer exited: %r" % after)
    # rxe has no raw QP context: named at start-up and in summary.json, never asked.
    raw = (summary.get("host_qps") or {}).get("raw_context") or {}
    try:
        log = open(os.path.join(d, "live.log")).read()
    except OSError:
        log = ""
    lines.append("  raw QP context: reads %s, unsupported %s" % (raw.get("reads"), sorted(raw.get("unsupported", {}))))
    for dev in devs:
        if "rdma_rxe" not in raw.get("unsupported", {}).get(dev, ""):
            problems.append("raw: %s not named as a device without a decoded raw QP context: %s" % (dev, raw))
    if raw.get("reads"):
        problems.append("raw: %s raw QP contexts read on rxe devices" % raw.get("reads"))
    if not re.search(r"host QPs: reduced on .*%s \(rdma_rxe\)" % re.escape(devs[0]), log):
        problems.append("raw: the start-up does not name %s as reduced (no raw QP context)" % devs[0])
    for g in mine:
        if g["qps"] < 0 or g["qp_type"] not in (None, "RC", "UD", "GSI", "UC"):
            problems.append("counters: implausible group %s" % g)
    return lines, problems


def live_qps_report(d, env, rc):
    """The live observer's qps table (its host-QP inventory every interval) for the case's RC
    QPs: the owner as the kernel says, and the requester's packets from its send PSN within
    what the observer counted on the wire for that QP."""
    import pyarrow.parquet as pq
    lines, problems = [], []
    files = sorted(glob.glob(os.path.join(d, "live", "qps", "**", "*.parquet"), recursive=True))
    if not files:
        return ["  live qps table: none written"], ["qps: no qps table from the live observer"]
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    summary = json.load(open(os.path.join(d, "live", "summary.json")))
    hq = summary.get("host_qps") or {}
    lines.append("  live qps table: %d rows in %d files; summary host_qps reads %s, errors %s" % (
        len(rows), len(files), hq.get("reads"), hq.get("errors")))
    if not hq.get("reads"):
        problems.append("qps: summary.json host_qps.reads is %s" % hq.get("reads"))
    wire = {}
    # (src, qp) -> the DSCP and ECN values of every packet of that wire key
    wire_marks = {}
    for q in summary.get("qps", []):
        if q.get("dir") == "ingress" and q.get("src") == env.get("ipb"):
            wire[q["qp"]] = q.get("data_pkts", 0)
        dscps = {v for h in q.get("dscp", {}).values() for v in h}
        ecns = {v for h in q.get("ecn", {}).values() for v in h}
        wire_marks[(q.get("src"), q["qp"])] = (dscps, ecns)
    alerts = []
    try:
        alerts = [json.loads(l) for l in open(os.path.join(d, "live", "alerts.jsonl")) if l.strip()]
    except OSError:
        pass
    flagged = {(a.get("iface"), a.get("qp")) for a in alerts if a.get("rule") == "qp_marking"}
    advanced = []
    for k in rc:
        mine = sorted((r for r in rows if r["device"] == k["ifname"] and r["lqpn"] == k["lqpn"]),
                      key=lambda r: r["interval_end"])
        if not mine:
            problems.append("qps: %s QP %d missing from the live qps table" % (k["ifname"], k["lqpn"]))
            continue
        owners = {(r["pid"], r["comm"]) for r in mine}
        if owners != {(k.get("pid"), k.get("comm"))}:
            problems.append("qps: live qps rows of %s QP %d name %s, the kernel %s" % (
                k["ifname"], k["lqpn"], owners, (k.get("pid"), k.get("comm"))))
        # The marking the QP was set up with (the modify-QP probe) against what its packets
        # carried on the wire, and its verdict.
        tcs = [r["traffic_class"] for r in mine if r["traffic_class"] is not None]
        src = env.get("ipb") if k["ifname"].startswith("rxb") else env.get("ipa")
        marks = wire_marks.get((src, k.get("rqpn")))
        verdict = mine[-1]["marking"]
        lines.append("    live: %s QP %d set up with traffic class %s (verdict %s); its packets on the wire: DSCP %s ECN %s" % (
            k["ifname"], k["lqpn"], tcs[-1] if tcs else None, verdict,
            sorted(marks[0]) if marks else None, sorted(marks[1]) if marks else None))
        if not tcs:
            problems.append("qps: %s QP %d set up after the probe attached has no traffic class in the live qps table" % (k["ifname"], k["lqpn"]))
        elif marks and (marks[0] != {str(tcs[-1] >> 2)} or marks[1] != {str(tcs[-1] & 3)}):
            problems.append("qps: %s QP %d set up with traffic class %d, its packets carried DSCP %s ECN %s" % (
                k["ifname"], k["lqpn"], tcs[-1], sorted(marks[0]), sorted(marks[1])))
        elif tcs:
            want = "ok" if tcs[-1] >> 2 == 26 else "off_policy"
            if verdict != want:
                problems.append("qps: %s QP %d with DSCP %d has verdict %s, expected %s" % (k["ifname"], k["lqpn"], tcs[-1] >> 2, verdict, want))
            if (want == "off_policy") != ((k["ifname"], k["lqpn"]) in flagged):
                problems.append("qps: %s QP %d (%s): qp_marking alert %s" % (
                    k["ifname"], k["lqpn"], want, "raised" if (k["ifname"], k["lqpn"]) in flagged else "missing"))
        if not k["ifname"].startswith("rxb"):
            continue
        sent = sum(r["tx_pkts"] or 0 for r in mine)
        psns = [r["sq_psn"] for r in mine if r["sq_psn"] is not None]
        counted = [r for r in mine if r["tx_pkts"] is not None]
        span = (psns[-1] - mine[mine.index(counted[0]) - 1]["sq_psn"]) % (1 << 24) if counted and mine.index(counted[0]) > 0 else None
        on_wire = wire.get(k.get("rqpn"))
        lines.append("    live: requester %s QP %d: %d packets from its send PSN over %d intervals (PSN span %s); the observer counted %s data packets of its key" % (
            k["ifname"], k["lqpn"], sent, len(counted), span, on_wire))
        advanced.append(sent)
        if span is not None and span != sent:
            problems.append("qps: the requester's tx_pkts add up to %d, its send PSN moved %d" % (sent, span))
        if on_wire is None or sent > on_wire:
            problems.append("qps: the requester sent %d packets by its PSN, more than the %s the observer counted on the wire" % (sent, on_wire))
    # The data requester's send PSN moves (an rdma_cm exchange QP may stay idle while read).
    if not any(n > 0 for n in advanced):
        problems.append("qps: no requester's send PSN advanced in the live qps table (%s)" % advanced)
    return lines, problems


def err_report(d, env):
    """qps_err: QPs set up (through rdma_cm: perftest's exchange QP and the data QP on each end)
    before the observer started, then the requester's data QP driven into ERR (netem loss
    100 %, its process stopped so that it cannot destroy the QP): the live qps table names every
    QP with the kernel's PID and command, with no traffic class and marking `unknown` (rxe has
    no raw QP context to read it from, and the probe never saw the set-up); the failing QP read
    in RTS and then in ERR with one `qp_error` alert naming its owner; no other QP in error;
    and the client's error completion (retries exhausted, status 12)."""
    import pyarrow.parquet as pq
    lines, problems = [], []
    devs = env.get("devices", "").split()
    try:
        kern = json.load(open(os.path.join(d, "rdma-res-qp.json")))
        kerr = json.load(open(os.path.join(d, "rdma-res-qp-err.json")))
    except (OSError, ValueError) as e:
        return ["  qps_err: %s" % e], ["qps_err: no kernel listing (%s); see rdma-res.log" % e]
    rc = [k for k in kern if k.get("ifname") in devs and k.get("type") == "RC"]
    in_err = {(k["ifname"], k["lqpn"]) for k in kerr if k.get("ifname") in devs and k.get("state") == "ERR"}
    lines.append("  kernel: %d RC QPs of %s set up before the observer (attached after %s s); in ERR after the loss: %s (after %s polls)" % (
        len(rc), " ".join(devs), env.get("observer_attach_s"), sorted(in_err), env.get("err_polls")))
    if len([k for k in rc if k["ifname"] == devs[0]]) < 2 or len([k for k in rc if k["ifname"] == devs[1]]) < 2:
        problems.append("qps_err: the kernel listed %s RC QPs (expected the exchange and data QPs on both ends)" % [(k["ifname"], k["lqpn"]) for k in rc])
    failing = [k for k in rc if (k["ifname"], k["lqpn"]) in in_err]
    if len(failing) != 1 or failing[0]["ifname"] != devs[1]:
        problems.append("qps_err: QPs in ERR %s (expected the requester's data QP on %s only)" % (sorted(in_err), devs[1]))
    files = sorted(glob.glob(os.path.join(d, "live", "qps", "**", "*.parquet"), recursive=True))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    alerts = []
    try:
        alerts = [json.loads(l) for l in open(os.path.join(d, "live", "alerts.jsonl")) if l.strip()]
    except OSError:
        pass
    errs = [a for a in alerts if a.get("rule") == "qp_error"]
    marks = [a for a in alerts if a.get("rule") == "qp_marking"]
    # When the client is let go it tears its QPs down (rdma_cm moves a QP to ERR before it is
    # destroyed): a read may catch another QP there, in its last row, after the failing one.
    first_err = min((r["interval_end"] for r in rows if failing and r["device"] == failing[0]["ifname"]
                     and r["lqpn"] == failing[0]["lqpn"] and r["state"] == "ERR"), default=None)
    teardown = 0
    for k in rc:
        role = "failing" if k in failing else "other"
        mine = sorted((r for r in rows if r["device"] == k["ifname"] and r["lqpn"] == k["lqpn"]),
                      key=lambda r: r["interval_end"])
        if not mine:
            problems.append("qps_err: %s QP %s %d missing from the live qps table" % (role, k["ifname"], k["lqpn"]))
            continue
        states = [r["state"] for r in mine]
        owners = {(r["pid"], r["comm"]) for r in mine}
        setup = {(r["traffic_class"], r["setup_source"]) for r in mine}
        verdicts = {r["marking"] for r in mine}
        sent = sum(r["tx_pkts"] or 0 for r in mine)
        lines.append("    live: %s %s QP %d: states %s, owner %s, set-up %s, marking %s, packets sent by PSN %d" % (
            role, k["ifname"], k["lqpn"], ",".join(states), sorted(owners), sorted(setup), sorted(verdicts), sent))
        if owners != {(k.get("pid"), k.get("comm"))}:
            problems.append("qps_err: live rows of %s QP %d name %s, the kernel %s" % (
                k["ifname"], k["lqpn"], owners, (k.get("pid"), k.get("comm"))))
        # Set up before the observer, on a device without a raw QP context: unknown, never guessed.
        if setup != {(None, None)} or verdicts != {"unknown"}:
            problems.append("qps_err: %s QP %d set up before the observer has set-up %s, marking %s (expected none, unknown)" % (
                k["ifname"], k["lqpn"], setup, verdicts))
        if any(a.get("iface") == k["ifname"] and a.get("qp") == k["lqpn"] for a in marks):
            problems.append("qps_err: a qp_marking alert on %s QP %d, whose marking is unknown" % (k["ifname"], k["lqpn"]))
        # A go-back-N rewind of the send PSN counts nothing (never 2^24 minus the rewind).
        if any((r["tx_pkts"] or 0) >= 1 << 23 for r in mine):
            problems.append("qps_err: %s QP %d counted %s packets sent in one interval" % (
                k["ifname"], k["lqpn"], max(r["tx_pkts"] or 0 for r in mine)))
        mine_errs = [a for a in errs if a.get("iface") == k["ifname"] and a.get("qp") == k["lqpn"]]
        if role == "failing":
            if "RTS" not in states or states[-1] != "ERR" or not mine[-1]["error"] or states.index("ERR") < states.index("RTS"):
                problems.append("qps_err: the failing QP read in states %s (expected RTS, then ERR with error set)" % states)
            if len(mine_errs) != 1:
                problems.append("qps_err: %d qp_error alerts for the failing QP (expected 1)" % len(mine_errs))
            else:
                text = mine_errs[0].get("observed", "")
                lines.append("    qp_error: %s" % text)
                want = "pid %s (%s" % (k.get("pid"), k.get("comm"))
                if want not in text or "to ERR" not in text:
                    problems.append("qps_err: the qp_error alert does not name %s moving to ERR: %r" % (want, text))
        elif any(r["error"] for r in mine[:-1]) or (mine[-1]["error"] and (first_err is None or mine[-1]["interval_end"] <= first_err)) or len(mine_errs) > 1:
            problems.append("qps_err: %s QP %d reported in error (%s, %d alerts)" % (k["ifname"], k["lqpn"], states, len(mine_errs)))
        elif mine[-1]["error"]:
            teardown += 1
            lines.append("    (%s QP %d read in ERR in its last row, as its owner tore it down)" % (k["ifname"], k["lqpn"]))
    summary = json.load(open(os.path.join(d, "live", "summary.json")))
    hq = summary.get("host_qps") or {}
    lines.append("  summary host_qps: reads %s, errors %s" % (hq.get("reads"), hq.get("errors")))
    if hq.get("errors") != 1 + teardown:
        problems.append("qps_err: summary.json host_qps.errors is %s (expected %d)" % (hq.get("errors"), 1 + teardown))
    try:
        clog = open(os.path.join(d, "client.log")).read()
    except OSError:
        clog = ""
    lines.append("  client exit %s, server exit %s; client: %s" % (
        env.get("client_exit"), env.get("server_exit"), " / ".join(l.strip() for l in clog.splitlines() if "ailed" in l)[:200]))
    if env.get("client_exit") in (None, "0") or not re.search(r"Failed status\D*12\b", clog):
        problems.append("qps_err: the client did not fail with retries exhausted (status 12): exit %s" % env.get("client_exit"))
    return lines, problems


# Passive latency (docs/latency.md), written again from the page: the histogram buckets of
# Prometheus native histograms of schema 2 (observer_common::latency), positions 0..92 for the
# indices -80..12, edges 1e9 * 2^(i/4) ns rounded down, computed as the Rust constant does.
LAT_KINDS = ["ack", "read", "nak_resend", "ce_cnp"]
LAT_MIN_INDEX, LAT_BUCKETS, LAT_RING = -80, 93, 16
LAT_TIMEOUT_NS = 4_294_967_296


def lat_edges():
    roots = [1.0, 1.189207115002721, math.sqrt(2), 1.681792830507429]
    out = []
    for b in range(LAT_BUCKETS):
        i = LAT_MIN_INDEX + b
        q, r = i // 4, i % 4
        x = 1e9 * roots[r]
        for _ in range(-q if q < 0 else 0):
            x /= 2.0
        for _ in range(q if q > 0 else 0):
            x *= 2.0
        out.append(int(x))
    return out


LAT_UPPER = lat_edges()


def lat_bucket(ns):
    for b, e in enumerate(LAT_UPPER):
        if ns <= e:
            return b
    return LAT_BUCKETS - 1


def latency_reference(rows):
    """Per requester key (src, dst, qp): {"buckets": [sorted positions per kind], "unmatched":
    [per kind], "ambiguous", "ring_full", "samples": [ACK samples, ns]} by docs/latency.md; the
    capture's pairs by PSN as the page says (the one key of the reverse address pair whose open
    range holds the acknowledged PSN, or whose CE waits, for a CNP)."""
    st = {}      # key -> open state
    res = defaultdict(lambda: {"buckets": [[] for _ in LAT_KINDS], "unmatched": [0] * 4,
                               "ambiguous": 0, "ring_full": 0, "samples": [], "open": [0] * 4})
    pair = {}
    maxpsn, last_ns = {}, {}

    def state(k):
        return st.setdefault(k, {"entries": [], "nak": None, "ce": None})

    def end(k, kind, t0, t, amb):
        r = res[k]
        if amb:
            r["ambiguous"] += 1
        elif t - t0 > LAT_TIMEOUT_NS:
            r["unmatched"][kind] += 1
        else:
            r["buckets"][kind].append(lat_bucket(t - t0))
            if kind == 0:
                r["samples"].append(t - t0)

    def close(k, how="unmatched"):
        o = state(k)
        for e in o["entries"]:
            res[k][how][1 if e[2] else 0] += 1
        o["entries"] = []
        if o["nak"]:
            res[k][how][2] += 1
        if o["ce"] is not None:
            res[k][how][3] += 1
        o["nak"], o["ce"] = None, None

    def expire(k, t):
        o = state(k)
        while o["entries"] and t - o["entries"][0][1] > LAT_TIMEOUT_NS:
            e = o["entries"].pop(0)
            res[k]["unmatched"][1 if e[2] else 0] += 1
        if o["nak"] and t - o["nak"][1] > LAT_TIMEOUT_NS:
            o["nak"] = None
            res[k]["unmatched"][2] += 1
        if o["ce"] is not None and t - o["ce"] > LAT_TIMEOUT_NS:
            o["ce"] = None
            res[k]["unmatched"][3] += 1

    for r in rows:
        if not is_roce(r):
            continue
        v6, src, dst, qpn, t = addrs(r)
        k = (src, dst, qpn)
        op = lnum(r, "infiniband.bth.opcode")
        psn = lnum(r, "infiniband.bth.psn") & 0xFFFFFF
        ecn = (lnum(r, "ipv6.tclass") & 3) if v6 else lnum(r, "ip.dsfield.ecn")
        # the PSN analysis's step (metrics.md), over every data-class packet of the key
        step = None
        if class_of(op) == "data":
            mx = maxpsn.get(k)
            d = None if mx is None else signed24(psn - mx)
            idle = k in last_ns and t > last_ns[k] + 10_000_000_000
            if mx is None:
                step = "first"
            elif (idle and d != 1) or abs(d) >= 1 << 22:
                step = "reborn"
            elif d >= 1:
                step = "ahead"
            else:
                step = "not_ahead"
            if step != "not_ahead":
                maxpsn[k] = psn
        last_ns[k] = t
        if op in range(0x0D, 0x13) or op == 0x81:
            # a response: the key it answers
            j = pair.get(k)
            if j is None:
                rev = [c for c in st if c[0] == k[1] and c[1] == k[0] and c != k]
                if op == 0x81:
                    cands = [c for c in rev if st[c]["ce"] is not None]
                else:
                    cands = [c for c in rev if st[c]["entries"] and signed24(psn - st[c]["entries"][0][0]) >= 0
                             and signed24(psn - maxpsn.get(c, psn)) <= 0]
                if len(cands) != 1:
                    continue
                j = cands[0]
                for x in (j, k):
                    if x in pair:
                        pair.pop(pair.pop(x), None)
                pair[k], pair[j] = j, k
            o = state(j)
            if op == 0x81:
                if o["ce"] is not None:
                    end(j, 3, o["ce"], t, False)
                    o["ce"] = None
                continue
            syn = lnum(r, "infiniband.aeth.syndrome")
            if op in (0x0D, 0x10):
                incl, read_first = False, True
            elif op in (0x0E, 0x0F):
                incl, read_first = False, False
            elif syn is None:
                continue
            elif syn & 0x60 == 0:
                incl, read_first = True, False
            elif syn & 0x60 == 0x60:
                if syn & 0x1F == 0 and o["nak"] is None:
                    o["nak"] = (psn, t)
                incl, read_first = False, False
            elif syn & 0x60 == 0x20:
                incl, read_first = False, False
            else:
                continue
            while o["entries"]:
                p, t0, rd, amb = o["entries"][0]
                dd = signed24(p - psn)
                if not (dd < 0 or (dd == 0 and (incl or (read_first and rd)))):
                    break
                o["entries"].pop(0)
                if rd and dd < 0:
                    res[j]["unmatched"][1] += 1
                else:
                    end(j, 1 if rd else 0, t0, t, amb)
            continue
        # a request of this key
        if step == "reborn":
            pair.pop(pair.pop(k, None), None)
        o = st.get(k)
        if o is None:
            if not (op == READ_REQUEST or lnum(r, "infiniband.bth.a") or ecn == 3):
                continue
            o = state(k)
        if step == "reborn":
            close(k)
        expire(k, t)
        if o["nak"] and o["nak"][0] == psn:
            end(k, 2, o["nak"][1], t, False)
            o["nak"] = None
        if ecn == 3 and o["ce"] is None:
            o["ce"] = t
        if step == "not_ahead":
            o["entries"] = [(p, t0, rd, amb or signed24(p - psn) >= 0) for p, t0, rd, amb in o["entries"]]
        elif step is not None and op < 0x20 and (op == READ_REQUEST or lnum(r, "infiniband.bth.a")):
            if len(o["entries"]) >= LAT_RING:
                res[k]["ring_full"] += 1
            else:
                o["entries"].append((psn, t, op == READ_REQUEST, False))
    # open at the end: counted as such (summary.json), in no interval's row
    for k in list(st):
        close(k, "open")
    out = {}
    for k, v in res.items():
        v["buckets"] = [sorted(b) for b in v["buckets"]]
        if any(v["buckets"]) or any(v["unmatched"]) or v["ambiguous"] or v["ring_full"] or any(v["open"]):
            out[k] = v
    return out


def latency_replayed(d):
    """The replay's flows latency columns summed per key, in latency_reference's form."""
    import pyarrow.parquet as pq
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "replay", "flows", "**", "*.parquet"), recursive=True)):
        for r in pq.read_table(f).to_pylist():
            if r.get("latency_ambiguous") is None:
                continue
            v = out.setdefault((r["src"], r["dst"], r["qp"]), {
                "buckets": [[] for _ in LAT_KINDS], "unmatched": [0] * 4, "ambiguous": 0, "ring_full": 0})
            for i, kind in enumerate(LAT_KINDS):
                for b in r["latency_" + kind] or []:
                    v["buckets"][i] += [b["value"] - LAT_MIN_INDEX] * b["pkts"]
                v["unmatched"][i] += r["latency_%s_unmatched" % kind]
            v["ambiguous"] += r["latency_ambiguous"]
            v["ring_full"] += r["latency_ring_full"]
    for v in out.values():
        v["buckets"] = [sorted(b) for b in v["buckets"]]
    return {k: v for k, v in out.items()
            if any(v["buckets"]) or any(v["unmatched"]) or v["ambiguous"] or v["ring_full"]}


def median(xs):
    xs = sorted(xs)
    return xs[(len(xs) - 1) // 2] if xs else None


# What each case's latency shows (replay of the capture of va<i>, the responder's side): the
# ACK round trip there is the responder's turnaround, plus the delay netem adds to its ACKs
# on va<i> (tcpdump sees a frame sent after the qdisc), not the delay added on vb<i>.
LAT_BOUND_NS = 10_000_000  # the turnaround of rxe under TCG, and scheduling, at the median
# Every bound is the delay added at this point plus LAT_BOUND_NS: the turnaround alone moves
# between 0.1 and 3 ms from run to run under TCG (more while other observers still load), so
# no tighter figure holds. Whether a delay is in the figure is told by every sample, not by the
# median: with it, none is below the delay.
LAT_EXPECT = {
    "write_dscp26": ("ACK round trip, no delay added: median within 10 ms",
                     lambda v: v["samples"] and median(v["samples"]) <= LAT_BOUND_NS),
    "delay_ack2": ("ACK round trip with 2 ms added to the ACKs: every sample 2 ms or more, median within 2 ms + 10 ms",
                   lambda v: v["samples"] and min(v["samples"]) >= 2_000_000 and median(v["samples"]) <= 2_000_000 + LAT_BOUND_NS),
    "delay_ack20": ("ACK round trip with 20 ms added to the ACKs: every sample 20 ms or more, median within 20 ms + 10 ms",
                    lambda v: v["samples"] and min(v["samples"]) >= 20_000_000 and median(v["samples"]) <= 20_000_000 + LAT_BOUND_NS),
    "delay_write": ("5 ms added before this point is not in the responder's figure: some samples below 5 ms, median within 10 ms",
                    lambda v: v["samples"] and min(v["samples"]) < 5_000_000 and median(v["samples"]) <= LAT_BOUND_NS),
    "read_dscp26": ("READ latency measured", lambda v: len(v["buckets"][1]) > 0),
    "loss_write": ("NAK to resend measured, resent PSNs excluded (Karn)",
                   lambda v: len(v["buckets"][2]) > 0 and v["ambiguous"] > 0),
}


def latency_report(d, rows, name):
    """Replay's latency against the reference from tshark's frame times: (lines, problems)."""
    lines, problems = [], []
    ref = latency_reference(rows)
    got = latency_replayed(d)
    for k, v in sorted(ref.items()):
        s = v["samples"]
        lines.append("  latency %s -> %s qp %d: ACK %d samples%s, READ %d, NAK->resend %d, CE->CNP %d, unmatched %s, open at the end %s, ambiguous %d, ring full %d" % (
            k[0], k[1], k[2], len(v["buckets"][0]),
            " (median %.3f ms, max %.3f ms)" % (median(s) / 1e6, max(s) / 1e6) if s else "",
            len(v["buckets"][1]), len(v["buckets"][2]), len(v["buckets"][3]), v["unmatched"], v["open"], v["ambiguous"], v["ring_full"]))
    strip = {k: {f: v[f] for f in ("buckets", "unmatched", "ambiguous", "ring_full")} for k, v in ref.items()}
    strip = {k: v for k, v in strip.items()
             if any(v["buckets"]) or any(v["unmatched"]) or v["ambiguous"] or v["ring_full"]}
    if strip != got:
        for k in sorted(set(strip) | set(got)):
            if strip.get(k) != got.get(k):
                problems.append("latency of %s: replay %s, tshark reference %s" % (
                    k, json.dumps(got.get(k))[:300], json.dumps(strip.get(k))[:300]))
    lines.append("  latency replay == tshark reference: %s" % ("yes" if not problems else "NO"))
    desc, pred = LAT_EXPECT.get(name, (None, None))
    if desc:
        ok = bool(ref) and all(pred(v) for v in ref.values() if v["buckets"][0] or v["buckets"][1])
        lines.append("  latency (%s): %s" % (desc, "seen" if ok else "NOT SEEN"))
        if not ok:
            problems.append("latency not as expected: %s" % desc)
    return lines, problems


def run_replay(binary, d):
    out = os.path.join(d, "replay")
    subprocess.run(["rm", "-rf", out], check=True)
    p = subprocess.run([binary, "replay", "--latency", "--out", out, os.path.join(d, "capture.pcap")],
                       capture_output=True, text=True)
    with open(os.path.join(d, "replay.log"), "w") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        raise RuntimeError("replay exit %d: %s" % (p.returncode, p.stderr.strip()[-300:]))
    return os.path.join(out, "summary.json")


def check_case(binary, d, dmalen_field):
    """(passed, [first problems...], lines to print)."""
    name = os.path.basename(d)
    lines, problems = [], []
    env = dict(l.split("=", 1) for l in open(os.path.join(d, "case.env")).read().splitlines() if "=" in l)
    status = open(os.path.join(d, "status")).read().strip() if os.path.exists(os.path.join(d, "status")) else "no status"
    lines.append("case %s: %s (guest: %s; case %s s, traffic %s s)" % (
        name, env.get("client", "?"), status, env.get("case_s", "?"), env.get("traffic_s", "?")))
    if status != "ok":
        problems.append("the case did not run: %s" % status)
    live_path = os.path.join(d, "live", "summary.json")
    pcap = os.path.join(d, "capture.pcap")
    if not os.path.exists(live_path) or not os.path.exists(pcap):
        problems.append("missing %s" % (live_path if not os.path.exists(live_path) else pcap))
        return False, problems, lines
    ipa = env["ipa"]
    if env.get("late_observer") == "1":
        # The observer started after the traffic: its packet counts cover only part of the
        # capture, so the wire is not compared; the case is about the host's QPs.
        lines.append("  wire and NIC counts not compared: the observer started after the case's QPs and traffic")
        fl, flow_problems = flows_report(d, summary_qps(live_path, ipa)[1], ipa)
        el, err_problems = err_report(d, env)
        lines += fl + el
        problems += flow_problems + err_problems
        return not problems, problems, lines
    rows = tshark_rows(pcap, FIELDS + [dmalen_field])
    ref, ref_roce, pmtu = derive(rows, ipa, dmalen_field)
    _, live, live_roce = summary_qps(live_path, ipa)
    lines.append("  frames in capture %d, RoCE %s; live RoCE %s; path MTU seen %s" % (
        len(rows), ref_roce, live_roce, pmtu))
    lines += table(ref)
    fl, flow_problems = flows_report(d, live, ipa)
    lines += fl
    problems += flow_problems
    if not ref:
        problems.append("no RoCE packet in the capture")
    # tshark reference vs live
    m_tl = compare("live", live, "tshark", ref, COUNT_FIELDS)
    if live_roce != ref_roce:
        m_tl.insert(0, "RoCE packets per direction: live %s vs tshark %s" % (live_roce, ref_roce))
    # replay vs live
    try:
        _, rep, rep_roce = summary_qps(run_replay(binary, d), ipa)
        m_lr = compare("live", live, "replay", rep, skip=NOT_REPLAYED)
        if sum(live_roce.values()) != sum(rep_roce.values()):
            m_lr.insert(0, "RoCE packets: live %s vs replay %s" % (live_roce, rep_roce))
    except (RuntimeError, OSError) as e:
        m_lr = ["replay: %s" % e]
    lines.append("  live == tshark: %s" % ("yes" if not m_tl else "NO, %d differences" % len(m_tl)))
    for m in m_tl[:8]:
        lines.append("    " + m)
    lines.append("  live == replay: %s" % ("yes" if not m_lr else "NO, %d differences" % len(m_lr)))
    for m in m_lr[:8]:
        lines.append("    " + m)
    try:
        ll, lat_problems = latency_report(d, rows, name)
    except Exception as e:  # pyarrow missing, a file unreadable: the case fails, named
        ll, lat_problems = [], ["latency: %r" % e]
    lines += ll
    problems += lat_problems
    desc, pred = EXPECT.get(name, ("", lambda q: True))
    ok_expect = pred(ref)
    if desc:
        lines.append("  scenario (%s): %s" % (desc, "seen" if ok_expect else "NOT SEEN"))
    devs = env.get("devices", "rxa rxb").split()
    cl, agree = counter_report(d, live_roce, devs)
    lines += cl
    nl, nic_problems = nic_report(d, env.get("observed", "va" + devs[0][3:]), devs[0])
    lines += nl
    problems += nic_problems
    if not agree:
        problems.append("rdma statistic and sysfs hw_counters disagree (or nothing to compare)")
    if name.startswith("qps_"):
        ql, qp_problems = qps_report(d, env, name)
        lines += ql
        problems += qp_problems
    problems += ["live vs tshark: " + m for m in m_tl] + ["live vs replay: " + m for m in m_lr]
    if desc and not ok_expect:
        problems.append("scenario not seen: %s" % desc)
    return not problems, problems, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="roce-observe binary (for replay)")
    ap.add_argument("results")
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    dmalen = tshark_dmalen_field()
    cases = a.cases or sorted(
        (e for e in os.listdir(a.results) if os.path.exists(os.path.join(a.results, e, "case.env"))),
        key=lambda c: os.path.getmtime(os.path.join(a.results, c, "case.env")))
    if not cases:
        print("soft-roce: no case in %s" % a.results)
        print("soft-roce: 0 passed, 1 failed")
        return 1
    passed, failed, first = 0, 0, None
    verdicts = {}
    for c in cases:
        d = os.path.join(a.results, c)
        try:
            ok, problems, lines = check_case(a.bin, d, dmalen)
        except Exception as e:  # a broken case is a failed case, the others still run
            ok, problems, lines = False, ["check failed: %r" % e], ["case %s:" % c]
        print("\n".join(lines))
        if ok:
            passed += 1
            print("  => PASS")
        else:
            failed += 1
            first = first or "%s: %s" % (c, problems[0])
            print("  => FAIL: %s" % problems[0])
        verdicts[c] = {"passed": ok, "problems": problems}
        print()
    with open(os.path.join(a.results, "check.json"), "w") as f:
        json.dump(verdicts, f, indent=1)
    if first:
        print("first mismatch: %s" % first)
    print("soft-roce: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
