//! Evidence: the frames that broke a rule, written while a capture is replayed
//! (`replay --evidence FILE.pcapng`: every offending frame offered) or while an interface is
//! observed (`roce-observe --evidence FILE.pcapng`: the frames the kernel programs sampled, at
//! most `--evidence-rate` per second and CPU), for the user to open in Wireshark. From "QP
//! 0xaf108c has 375 packets at DSCP 0" to those packets.
//!
//! A pcapng file: one interface description per observed interface (named as in the outputs),
//! one enhanced packet block per frame with its original time and length, and a comment naming
//! the rules it broke (`dscp_data; psn_gap`), which Wireshark shows as `frame.comment`. Bounded:
//! per rule and key (QP key, or interface for PFC and PAUSE frames) at most `per_key` frames, at
//! most `max_frames` in all, at most [`MAX_SUBJECTS`] rule-key pairs remembered; every frame left
//! out is counted by why ([`EvidenceStats`]), never silently.
//!
//! The blocks are written here rather than with pcap-parser's serializer (a feature this
//! workspace does not build): three block types of the pcapng specification, little-endian.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use observer_common::maps::{QpKey, SAMPLE_SNAP, Sample};
use observer_common::qp::offense;

/// Rule-key pairs remembered for the per-key limit; frames of further pairs are not written.
pub const MAX_SUBJECTS: usize = 200_000;

#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot write the evidence capture")]
pub struct EvidenceError {
    pub path: PathBuf,
    #[source]
    pub err: std::io::Error,
}

/// What the evidence capture wrote and left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EvidenceStats {
    /// Frames written.
    pub frames: u64,
    /// Offending frames not written: every rule-key pair of theirs had `per_key` frames.
    pub over_per_key: u64,
    /// Offending frames not written: `max_frames` were written.
    pub over_total: u64,
    /// Offending frames not written: [`MAX_SUBJECTS`] rule-key pairs were remembered.
    pub over_subjects: u64,
    /// Live only: offending frames the kernel programs did not sample, a CPU's budget of
    /// `--evidence-rate` frames for the second being spent.
    pub over_rate: u64,
    /// Live only: offending frames not sampled because the sample ring was full.
    pub lost: u64,
}

impl EvidenceStats {
    /// The `evidence` section of a summary (replay's `--json`, the live summary.json): these
    /// counts and the capture's `file`.
    pub fn summary(&self, file: &str) -> serde_json::Value {
        let mut v = serde_json::json!(self);
        v["file"] = serde_json::json!(file);
        v
    }
}

pub struct Evidence {
    path: PathBuf,
    w: BufWriter<File>,
    per_key: u32,
    max_frames: u64,
    /// Interface name -> its pcapng interface id.
    ifaces: HashMap<String, u32>,
    seen: HashMap<(u32, u32, Option<QpKey>), u32>,
    pub stats: EvidenceStats,
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// One option (code, value, padding).
fn option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(value.len() as u16).to_le_bytes());
    out.extend_from_slice(value);
    out.extend(std::iter::repeat_n(0u8, pad4(value.len())));
}

/// A block of `kind` with `body` (already padded), its lengths around it.
fn block(kind: u32, body: &[u8]) -> Vec<u8> {
    let len = (12 + body.len()) as u32;
    let mut b = Vec::with_capacity(len as usize);
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(body);
    b.extend_from_slice(&len.to_le_bytes());
    b
}

impl Evidence {
    /// Creates `path` (replacing it) with its section header, naming `app` as its writer.
    pub fn create(
        path: &Path,
        app: &str,
        per_key: u32,
        max_frames: u64,
    ) -> Result<Evidence, EvidenceError> {
        let err = |err| EvidenceError {
            path: path.to_path_buf(),
            err,
        };
        let mut w = BufWriter::new(File::create(path).map_err(err)?);
        let mut body = Vec::new();
        body.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes());
        option(&mut body, 4, app.as_bytes()); // shb_userappl
        option(&mut body, 0, &[]);
        w.write_all(&block(0x0a0d_0d0a, &body)).map_err(err)?;
        Ok(Evidence {
            path: path.to_path_buf(),
            w,
            per_key: per_key.max(1),
            max_frames,
            ifaces: HashMap::new(),
            seen: HashMap::new(),
            stats: EvidenceStats::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, err: std::io::Error) -> EvidenceError {
        EvidenceError {
            path: self.path.clone(),
            err,
        }
    }

    /// The pcapng interface id of `iface`, its description written at first use (Ethernet,
    /// nanosecond timestamps).
    fn iface_id(&mut self, iface: &str) -> Result<u32, EvidenceError> {
        if let Some(&id) = self.ifaces.get(iface) {
            return Ok(id);
        }
        let id = self.ifaces.len() as u32;
        let mut body = Vec::new();
        body.extend_from_slice(&1u16.to_le_bytes()); // LINKTYPE_ETHERNET
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes()); // no snap length
        option(&mut body, 2, iface.as_bytes()); // if_name
        option(&mut body, 9, &[9]); // if_tsresol: 10^-9 s
        option(&mut body, 0, &[]);
        self.w
            .write_all(&block(1, &body))
            .map_err(|e| self.err(e))?;
        self.ifaces.insert(iface.to_string(), id);
        Ok(id)
    }

