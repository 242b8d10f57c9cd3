//! The Alertmanager push (`--alertmanager URL`, repeatable): every alert posted to the v2 API
//! (`POST /api/v2/alerts`) with `alertname` = the rule, `severity`, the key as labels and what
//! was observed / expected / counted as annotations; resolved (`endsAt` = now) once the policy's
//! `resolve_after_s` (default 5 min) passes with no new alert of the same rule and key.
//!
//! Counting never waits for an Alertmanager: each alert goes into a bounded queue per
//! Alertmanager ([`QUEUE_ALERTS`]; when it is full the oldest alert is dropped, counted and
//! logged once per interval) that a thread of its own posts from in batches of at most
//! [`MAX_BATCH`] alerts (a dead one delays no other), retrying each Alertmanager with a growing
//! delay (0.5, 1, 2, 4 s) before giving up on the batch (counted). A stop ends the posting
//! within [`STOP_BOUND`]. A firing
//! alert carries `endsAt` = its time + 2 × `resolve_after_s` + 5 min, so Alertmanager resolves it by
//! itself if roce-observe dies before sending the resolution.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::parquet_files::OutputError;
use super::{RunInfo, Sink};
use contract::alert::Alert;
use contract::time::rfc3339;

/// Alerts waiting for one Alertmanager's poster thread at most; when full, the oldest is
/// dropped (counted).
pub const QUEUE_ALERTS: usize = 20_000;
/// Alerts in one POST at most.
pub const MAX_BATCH: usize = 1_000;
/// Alert keys followed for their resolution at most; an alert of a new key beyond them is
/// posted firing (Alertmanager resolves it by its `endsAt`) and counted `untracked`.
pub const MAX_ACTIVE: usize = 100_000;
/// Retry delays after a failed post, per batch and Alertmanager.
const RETRY: [Duration; 4] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];
/// One request's time limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// At stop, what is still queued gets one try per batch until this long after the stop; then
/// the rest is counted failed and the posters end (a request in flight is cut there too).
pub const STOP_BOUND: Duration = Duration::from_secs(8);
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
    /// `url` with any password replaced ([`redact`]).
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
    /// Alerts dropped because the queue was full (the oldest first).
    pub dropped: AtomicU64,
    /// Alerts posted without following their key for the resolution ([`MAX_ACTIVE`]).
    pub untracked: AtomicU64,
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

/// One Alertmanager's queue of alerts, bounded: a full one drops its oldest.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

#[derive(Default)]
struct QueueState {
    alerts: VecDeque<Arc<Value>>,
    closed: bool,
}

impl Queue {
    /// Adds `a`, dropping the oldest when full; never waits for the poster (the lock is held
    /// for a push or a take of one batch only). True if one was dropped.
    fn push(&self, a: Arc<Value>) -> bool {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let dropped = g.alerts.len() >= QUEUE_ALERTS && g.alerts.pop_front().is_some();
        g.alerts.push_back(a);
        drop(g);
        self.ready.notify_one();
        dropped
    }
    /// The next batch (at most [`MAX_BATCH`]), waiting for one; `None` once closed and empty.
    fn take(&self) -> Option<Vec<Arc<Value>>> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while g.alerts.is_empty() && !g.closed {
            g = self.ready.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        if g.alerts.is_empty() {
            return None;
        }
        let n = g.alerts.len().min(MAX_BATCH);
        Some(g.alerts.drain(..n).collect())
    }
    fn close(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
        self.ready.notify_all();
    }
    fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .alerts
            .len()
    }
}

/// One Alertmanager's queue and poster thread (one each, so a dead one delays no other).
struct Poster {
    queue: Arc<Queue>,
    worker: Option<JoinHandle<()>>,
}

/// The sink: alerts in, batches to each Alertmanager's poster thread.
pub struct AlertmanagerSink {
    posters: Vec<Poster>,
    active: HashMap<BTreeMap<String, String>, Active>,
    resolve_after_ns: u64,
    stats: Arc<PushStats>,
    stopping: Arc<AtomicBool>,
    /// When the stop was asked (the posters end by it + [`STOP_BOUND`]).
    stop_at: Arc<OnceLock<Instant>>,
    urls: Vec<String>,
    /// `dropped` / `untracked` as last logged (one warning per interval at most).
    logged: (u64, u64),
}

/// Where one Alertmanager's alerts go.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The v2 alerts endpoint, without user information.
    pub uri: hyper::Uri,
    /// `Authorization: Basic ...` from the URL's `user:password@` (percent-decoded), if any.
    authorization: Option<String>,
    /// The URL as logs and summary.json show it: the password replaced by `***`.
    pub shown: String,
}

