//! The Alertmanager push (`--alertmanager URL`, repeatable): every alert posted to the v2 API
//! (`POST /api/v2/alerts`) with `alertname` = the rule, `severity`, the key as labels and what
//! was observed / expected / counted as annotations; resolved (`endsAt` = now) once a hold-down
//! passes with no new alert of the same rule and key.
//!
//! Counting never waits for an Alertmanager: alerts go into a bounded queue per Alertmanager (a
//! full queue drops the batch, counted) that a thread of its own posts from (a dead one delays
//! no other), retrying each Alertmanager
//! with a growing delay (0.5, 1, 2, 4 s) before giving up on the batch (counted). A firing
//! alert carries `endsAt` = its time + 2 hold-downs + 5 min, so Alertmanager resolves it by
//! itself if roce-observe dies before sending the resolution.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::parquet_files::OutputError;
use super::{RunInfo, Sink};
use contract::alert::Alert;
use contract::time::rfc3339;

/// Batches waiting for the poster thread at most; more are dropped (counted).
pub const QUEUE_BATCHES: usize = 64;
/// Retry delays after a failed post, per batch and Alertmanager.
const RETRY: [Duration; 4] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];
/// One request's time limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// At stop, what is still queued gets this long in all (one try per batch).
const STOP_BUDGET: Duration = Duration::from_secs(3);
/// Labels of an alert: the rule, severity and key fields of its JSON line.
const LABELS: [&str; 15] = [
    "severity", "host", "source", "iface", "dir", "point", "to_iface", "to_dir", "class", "src",
    "dst", "qp", "qp_hex", "priority", "subject",
];
const ANNOTATIONS: [&str; 6] = [
    "observed",
    "expected",
    "count",
    "message",
    "origin",
    "first_time",
];

/// Errors of `--alertmanager`.
#[derive(Debug, thiserror::Error)]
pub enum AlertmanagerError {
    #[error("--alertmanager {url}: {why}")]
    Url { url: String, why: String },
    #[error("--alertmanager: starting the poster thread")]
    Thread(#[source] std::io::Error),
}

/// Posting counters, shared with the poster thread.
#[derive(Debug, Default)]
pub struct PushStats {
    /// Alerts (firing or resolved) accepted by every Alertmanager.
    pub sent: AtomicU64,
    /// Alerts dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Alerts given up after the retries (per Alertmanager).
    pub failed: AtomicU64,
    /// Failed posts that were retried.
    pub retries: AtomicU64,
}

/// One alert as Alertmanager keeps it.
struct Active {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    starts_ns: u64,
    last_ns: u64,
}

/// One Alertmanager's queue and poster thread (one each, so a dead one delays no other).
struct Poster {
    tx: Option<SyncSender<Arc<Vec<Value>>>>,
    worker: Option<JoinHandle<()>>,
}

/// The sink: alerts in, batches to each Alertmanager's poster thread.
pub struct AlertmanagerSink {
    posters: Vec<Poster>,
    pending: Vec<Value>,
    active: HashMap<BTreeMap<String, String>, Active>,
    hold_down_ns: u64,
    stats: Arc<PushStats>,
    stopping: Arc<AtomicBool>,
    urls: Vec<String>,
}

/// `http://host:port[/path]` to the v2 alerts endpoint; refuses what cannot be posted to.
pub fn endpoint(url: &str) -> Result<hyper::Uri, AlertmanagerError> {
    let bad = |why: &str| AlertmanagerError::Url {
        url: url.to_string(),
        why: why.to_string(),
    };
    let u: hyper::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    match u.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(bad(
                "https is not supported: give an HTTP listener (Alertmanager's own, or a local TLS relay)",
            ));
        }
        _ => return Err(bad("expected http://HOST:PORT")),
    }
    if u.host().is_none() {
        return Err(bad("no host"));
    }
    let path = u.path().trim_end_matches('/');
    let path = if path.ends_with("/api/v2/alerts") {
        path.to_string()
    } else {
        format!("{path}/api/v2/alerts")
    };
    let auth = u.authority().map(|a| a.as_str()).unwrap_or_default();
    format!("http://{auth}{path}")
        .parse()
        .map_err(|_| bad("not a URL"))
}