    /// A frame of `iface` (the bytes as captured, `wire_len` its original length) that broke
    /// the rules `bits` ([`offense`]), of QP key `key` (none for MAC-control frames): written
    /// when one of its rule-key pairs is under the per-key limit, else counted.
    pub fn offer(
        &mut self,
        iface: &str,
        key: Option<QpKey>,
        bits: u32,
        ts_ns: u64,
        bytes: &[u8],
        wire_len: u32,
    ) -> Result<(), EvidenceError> {
        if bits == 0 {
            return Ok(());
        }
        let iface_n = match self.ifaces.get(iface) {
            Some(&id) => id,
            None => self.iface_id(iface)?,
        };
        let mut wanted = false;
        let mut full = false;
        let mut b = bits;
        while b != 0 {
            let bit = b.trailing_zeros();
            b &= b - 1;
            let k = (bit, iface_n, key);
            let remembered = self.seen.len();
            match self.seen.get_mut(&k) {
                Some(n) if *n < self.per_key => {
                    *n += 1;
                    wanted = true;
                }
                Some(_) => {}
                None if remembered >= MAX_SUBJECTS => full = true,
                None => {
                    self.seen.insert(k, 1);
                    wanted = true;
                }
            }
        }
        if !wanted {
            if full {
                self.stats.over_subjects += 1;
            } else {
                self.stats.over_per_key += 1;
            }
            return Ok(());
        }
        if self.stats.frames >= self.max_frames {
            self.stats.over_total += 1;
            return Ok(());
        }
        let mut names = Vec::new();
        let mut b = bits;
        while b != 0 {
            let bit = b.trailing_zeros();
            b &= b - 1;
            names.push(offense::name(bit));
        }
        let mut body = Vec::with_capacity(bytes.len() + 64);
        body.extend_from_slice(&iface_n.to_le_bytes());
        body.extend_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(ts_ns as u32).to_le_bytes());
        body.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        body.extend_from_slice(&wire_len.max(bytes.len() as u32).to_le_bytes());
        body.extend_from_slice(bytes);
        body.extend(std::iter::repeat_n(0u8, pad4(bytes.len())));
        option(&mut body, 1, names.join("; ").as_bytes()); // opt_comment
        option(&mut body, 0, &[]);
        self.w
            .write_all(&block(6, &body))
            .map_err(|e| self.err(e))?;
        self.stats.frames += 1;
        Ok(())
    }

    /// Writes what is buffered, so that the file read now has every frame offered so far
    /// (the live command does so every interval).
    pub fn flush(&mut self) -> Result<(), EvidenceError> {
        self.w.flush().map_err(|e| self.err(e))
    }

    /// Flushes the file; its statistics.
    pub fn finish(mut self) -> Result<EvidenceStats, EvidenceError> {
        self.w.flush().map_err(|e| self.err(e))?;
        self.w.get_ref().sync_all().map_err(|e| self.err(e))?;
        Ok(self.stats)
    }
}

/// The live command's evidence: the kernel programs' samples of each interface written to
/// one capture, flushed every interval. A write that fails stops the capture (said once); the
/// error is the run's at the end.
pub struct LiveEvidence {
    writer: Option<Evidence>,
    path: PathBuf,
    err: Option<EvidenceError>,
    /// Kernel-side counts (`over_rate`, `lost`), added as the interfaces report them.
    kernel: EvidenceStats,
}

impl LiveEvidence {
    pub fn new(writer: Evidence) -> LiveEvidence {
        LiveEvidence {
            path: writer.path().to_path_buf(),
            writer: Some(writer),
            err: None,
            kernel: EvidenceStats::default(),
        }
    }

    fn failed(&mut self, e: EvidenceError) {
        tracing::error!(path = %self.path.display(), error = %contract::error::chain(&e),
            "the evidence capture cannot be written; no more frames go to it");
        if let Some(w) = self.writer.take() {
            self.kernel.frames += w.stats.frames;
            self.kernel.over_per_key += w.stats.over_per_key;
            self.kernel.over_total += w.stats.over_total;
            self.kernel.over_subjects += w.stats.over_subjects;
        }
        self.err.get_or_insert(e);
    }