/// `url` with the password of its user information (`user:password@`) replaced by `***`, for
/// logs, errors and summary.json.
pub fn redact(url: &str) -> String {
    let Some(s) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let end = url[s..].find(['/', '?', '#']).map_or(url.len(), |i| s + i);
    match url[s..end].rfind('@') {
        Some(at) => {
            let user = url[s..s + at].split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..s], &url[s + at..])
        }
        None => url.to_string(),
    }
}

/// `http://[user:password@]host:port[/path]` to the v2 alerts endpoint, with HTTP basic
/// authentication when the URL has user information; refuses what cannot be posted to.
pub fn endpoint(url: &str) -> Result<Endpoint, AlertmanagerError> {
    use base64::Engine as _;
    let shown = redact(url);
    let bad = |why: &str| AlertmanagerError::Url {
        url: shown.clone(),
        why: why.to_string(),
    };
    // user information is not part of an HTTP request's URI: taken off before parsing
    let (url, authorization) = match url.find("://").map(|i| i + 3) {
        Some(s) => {
            let end = url[s..].find(['/', '?', '#']).map_or(url.len(), |i| s + i);
            match url[s..end].rfind('@') {
                Some(at) => {
                    let info = &url[s..s + at];
                    let (user, pass) = info.split_once(':').unwrap_or((info, ""));
                    let dec = |x: &str| {
                        percent_encoding::percent_decode_str(x)
                            .decode_utf8()
                            .map(|c| c.into_owned())
                            .map_err(|_| bad("the user information is not UTF-8 once decoded"))
                    };
                    let creds = format!("{}:{}", dec(user)?, dec(pass)?);
                    let header = format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(creds)
                    );
                    (format!("{}{}", &url[..s], &url[s + at + 1..]), Some(header))
                }
                None => (url.to_string(), None),
            }
        }
        None => (url.to_string(), None),
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
    let uri = format!("http://{auth}{path}")
        .parse()
        .map_err(|_| bad("not a URL"))?;
    Ok(Endpoint {
        uri,
        authorization,
        shown,
    })
}