impl AlertmanagerSink {
    /// Checks every URL and starts the poster thread.
    pub fn start(urls: &[String], hold_down_ns: u64) -> Result<Self, AlertmanagerError> {
        let uris = urls
            .iter()
            .map(|u| endpoint(u))
            .collect::<Result<Vec<_>, _>>()?;
        let stats = Arc::new(PushStats::default());
        let stopping = Arc::new(AtomicBool::new(false));
        let mut posters = Vec::new();
        for uri in uris {
            let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE_BATCHES);
            let (st, sp) = (Arc::clone(&stats), Arc::clone(&stopping));
            let worker = std::thread::Builder::new()
                .name("roce-alertmanager".into())
                .spawn(move || poster(rx, uri, st, sp))
                .map_err(AlertmanagerError::Thread)?;
            posters.push(Poster {
                tx: Some(tx),
                worker: Some(worker),
            });
        }
        Ok(AlertmanagerSink {
            posters,
            pending: Vec::new(),
            active: HashMap::new(),
            hold_down_ns,
            stats,
            stopping,
            urls: urls.to_vec(),
        })
    }

    fn wire(a: &Active, ends_ns: u64) -> Value {
        json!({
            "labels": a.labels,
            "annotations": a.annotations,
            "startsAt": rfc3339(a.starts_ns),
            "endsAt": rfc3339(ends_ns),
        })
    }

    /// Alerts whose hold-down passed with no new occurrence by `t_ns`: resolved.
    fn resolve_quiet(&mut self, t_ns: u64) {
        let hold = self.hold_down_ns;
        let quiet: Vec<_> = self
            .active
            .iter()
            .filter(|(_, a)| a.last_ns.saturating_add(hold) <= t_ns)
            .map(|(k, _)| k.clone())
            .collect();
        for k in quiet {
            if let Some(a) = self.active.remove(&k) {
                self.pending.push(Self::wire(&a, t_ns.max(a.last_ns)));
            }
        }
    }

    fn send_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = Arc::new(std::mem::take(&mut self.pending));
        let n = batch.len() as u64;
        for (p, url) in self.posters.iter().zip(&self.urls) {
            let Some(tx) = &p.tx else {
                continue;
            };
            match tx.try_send(Arc::clone(&batch)) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.stats.dropped.fetch_add(n, Ordering::Relaxed);
                    tracing::warn!(
                        url,
                        alerts = n,
                        "Alertmanager queue full: alerts dropped (counted)"
                    );
                }
            }
        }
    }
}

/// Labels and annotations of an alert, from its JSON line (strings as they are, numbers and
/// booleans as text, nulls left out).
fn label_sets(a: &Alert, run: &RunInfo) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let j = a.json(&run.host, run.source);
    let text = |v: &Value| match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    let mut labels = BTreeMap::new();
    labels.insert("alertname".to_string(), a.rule.name().to_string());
    for k in LABELS {
        if let Some(v) = j.get(k).and_then(text) {
            labels.insert(k.to_string(), v);
        }
    }
    let mut ann = BTreeMap::new();
    for k in ANNOTATIONS {
        if let Some(v) = j.get(k).and_then(text) {
            ann.insert(k.to_string(), v);
        }
    }
    (labels, ann)
}

impl Sink for AlertmanagerSink {
    fn name(&self) -> &'static str {
        "alertmanager"
    }
    fn alert(&mut self, a: &Alert, run: &RunInfo) {
        let (labels, annotations) = label_sets(a, run);
        let hold = self.hold_down_ns;
        let e = self.active.entry(labels.clone()).or_insert(Active {
            labels,
            annotations: BTreeMap::new(),
            starts_ns: a.first_ns.min(a.time_ns),
            last_ns: a.time_ns,
        });
        e.annotations = annotations;
        e.last_ns = e.last_ns.max(a.time_ns);
        let ends = a
            .time_ns
            .saturating_add(hold.saturating_mul(2))
            .saturating_add(300_000_000_000);
        let w = Self::wire(e, ends);
        self.pending.push(w);
    }
    fn flush(&mut self, _t_ns: u64) -> Result<(), OutputError> {
        self.send_pending();
        Ok(())
    }
    fn end_interval(&mut self, t_ns: u64) -> Result<(), OutputError> {
        self.resolve_quiet(t_ns);
        self.send_pending();
        Ok(())
    }
    fn finish(&mut self, _t_ns: u64) -> Result<(), OutputError> {
        // Firing alerts stay firing (the condition is not known to be over); they expire by
        // their endsAt if nothing renews them.
        self.send_pending();
        self.stop_posters();
        Ok(())
    }
    fn stats(&self) -> Option<Value> {
        let s = &self.stats;
        Some(json!({
            "urls": self.urls,
            "sent": s.sent.load(Ordering::Relaxed),
            "dropped": s.dropped.load(Ordering::Relaxed),
            "failed": s.failed.load(Ordering::Relaxed),
            "retries": s.retries.load(Ordering::Relaxed),
        }))
    }
}