    /// The samples of interface `iface`, each with its offloaded tag put back.
    pub fn offer(&mut self, iface: &str, samples: &[Sample]) {
        let mut buf = [0u8; SAMPLE_SNAP + 4];
        for s in samples {
            let Some(w) = self.writer.as_mut() else {
                return;
            };
            let n = s.frame_into(&mut buf);
            if let Err(e) = w.offer(
                iface,
                Some(s.key),
                s.offenses,
                s.ts_ns,
                &buf[..n],
                s.wire_len,
            ) {
                self.failed(e);
            }
        }
    }

    /// Offending frames the kernel programs left out since the last report of an interface.
    pub fn left_out_in_kernel(&mut self, over_rate: u64, lost: u64) {
        self.kernel.over_rate += over_rate;
        self.kernel.lost += lost;
    }

    /// Writes what is buffered (every interval).
    pub fn flush(&mut self) {
        if let Some(Err(e)) = self.writer.as_mut().map(Evidence::flush) {
            self.failed(e);
        }
    }

    /// Closes the capture: its path, and its statistics or the first error.
    pub fn finish(mut self) -> (PathBuf, Result<EvidenceStats, EvidenceError>) {
        let mut st = self.kernel;
        if let Some(w) = self.writer.take() {
            match w.finish() {
                Ok(s) => {
                    st.frames += s.frames;
                    st.over_per_key += s.over_per_key;
                    st.over_total += s.over_total;
                    st.over_subjects += s.over_subjects;
                }
                Err(e) => {
                    self.err.get_or_insert(e);
                }
            }
        }
        match self.err {
            Some(e) => (self.path, Err(e)),
            None => (self.path, Ok(st)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written blocks read back with the project's own pcapng reader's parser (pcap-parser):
    /// interfaces named, comments kept, the per-key and total limits counted.
    #[test]
    fn frames_are_written_bounded_and_counted() {
        let dir = std::env::temp_dir().join(format!("ro-evidence-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("e.pcapng");
        let mut e = Evidence::create(&p, "test", 2, 3).unwrap();
        let key = QpKey {
            dest_qp: 0x11,
            ..QpKey::default()
        };
        let frame = [0xabu8; 61];
        let dscp = 1 << observer_common::qp::ev::DSCP;
        for i in 0..4 {
            e.offer("cap:eth0", Some(key), dscp, 1_000 + i, &frame, 64)
                .unwrap();
        }
        // a new rule on the same key: written, then the total limit
        let gap = 1 << observer_common::qp::ev::PSN_GAP;
        e.offer("cap:eth1", Some(key), gap | dscp, 2_000, &frame, 64)
            .unwrap();
        e.offer(
            "cap:eth1",
            None,
            1 << offense::PAUSE_802_3X,
            3_000,
            &frame,
            64,
        )
        .unwrap();
        let s = e.finish().unwrap();
        assert_eq!(
            s,
            EvidenceStats {
                frames: 3,
                over_per_key: 2,
                over_total: 1,
                over_subjects: 0,
                over_rate: 0,
                lost: 0,
            }
        );
        let data = std::fs::read(&p).unwrap();
        let (_, blocks) = pcap_parser::pcapng::parse_section(&data).unwrap();
        let mut names = Vec::new();
        let mut comments = Vec::new();
        for b in &blocks.blocks {
            match b {
                pcap_parser::pcapng::Block::InterfaceDescription(i) => {
                    for o in &i.options {
                        if o.code == pcap_parser::pcapng::OptionCode::IfName {
                            names.push(
                                String::from_utf8_lossy(&o.value)
                                    .trim_end_matches('\0')
                                    .to_string(),
                            );
                        }
                    }
                }
                pcap_parser::pcapng::Block::EnhancedPacket(p) => {
                    assert_eq!(&p.data[..p.caplen as usize], &frame[..]);
                    assert_eq!((p.caplen, p.origlen), (61, 64));
                    for o in &p.options {
                        if o.code == pcap_parser::pcapng::OptionCode::Comment {
                            // pcap-parser keeps the option's padding
                            comments.push(
                                String::from_utf8_lossy(&o.value)
                                    .trim_end_matches('\0')
                                    .to_string(),
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        assert_eq!(names, ["cap:eth0", "cap:eth1"]);
        assert_eq!(comments, ["dscp_data", "dscp_data", "dscp_data; psn_gap"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