impl AlertmanagerSink {
    /// Checks every URL and starts the poster thread.
    pub fn start(urls: &[String], resolve_after_ns: u64) -> Result<Self, AlertmanagerError> {
        let uris = urls
            .iter()
            .map(|u| endpoint(u))
            .collect::<Result<Vec<_>, _>>()?;
        let shown: Vec<String> = uris.iter().map(|e| e.shown.clone()).collect();
        let stats = Arc::new(PushStats::default());
        let stopping = Arc::new(AtomicBool::new(false));
        let stop_at = Arc::new(OnceLock::new());
        let mut posters = Vec::new();
        for uri in uris {
            let queue = Arc::new(Queue::default());
            let (q, st, sp, sa) = (
                Arc::clone(&queue),
                Arc::clone(&stats),
                Arc::clone(&stopping),
                Arc::clone(&stop_at),
            );
            let worker = std::thread::Builder::new()
                .name("roce-alertmanager".into())
                .spawn(move || poster(&q, uri, &st, &sp, &sa))
                .map_err(AlertmanagerError::Thread)?;
            posters.push(Poster {
                queue,
                worker: Some(worker),
            });
        }
        Ok(AlertmanagerSink {
            posters,
            active: HashMap::new(),
            resolve_after_ns,
            stats,
            stopping,
            stop_at,
            urls: shown,
            logged: (0, 0),
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

    /// Alerts whose resolve delay passed with no new occurrence by `t_ns`: resolved.
    fn resolve_quiet(&mut self, t_ns: u64) {
        let hold = self.resolve_after_ns;
        let quiet: Vec<_> = self
            .active
            .iter()
            .filter(|(_, a)| a.last_ns.saturating_add(hold) <= t_ns)
            .map(|(k, _)| k.clone())
            .collect();
        for k in quiet {
            if let Some(a) = self.active.remove(&k) {
                self.send(Self::wire(&a, t_ns.max(a.last_ns)));
            }
        }
    }

    /// Into every Alertmanager's queue, never waiting (a full queue drops its oldest).
    fn send(&self, w: Value) {
        let w = Arc::new(w);
        for p in &self.posters {
            if p.queue.push(Arc::clone(&w)) {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Alerts waiting in the queues now (all Alertmanagers).
    pub fn queued(&self) -> usize {
        self.posters.iter().map(|p| p.queue.len()).sum()
    }

    /// The counts so far.
    pub fn push_stats(&self) -> &PushStats {
        &self.stats
    }

    /// One warning with the counts when alerts were dropped or left untracked since the last.
    fn log_losses(&mut self) {
        let now = (
            self.stats.dropped.load(Ordering::Relaxed),
            self.stats.untracked.load(Ordering::Relaxed),
        );
        if now != self.logged {
            tracing::warn!(
                urls = ?self.urls,
                dropped = now.0 - self.logged.0,
                dropped_total = now.0,
                untracked = now.1 - self.logged.1,
                untracked_total = now.1,
                queued = self.queued(),
                "Alertmanager cannot keep up: oldest alerts dropped from the queue (counted in summary.json)"
            );
            self.logged = now;
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
    // an alert over many keys: how many, and the first of them, one per line
    if a.subjects > 1 {
        ann.insert("subjects".into(), a.subjects.to_string());
        let mut keys: Vec<&str> = a.keys.iter().take(20).map(String::as_str).collect();
        let more = format!("and {} more", a.subjects.saturating_sub(20));
        if a.subjects > 20 {
            keys.push(&more);
        }
        ann.insert("keys".into(), keys.join("\n"));
    }
    (labels, ann)
}

impl Sink for AlertmanagerSink {
    fn name(&self) -> &'static str {
        "alertmanager"
    }
    fn alert(&mut self, a: &Alert, run: &RunInfo) {
        let (labels, annotations) = label_sets(a, run);
        let hold = self.resolve_after_ns;
        let ends = a
            .time_ns
            .saturating_add(hold.saturating_mul(2))
            .saturating_add(300_000_000_000);
        let new = Active {
            labels,
            annotations,
            starts_ns: a.first_ns.min(a.time_ns),
            last_ns: a.time_ns,
        };
        let w = if let Some(e) = self.active.get_mut(&new.labels) {
            e.annotations = new.annotations;
            e.last_ns = e.last_ns.max(a.time_ns);
            Self::wire(e, ends)
        } else if self.active.len() < MAX_ACTIVE {
            let w = Self::wire(&new, ends);
            self.active.insert(new.labels.clone(), new);
            w
        } else {
            self.stats.untracked.fetch_add(1, Ordering::Relaxed);
            Self::wire(&new, ends)
        };
        self.send(w);
    }
    /// Alerts dropped during the interval are an error (so the pipeline raises
    /// `output_write_failed` naming this output): a flood that overruns the queue is alerted,
    /// in alerts.jsonl and on stderr, not only counted.
    fn end_interval(&mut self, t_ns: u64) -> Result<(), OutputError> {
        self.resolve_quiet(t_ns);
        let dropped_before = self.logged.0;
        self.log_losses();
        let dropped_total = self.logged.0;
        if dropped_total > dropped_before {
            return Err(OutputError::AlertsDropped {
                to: self.urls.join(", "),
                dropped: dropped_total - dropped_before,
                dropped_total,
            });
        }
        Ok(())
    }
    fn finish(&mut self, _t_ns: u64) -> Result<(), OutputError> {
        // Firing alerts stay firing (the condition is not known to be over); they expire by
        // their endsAt if nothing renews them.
        self.stop_posters();
        self.log_losses();
        Ok(())
    }
    fn stats(&self) -> Option<Value> {
        let s = &self.stats;
        Some(json!({
            "urls": self.urls,
            "sent": s.sent.load(Ordering::Relaxed),
            "dropped": s.dropped.load(Ordering::Relaxed),
            "untracked": s.untracked.load(Ordering::Relaxed),
            "failed": s.failed.load(Ordering::Relaxed),
            "retries": s.retries.load(Ordering::Relaxed),
        }))
    }
}

impl AlertmanagerSink {
    /// Closes every queue; each poster gives what is left one try per batch, and ends within
    /// [`STOP_BOUND`] of now.
    fn stop_posters(&mut self) {
        let _ = self.stop_at.set(Instant::now());
        self.stopping.store(true, Ordering::Relaxed);
        for p in &self.posters {
            p.queue.close();
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

/// One Alertmanager's poster thread: each batch (at most [`MAX_BATCH`]) with retries; at stop,
/// what is left gets one try per batch until [`STOP_BOUND`] after the stop, the rest is counted
/// failed.
fn poster(
    queue: &Queue,
    ep: Endpoint,
    stats: &PushStats,
    stopping: &AtomicBool,
    stop_at: &OnceLock<Instant>,
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
    let mut out_of_time = 0u64;
    let uri = &ep.shown;
    while let Some(batch) = queue.take() {
        let n = batch.len() as u64;
        let end = stop_at.get().map(|t| *t + STOP_BOUND);
        if end.is_some_and(|e| Instant::now() >= e) {
            out_of_time += n;
            stats.failed.fetch_add(n, Ordering::Relaxed);
            continue;
        }
        let refs: Vec<&Value> = batch.iter().map(|a| &**a).collect();
        let body = bytes::Bytes::from(serde_json::to_string(&refs).unwrap_or_default());
        let tries = if stopping.load(Ordering::Relaxed) {
            1
        } else {
            RETRY.len() + 1
        };
        let ok = rt.block_on(post_with_retries(
            &client, &ep, &body, tries, stats, stopping, stop_at,
        ));
        if ok {
            stats.sent.fetch_add(n, Ordering::Relaxed);
        } else {
            stats.failed.fetch_add(n, Ordering::Relaxed);
            tracing::warn!(url = %uri, alerts = n, "could not post alerts to Alertmanager (counted)");
        }
    }
    if out_of_time > 0 {
        tracing::warn!(url = %uri, alerts = out_of_time, bound_s = STOP_BOUND.as_secs(),
            "alerts still queued at the stop's bound: not posted (counted failed)");
    }
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

async fn post_with_retries(
    client: &Client,
    ep: &Endpoint,
    body: &bytes::Bytes,
    tries: usize,
    stats: &PushStats,
    stopping: &AtomicBool,
    stop_at: &OnceLock<Instant>,
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
        let uri = &ep.shown;
        let mut req = hyper::Request::post(ep.uri.clone())
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(a) = &ep.authorization {
            req = req.header(hyper::header::AUTHORIZATION, a);
        }
        let req = req.body(http_body_util::Full::new(body.clone()));
        let Ok(req) = req else {
            return false;
        };
        // after a stop, no request outlives the stop's bound (one in flight at the stop is
        // already bounded by its own timeout, shorter than the bound)
        let limit = match stop_at.get() {
            Some(t) => (*t + STOP_BOUND)
                .saturating_duration_since(Instant::now())
                .min(REQUEST_TIMEOUT),
            None => REQUEST_TIMEOUT,
        };
        match tokio::time::timeout(limit, client.request(req)).await {
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
        let e = |u: &str| endpoint(u).map(|u| u.uri.to_string());
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
        // user information: basic authentication, never shown
        let ep = endpoint("http://ops:s%40cret@am:9093/x").unwrap();
        assert_eq!(ep.uri.to_string(), "http://am:9093/x/api/v2/alerts");
        assert_eq!(ep.authorization.as_deref(), Some("Basic b3BzOnNAY3JldA=="));
        assert_eq!(ep.shown, "http://ops:***@am:9093/x");
        assert_eq!(redact("http://am:9093"), "http://am:9093");
        assert_eq!(
            redact("http://ops@am:9093/a@b"),
            "http://ops:***@am:9093/a@b"
        );
        let err = endpoint("https://ops:s3cret@am:9093")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ops:***@am") && !err.contains("s3cret"),
            "{err}"
        );
    }

    /// Credentials in the URL reach Alertmanager as basic authentication and nowhere else:
    /// not in the request line, the stats (summary.json) or a log line.
    #[test]
    fn credentials_in_the_url_are_sent_as_basic_auth_and_never_shown() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::<String>::new()));
        let h2 = Arc::clone(&heads);
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut buf = Vec::new();
                let mut chunk = [0u8; 65536];
                while let Ok(n) = c.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(p) = text.find("\r\n\r\n") {
                        let len: usize = text[..p]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().to_string())
                            })
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        if buf.len() >= p + 4 + len {
                            h2.lock().unwrap().push(text[..p].to_string());
                            let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                            buf.drain(..p + 4 + len);
                        }
                    }
                }
            }
        });
        let url = format!("http://ops:s3cret@{addr}");
        let mut s = AlertmanagerSink::start(&[url], 10_000_000_000).unwrap();
        s.alert(&alert(1), &run());
        s.end_interval(2_000_000_000).unwrap();
        s.finish(3_000_000_000).unwrap();
        let heads = heads.lock().unwrap().clone();
        assert_eq!(heads.len(), 1, "{heads:?}");
        let h = &heads[0];
        assert!(h.starts_with("POST /api/v2/alerts HTTP/1.1"), "{h}");
        assert!(
            h.to_ascii_lowercase()
                .contains("authorization: basic b3bzonmzy3jlda=="),
            "{h}"
        );
        let j = s.stats().unwrap().to_string();
        assert!(!j.contains("s3cret") && j.contains("ops:***@"), "{j}");
        assert_eq!(s.push_stats().sent.load(Ordering::Relaxed), 1);
    }