impl AlertmanagerSink {
    /// Closes every queue; each poster gives what is left one try within [`STOP_BUDGET`].
    fn stop_posters(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        for p in &mut self.posters {
            drop(p.tx.take());
        }
        for p in &mut self.posters {
            if let Some(w) = p.worker.take() {
                let _ = w.join();
            }
        }
    }
}

impl Drop for AlertmanagerSink {
    fn drop(&mut self) {
        self.stop_posters();
    }
}

/// One Alertmanager's poster thread: each batch with retries; at stop, what is left gets one
/// try within [`STOP_BUDGET`].
fn poster(
    rx: Receiver<Arc<Vec<Value>>>,
    uri: hyper::Uri,
    stats: Arc<PushStats>,
    stopping: Arc<AtomicBool>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "Alertmanager poster: no runtime");
            return;
        }
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut deadline: Option<Instant> = None;
    while let Ok(batch) = rx.recv() {
        let body = bytes::Bytes::from(serde_json::to_string(&*batch).unwrap_or_default());
        let n = batch.len() as u64;
        let stop = stopping.load(Ordering::Relaxed);
        if stop && deadline.is_none() {
            deadline = Some(Instant::now() + STOP_BUDGET);
        }
        let out_of_time = deadline.is_some_and(|d| Instant::now() >= d);
        let tries = if stop { 1 } else { RETRY.len() + 1 };
        let ok = !out_of_time
            && rt.block_on(post_with_retries(
                &client, &uri, &body, tries, &stats, &stopping,
            ));
        if ok {
            stats.sent.fetch_add(n, Ordering::Relaxed);
        } else {
            stats.failed.fetch_add(n, Ordering::Relaxed);
            tracing::warn!(url = %uri, alerts = n, "could not post alerts to Alertmanager (counted)");
        }
    }
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

async fn post_with_retries(
    client: &Client,
    uri: &hyper::Uri,
    body: &bytes::Bytes,
    tries: usize,
    stats: &PushStats,
    stopping: &AtomicBool,
) -> bool {
    for i in 0..tries {
        if i > 0 {
            // a stop cuts the wait short (and ends the retries)
            stats.retries.fetch_add(1, Ordering::Relaxed);
            let until = Instant::now() + RETRY[(i - 1).min(RETRY.len() - 1)];
            while Instant::now() < until && !stopping.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if stopping.load(Ordering::Relaxed) {
                return false;
            }
        }
        let req = hyper::Request::post(uri.clone())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(http_body_util::Full::new(body.clone()));
        let Ok(req) = req else {
            return false;
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, client.request(req)).await {
            Ok(Ok(resp)) if resp.status().is_success() => return true,
            Ok(Ok(resp)) => {
                tracing::debug!(url = %uri, status = %resp.status(), "Alertmanager refused the alerts")
            }
            Ok(Err(e)) => tracing::debug!(url = %uri, error = %e, "posting to Alertmanager failed"),
            Err(_) => tracing::debug!(url = %uri, "posting to Alertmanager timed out"),
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = |u: &str| endpoint(u).map(|u| u.to_string());
        assert_eq!(
            e("http://127.0.0.1:9093").unwrap(),
            "http://127.0.0.1:9093/api/v2/alerts"
        );
        assert_eq!(
            e("http://am:9093/prefix/").unwrap(),
            "http://am:9093/prefix/api/v2/alerts"
        );
        assert_eq!(
            e("http://am:9093/api/v2/alerts").unwrap(),
            "http://am:9093/api/v2/alerts"
        );
        assert!(
            e("https://am:9093")
                .unwrap_err()
                .to_string()
                .contains("https")
        );
        assert!(e("am:9093").is_err());
        assert!(e("not a url").is_err());
    }
}