    use contract::alert::{AlertKey, Rule};
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn alert(i: u32) -> Alert {
        Alert::candidate(
            Rule::PfcStorm,
            AlertKey {
                iface: "e".into(),
                qp: Some(i),
                ..Default::default()
            },
            1_000_000_000 + i as u64,
            "x".into(),
            "y".into(),
            1,
            "interval",
        )
    }

    fn run() -> RunInfo {
        RunInfo {
            host: "h".into(),
            source: "live",
        }
    }

    /// Accepts connections and never answers them, until dropped.
    struct Mute {
        addr: std::net::SocketAddr,
        done: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    }

    impl Mute {
        fn start() -> Mute {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.set_nonblocking(true).unwrap();
            let addr = l.local_addr().unwrap();
            let done = Arc::new(AtomicBool::new(false));
            let d = Arc::clone(&done);
            let thread = std::thread::spawn(move || {
                let mut held = Vec::new();
                while !d.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((c, _)) => held.push(c),
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
            Mute {
                addr,
                done,
                thread: Some(thread),
            }
        }
    }

    impl Drop for Mute {
        fn drop(&mut self) {
            self.done.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// One HTTP/1.1 connection of the answering stand-in: every POST's alert count into
    /// `sizes`, each answered 200, until the client closes.
    fn answer(mut c: TcpStream, sizes: &Mutex<Vec<usize>>) {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65536];
        loop {
            let head_end = loop {
                if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break p + 4;
                }
                match c.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < head_end + len {
                match c.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let body: Vec<Value> = serde_json::from_slice(&buf[head_end..head_end + len]).unwrap();
            sizes.lock().unwrap().push(body.len());
            buf.drain(..head_end + len);
            if c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .is_err()
            {
                return;
            }
        }
    }

    /// A flood of alerts to an Alertmanager that accepts connections and never answers: handing
    /// them over never waits, the queue stays bounded (the oldest dropped and counted), and the
    /// stop ends within its bound with every alert accounted (dropped or failed).
    #[test]
    fn a_flood_to_an_alertmanager_that_never_answers_is_bounded() {
        let mute = Mute::start();
        let mut s =
            AlertmanagerSink::start(&[format!("http://{}", mute.addr)], 10_000_000_000).unwrap();
        let n: u32 = 50_000;
        for i in 0..n {
            s.alert(&alert(i), &run());
        }
        // the interval's drops are an error: the pipeline raises output_write_failed on it
        let err = s.end_interval(2_000_000_000).unwrap_err();
        let q = s.queued();
        let dropped = s.push_stats().dropped.load(Ordering::Relaxed);
        assert!(
            matches!(err, OutputError::AlertsDropped { dropped: d, dropped_total: t, .. } if d == dropped && t == dropped),
            "{err}"
        );
        assert!(dropped > 0);
        assert!(q <= QUEUE_ALERTS, "queued {q}");
        // what is not queued was dropped, but for one batch at most in the poster's hands
        assert!(
            dropped as usize + q + MAX_BATCH >= n as usize && dropped as usize + q <= n as usize,
            "dropped {dropped} queued {q}"
        );
        let t = Instant::now();
        s.finish(3_000_000_000).unwrap();
        let took = t.elapsed();
        assert!(took < STOP_BOUND + Duration::from_secs(4), "{took:?}");
        let st = s.push_stats();
        assert_eq!(st.sent.load(Ordering::Relaxed), 0);
        assert_eq!(
            st.dropped.load(Ordering::Relaxed) + st.failed.load(Ordering::Relaxed),
            n as u64,
            "every alert dropped or failed"
        );
        let j = s.stats().unwrap();
        assert_eq!(j["dropped"], dropped);
    }

    /// An Alertmanager that answers gets every alert, in POSTs of at most [`MAX_BATCH`].
    #[test]
    fn posts_carry_at_most_max_batch_alerts() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let sz = Arc::clone(&sizes);
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let sz = Arc::clone(&sz);
                std::thread::spawn(move || answer(c, &sz));
            }
        });
        let mut s = AlertmanagerSink::start(&[format!("http://{addr}")], 10_000_000_000).unwrap();
        let n: u32 = 5_500;
        for i in 0..n {
            s.alert(&alert(i), &run());
        }
        s.end_interval(2_000_000_000).unwrap();
        s.finish(3_000_000_000).unwrap();
        let sizes = sizes.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), n as usize, "{sizes:?}");
        assert!(sizes.iter().all(|&k| k <= MAX_BATCH), "{sizes:?}");
        assert!(sizes.len() >= (n as usize).div_ceil(MAX_BATCH));
        assert_eq!(s.push_stats().sent.load(Ordering::Relaxed), n as u64);
        assert_eq!(s.push_stats().dropped.load(Ordering::Relaxed), 0);
    }
}
