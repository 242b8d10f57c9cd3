//! A [`Consumer`] run on its own thread: the source's packet path hands each call over and goes
//! on with the next packet while the consumer (the pipeline's rows, rules, Parquet encoding,
//! summaries) works beside it.
//!
//! - **Compact and sparse**: a snapshot is handed over as the entries that changed since the
//!   interface's previous one ([`super::Changed`]), each kept compactly (its counters and its
//!   histogram blocks that are not zero: [`CompactQps`]), and given to the consumer as a sparse
//!   snapshot ([`super::snapshot::Sparse`]): the unchanged keys' values are the consumer's own
//!   (the collector keeps every key's last values). The first snapshot of an interface is
//!   sparse too when it lists every entry as changed (replay's do); one that does not follow
//!   the last handed over is handed over whole.
//! - **Bounded**: at most [`MAX_ENTRIES`] changed entries of snapshots are handed over and
//!   not yet done beyond one snapshot (the producer waits before it copies the next), and at
//!   most [`MAX_ITEMS`] events and pauses. Memory grows with keys (an interval's changed
//!   entries, compactly, and [`SPARES`] buffer), never with packets or intervals; a producer
//!   faster than its consumer waits instead of queueing.
//! - **Same calls, same order**: the consumer sees the calls an inline consumer sees, in the
//!   order they were made (events are gathered into batches between the other calls), each
//!   snapshot with the same ids, change list and values (sparse, and with the changed entries'
//!   non-zero blocks said): the collector's outputs are the same bytes.
//! - **Errors** of the consumer come back at the producer's next call (the consumer's thread
//!   goes on with the calls after it, as an inline consumer does), or from [`Offload::finish`].
//! - A panic of the consumer's thread is carried to the thread that calls [`Offload::finish`].
//! - **Lanes** ([`Offload::start_lanes`]): several producers on threads of their own (replay's
//!   readers of separate observation points), whose calls the consumer does one lane after
//!   another, as if one producer had made them; a later lane is bounded by [`AHEAD_ENTRIES`]
//!   and paced ([`Pace`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TryRecvError, channel, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use observer_common::maps::{
    Event, IfaceStats, MacKey, PauseEvent, PfcCounters, QpKey, QpValue, dir,
};

use super::snapshot::{CompactQps, Sparse};
use super::{Changed, Consumer, ConsumerError, Snapshot};

/// Events and pauses gathered before they are handed over in one message.
const BATCH: usize = 4096;

/// Spare buffers of snapshot entries kept for the producer at most.
const SPARES: usize = 1;

/// Events and pauses handed over and not yet done at most (beyond one batch).
const MAX_ITEMS: usize = 64 * BATCH;

/// Changed entries of snapshots handed over and not yet done at most, beyond one snapshot
/// (about 15 MB compactly): a second interval of a few keys is copied while the consumer
/// writes the first, one of many keys waits for it (its copy would cost memory per key).
const MAX_ENTRIES: usize = 40_000;

/// Changed entries a lane after the first ([`Offload::start_lanes`]) may hand over beyond
/// one snapshot while the consumer is still on an earlier lane (about 24 MB compactly): a
/// second capture is read beside the first for as many intervals as this holds, then its
/// reader waits for the outputs. It binds only where the consumer is the slower side (many
/// changed keys an interval), where reading further ahead would gain nothing.
const AHEAD_ENTRIES: usize = 65_536;

/// What is handed over and not yet done: the producer waits while [`MAX_ENTRIES`] changed
/// entries of snapshots are (before it copies another) or [`MAX_ITEMS`] events and pauses.
#[derive(Default)]
struct InFlight {
    /// Entries of the snapshots handed over and not yet done.
    entries: usize,
    items: usize,
    /// The consumer's thread ended (normally, or it panicked): nothing more is done.
    closed: bool,
}

struct Gate {
    state: Mutex<InFlight>,
    cv: Condvar,
    /// An error waits in the error channel (read at every call: cheaper than the channel).
    error: AtomicBool,
    /// Changed entries in flight at most beyond one snapshot ([`MAX_ENTRIES`], or
    /// [`AHEAD_ENTRIES`] for a lane after the first).
    max_entries: usize,
}

impl Gate {
    fn new(max_entries: usize) -> Gate {
        Gate {
            state: Mutex::new(InFlight::default()),
            cv: Condvar::new(),
            error: AtomicBool::new(false),
            max_entries,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InFlight> {
        // the counts stay consistent when a holder panicked: each update is one statement
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `entries` and `items` more may be in flight, then counts them. False
    /// when the consumer's thread has ended.
    fn enter(&self, entries: usize, items: usize) -> bool {
        let mut st = self.lock();
        while !st.closed
            && ((entries > 0 && st.entries > 0 && st.entries + entries > self.max_entries)
                || (items > 0 && st.items > 0 && st.items + items > MAX_ITEMS))
        {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.entries += entries;
        st.items += items;
        !st.closed
    }

    fn leave(&self, entries: usize, items: usize) {
        let mut st = self.lock();
        st.entries -= entries;
        st.items -= items;
        self.cv.notify_all();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.cv.notify_all();
    }
}

/// Closes the lanes' gates when the consumer's thread ends, also by a panic.
struct CloseOnDrop(Vec<Arc<Gate>>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        for g in &self.0 {
            g.close();
        }
    }
}

/// Which lanes' producers may read ahead now: those within `free` lanes after the one the
/// consumer does, always; the others only while the consumer waits for its lane's next call
/// (its thread idle). On 2 cores with the outputs on, a second reader would otherwise take CPU
/// from the outputs' thread, the slower side with many keys; a reader waiting here costs none.
pub struct Pace {
    st: Mutex<PaceState>,
    cv: Condvar,
    free: usize,
}

struct PaceState {
    /// The lane the consumer does.
    current: usize,
    /// The consumer is doing a call (not waiting for one).
    busy: bool,
}

impl Pace {
    fn new(free: usize) -> Pace {
        Pace {
            st: Mutex::new(PaceState {
                current: 0,
                busy: false,
            }),
            cv: Condvar::new(),
            free,
        }
    }

    fn set(&self, f: impl FnOnce(&mut PaceState)) {
        f(&mut self.st.lock().unwrap_or_else(|p| p.into_inner()));
        self.cv.notify_all();
    }

    /// Waits while `lane` may not read ahead: it is more than `free` lanes after the
    /// consumer's and the consumer is busy. Bounded: after [`PACE_WAIT_MAX`] it goes on.
    fn wait_turn(&self, lane: usize) {
        let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
        let deadline = std::time::Instant::now() + PACE_WAIT_MAX;
        while lane > st.current + self.free && st.busy {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .cv
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// The longest one [`Pacer::wait`] waits (the consumer is busy for one call at a time, an
/// interval's rows at the most).
const PACE_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// A lane's producer's side of [`Pace`], for its reader to call between frames.
#[derive(Clone)]
pub struct Pacer {
    pace: Arc<Pace>,
    lane: usize,
}

impl Pacer {
    /// Returns when this lane may read on.
    pub fn wait(&self) {
        self.pace.wait_turn(self.lane);
    }
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pacer(lane {}, {} free)", self.lane, self.pace.free)
    }
}

/// One hand-over: calls in order, with the snapshot entries and items among them.
struct Batch {
    calls: Vec<Call>,
    entries: usize,
    items: usize,
}

/// A snapshot as handed over: the changed entries only, when the consumer had the interface's
/// previous snapshot; else every entry.
struct Delta {
    iface: String,
    time_ns: u64,
    link_speed_bps: Option<u64>,
    iface_stats: [IfaceStats; dir::COUNT],
    macs: Vec<(MacKey, PfcCounters)>,
    changed: Option<Changed>,
    /// The entries at `changed.positions` (in their order), or every entry (`full`).
    entries: CompactQps,
    /// `entries` is the whole snapshot; else a sparse one of `len` keys.
    full: bool,
    len: usize,
}

enum Call {
    Begin(String, u64, Option<u64>),
    Events(String, Vec<Event>),
    Pauses(String, Vec<PauseEvent>),
    Latency(String, Vec<observer_common::latency::Record>),
    Snapshot(Box<Delta>),
    Evicted(String, Vec<(QpKey, QpValue)>),
    Quiet(String, u64),
    IntervalDone(u64),
    IfaceGone(String, u64),
    IfaceRestarted(String, u64),
    Nic(String, Box<nic::NicSample>, Option<Box<nic::Normalized>>),
    Qps(u64, Box<qps::Inventory>, Vec<qps::Progress>, Vec<qps::Fate>),
    IdleKeys(String, u64, u64, usize, SyncSender<Vec<QpKey>>),
}

/// The producer's end of one lane: a [`Consumer`] whose calls run on the consumer's thread.
pub struct Producer {
    tx: Option<Sender<Batch>>,
    gate: Arc<Gate>,
    /// Buffers of snapshot entries the consumer's thread is done with, to be filled again
    /// (a fresh buffer of an interval's values costs its page faults, every interval).
    spare: Receiver<CompactQps>,
    errors: Option<Receiver<ConsumerError>>,
    /// Where the error channel goes when this end is dropped: the errors of its last calls
    /// reach [`Offload::finish`].
    returned: Arc<Mutex<Vec<Receiver<ConsumerError>>>>,
    /// Calls not yet handed over (events and pauses, in order), and how many events and
    /// pauses they hold. In a cell: [`Consumer::idle_keys`] hands them over from `&self`.
    pending: RefCell<Vec<Call>>,
    pending_items: usize,
    /// Per interface: the id and length of the last snapshot handed over (the consumer's last
    /// snapshot of it).
    sent: HashMap<String, (u64, usize)>,
    /// Snapshots handed over as their changed entries only.
    partial: u64,
    /// This lane's number and the consumer's pace.
    lane: usize,
    pace: Arc<Pace>,
}

/// The consumer's end of one lane.
struct Lane {
    rx: Receiver<Batch>,
    errors: Sender<ConsumerError>,
    spare: SyncSender<CompactQps>,
    gate: Arc<Gate>,
}

fn lane(
    n: usize,
    max_entries: usize,
    returned: &Arc<Mutex<Vec<Receiver<ConsumerError>>>>,
    pace: &Arc<Pace>,
) -> (Producer, Lane) {
    let (tx, rx) = channel::<Batch>();
    let (etx, errors) = channel();
    let (spare_tx, spare) = sync_channel(SPARES);
    let gate = Arc::new(Gate::new(max_entries));
    let p = Producer {
        tx: Some(tx),
        gate: gate.clone(),
        spare,
        errors: Some(errors),
        returned: returned.clone(),
        pending: RefCell::new(Vec::new()),
        pending_items: 0,
        sent: HashMap::new(),
        partial: 0,
        lane: n,
        pace: pace.clone(),
    };
    let l = Lane {
        rx,
        errors: etx,
        spare: spare_tx,
        gate,
    };
    (p, l)
}

/// The consumer on its thread, and the producer's end of its first lane (the calls of
/// [`Offload::start`]: `&mut *offload` is the [`Consumer`]).
pub struct Offload<C: Consumer + Send + 'static> {
    own: Option<Producer>,
    worker: Option<JoinHandle<C>>,
    returned: Arc<Mutex<Vec<Receiver<ConsumerError>>>>,
}

impl<C: Consumer + Send + 'static> std::ops::Deref for Offload<C> {
    type Target = Producer;
    fn deref(&self) -> &Producer {
        self.own
            .as_ref()
            .expect("an offload started with its own lane")
    }
}

impl<C: Consumer + Send + 'static> std::ops::DerefMut for Offload<C> {
    fn deref_mut(&mut self) -> &mut Producer {
        self.own
            .as_mut()
            .expect("an offload started with its own lane")
    }
}

impl<C: Consumer + Send + 'static> Offload<C> {
    /// Starts `consumer`'s thread with one lane, the offload's own.
    pub fn start(consumer: C) -> std::io::Result<Offload<C>> {
        let (mut off, mut lanes) = Offload::start_lanes(consumer, 1, 0)?;
        off.own = lanes.pop();
        Ok(off)
    }

    /// Starts `consumer`'s thread with `n` lanes (at least one), each a [`Producer`] for a
    /// thread of its own. The consumer does every call of the first lane, then every call of
    /// the second (once its producer has been dropped), and so on: the calls it sees are those
    /// of the lanes one after another, as if one producer had made them. A lane after the
    /// first runs ahead of the consumer by at most [`AHEAD_ENTRIES`] changed entries (its
    /// producer then waits), so that separate inputs are read in parallel with bounded memory.
    /// The `free` lanes after the consumer's read ahead at will, the later ones while the
    /// consumer waits for a call ([`Producer::pacer`]; with C cores, C - 2: the consumer's lane
    /// and the consumer take two).
    pub fn start_lanes(
        consumer: C,
        n: usize,
        free: usize,
    ) -> std::io::Result<(Offload<C>, Vec<Producer>)> {
        Offload::start_lanes_with(consumer, n, AHEAD_ENTRIES, free)
    }

    /// [`Offload::start_lanes`] with `ahead` for [`AHEAD_ENTRIES`].
    fn start_lanes_with(
        consumer: C,
        n: usize,
        ahead: usize,
        free: usize,
    ) -> std::io::Result<(Offload<C>, Vec<Producer>)> {
        let returned = Arc::new(Mutex::new(Vec::new()));
        let pace = Arc::new(Pace::new(free));
        let (producers, lanes): (Vec<_>, Vec<_>) = (0..n.max(1))
            .map(|i| {
                lane(
                    i,
                    if i == 0 { MAX_ENTRIES } else { ahead },
                    &returned,
                    &pace,
                )
            })
            .unzip();
        let gates = lanes.iter().map(|l| l.gate.clone()).collect();
        let worker = std::thread::Builder::new()
            .name("outputs".into())
            .spawn(move || {
                let _close = CloseOnDrop(gates);
                run(consumer, lanes, &pace)
            })?;
        Ok((
            Offload {
                own: None,
                worker: Some(worker),
                returned,
            },
            producers,
        ))
    }

    /// Waits for every call handed over (the producers of [`Offload::start_lanes`] must have
    /// been dropped), then gives the consumer back with the errors it returned that no call
    /// has reported yet.
    pub fn finish(mut self) -> (C, Vec<ConsumerError>) {
        drop(self.own.take());
        let worker = self
            .worker
            .take()
            .expect("the consumer's thread is joined once");
        let consumer = match worker.join() {
            Ok(c) => c,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        let returned =
            std::mem::take(&mut *self.returned.lock().unwrap_or_else(|p| p.into_inner()));
        let errors = returned.iter().flat_map(|r| r.try_iter()).collect();
        (consumer, errors)
    }
}

impl Producer {
    /// What this lane's reader calls between frames to read ahead only when it may ([`Pace`]).
    pub fn pacer(&self) -> Pacer {
        Pacer {
            pace: self.pace.clone(),
            lane: self.lane,
        }
    }

    /// Snapshots handed over as their changed entries only (the others whole).
    pub fn partial_snapshots(&self) -> u64 {
        self.partial
    }

    fn flush(&mut self) {
        self.pending_items = 0;
        self.hand_over();
    }

    /// Hands the pending calls over. When the consumer's thread has ended (it panicked) they
    /// are dropped: the panic is carried by [`Offload::finish`].
    fn hand_over(&self) {
        let calls = std::mem::take(&mut *self.pending.borrow_mut());
        if calls.is_empty() {
            return;
        }
        let items = calls
            .iter()
            .map(|c| match c {
                Call::Events(_, v) => v.len(),
                Call::Pauses(_, v) => v.len(),
                Call::Latency(_, v) => v.len(),
                _ => 0,
            })
            .sum();
        if let Some(tx) = &self.tx
            && self.gate.enter(0, items)
        {
            let _ = tx.send(Batch {
                calls,
                entries: 0,
                items,
            });
        }
    }

    fn push(&mut self, c: Call) {
        self.pending.get_mut().push(c);
    }

    /// A call handed over after the pending ones.
    fn call(&mut self, c: Call) -> Result<(), ConsumerError> {
        self.push(c);
        self.flush();
        self.error()
    }

    fn error(&self) -> Result<(), ConsumerError> {
        if !self.gate.error.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.errors.as_ref().map(|r| r.try_recv()) {
            Some(Ok(e)) => Err(e),
            None => Ok(()),
            Some(Err(TryRecvError::Empty | TryRecvError::Disconnected)) => {
                self.gate.error.store(false, Ordering::Release);
                Ok(())
            }
        }
    }

    fn gather(&mut self, c: Call, n: usize) -> Result<(), ConsumerError> {
        // consecutive items of one interface and kind go into one call
        let pending = self.pending.get_mut();
        match (pending.last_mut(), c) {
            (Some(Call::Events(i, v)), Call::Events(j, w)) if *i == j => v.extend(w),
            (Some(Call::Pauses(i, v)), Call::Pauses(j, w)) if *i == j => v.extend(w),
            (Some(Call::Latency(i, v)), Call::Latency(j, w)) if *i == j => v.extend(w),
            (_, c) => pending.push(c),
        }
        self.pending_items += n;
        if self.pending_items >= BATCH {
            self.flush();
        }
        self.error()
    }

    fn delta(&mut self, s: &Snapshot) -> Delta {
        let base = self.sent.get(&s.iface).copied();
        let len = s.qps.len();
        let changed_only = match (&s.changed, base) {
            (Some(c), Some((id, old_len))) => {
                c.base == Some(id)
                    && c.gone.is_empty()
                    && len >= old_len
                    && c.positions.windows(2).all(|w| w[0] < w[1])
                    && c.positions.last().is_none_or(|&p| (p as usize) < len)
                    // every new entry (appended) is among the changed ones
                    && c.positions.iter().filter(|&&p| p as usize >= old_len).count()
                        == len - old_len
            }
            // the interface's first: sparse when every entry is among the changed ones (the
            // consumer has none of its keys yet), so that no interval is expanded whole
            (Some(c), None) => {
                c.base.is_none()
                    && c.gone.is_empty()
                    && c.positions.len() == len
                    && c.positions
                        .iter()
                        .enumerate()
                        .all(|(i, &p)| p as usize == i)
            }
            _ => false,
        };
        match &s.changed {
            Some(c) => {
                self.sent.insert(s.iface.clone(), (c.id, len));
            }
            None => {
                self.sent.remove(&s.iface);
            }
        }
        self.partial += changed_only as u64;
        let mut entries = self.spare.try_recv().unwrap_or_default();
        entries.clear();
        let mut changed = s.changed.clone();
        match (&mut changed, changed_only) {
            (Some(c), true) => {
                let masks: Vec<u64> = c
                    .positions
                    .iter()
                    .map(|&p| {
                        let (k, v) = &s.qps[p as usize];
                        entries.push(k, v)
                    })
                    .collect();
                if c.blocks.is_empty() {
                    c.blocks = masks;
                }
            }
            _ => {
                let masks: Vec<u64> = s.qps.iter().map(|(k, v)| entries.push(k, v)).collect();
                if let Some(c) = &mut changed
                    && c.blocks.is_empty()
                    && c.positions.iter().all(|&p| (p as usize) < masks.len())
                {
                    c.blocks = c.positions.iter().map(|&p| masks[p as usize]).collect();
                }
            }
        }
        Delta {
            iface: s.iface.clone(),
            time_ns: s.time_ns,
            link_speed_bps: s.link_speed_bps,
            iface_stats: s.iface_stats,
            macs: s.macs.clone(),
            changed,
            entries,
            full: !changed_only,
            len,
        }
    }
}

impl<C: Consumer + Send + 'static> Drop for Offload<C> {
    fn drop(&mut self) {
        // without `finish` (an error on the way): the consumer's thread ends with the hand-off
        drop(self.own.take());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// A lane's end: its pending calls handed over, its channel closed (the consumer goes on with
/// the next lane), its error channel kept for [`Offload::finish`].
impl Drop for Producer {
    fn drop(&mut self) {
        self.flush();
        drop(self.tx.take());
        if let Some(r) = self.errors.take() {
            self.returned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(r);
        }
    }
}

impl Consumer for Producer {
    fn begin(&mut self, iface: &str, start_ns: u64, link_speed_bps: Option<u64>) {
        self.push(Call::Begin(iface.to_string(), start_ns, link_speed_bps));
    }
    fn events(&mut self, iface: &str, events: &[Event]) -> Result<(), ConsumerError> {
        self.gather(
            Call::Events(iface.to_string(), events.to_vec()),
            events.len(),
        )
    }
    fn pauses(&mut self, iface: &str, pauses: &[PauseEvent]) -> Result<(), ConsumerError> {
        self.gather(
            Call::Pauses(iface.to_string(), pauses.to_vec()),
            pauses.len(),
        )
    }
    fn latency(
        &mut self,
        iface: &str,
        records: &[observer_common::latency::Record],
    ) -> Result<(), ConsumerError> {
        self.gather(
            Call::Latency(iface.to_string(), records.to_vec()),
            records.len(),
        )
    }
    /// Waits, before this one's entries are copied, until the snapshots in flight leave room
    /// ([`MAX_ENTRIES`]): an interval of many keys is copied once the consumer is done with
    /// the previous one.
    fn snapshot(&mut self, snap: &Snapshot) -> Result<(), ConsumerError> {
        self.flush();
        // at least one: a snapshot without changes is still one in flight
        let entries = snap
            .changed
            .as_ref()
            .map_or(snap.qps.len(), |c| c.positions.len())
            .max(1);
        if self.gate.enter(entries, 0) {
            let d = self.delta(snap);
            if let Some(tx) = &self.tx {
                let _ = tx.send(Batch {
                    calls: vec![Call::Snapshot(Box::new(d))],
                    entries,
                    items: 0,
                });
            }
        }
        self.error()
    }
    fn evicted(&mut self, iface: &str, finals: &[(QpKey, QpValue)]) {
        self.push(Call::Evicted(iface.to_string(), finals.to_vec()));
    }
    /// Answered by the consumer after every call before it; the producer waits for it.
    fn idle_keys(&self, iface: &str, now_ns: u64, idle_ns: u64, max: usize) -> Vec<QpKey> {
        let (tx, rx) = sync_channel(1);
        self.pending
            .borrow_mut()
            .push(Call::IdleKeys(iface.to_string(), now_ns, idle_ns, max, tx));
        self.hand_over();
        rx.recv().unwrap_or_default()
    }
    fn quiet(&mut self, iface: &str, t_ns: u64) {
        self.push(Call::Quiet(iface.to_string(), t_ns));
    }
    fn interval_done(&mut self, t_ns: u64) {
        self.push(Call::IntervalDone(t_ns));
        self.flush();
    }
    fn iface_gone(&mut self, iface: &str, t_ns: u64) {
        self.sent.remove(iface);
        self.push(Call::IfaceGone(iface.to_string(), t_ns));
    }
    fn iface_restarted(&mut self, iface: &str, t_ns: u64) {
        self.sent.remove(iface);
        self.push(Call::IfaceRestarted(iface.to_string(), t_ns));
    }
    fn nic(
        &mut self,
        iface: &str,
        sample: &nic::NicSample,
        counters: Option<&nic::Normalized>,
    ) -> Result<(), ConsumerError> {
        self.call(Call::Nic(
            iface.to_string(),
            Box::new(sample.clone()),
            counters.map(|c| Box::new(c.clone())),
        ))
    }
    fn qps(
        &mut self,
        start_ns: u64,
        inv: &qps::Inventory,
        progress: &[qps::Progress],
        fates: &[qps::Fate],
    ) -> Result<(), ConsumerError> {
        self.call(Call::Qps(
            start_ns,
            Box::new(inv.clone()),
            progress.to_vec(),
            fates.to_vec(),
        ))
    }
}

/// The consumer's thread: every call in order; a snapshot handed over whole is rebuilt, one
/// handed over as its changes given as a sparse snapshot.
fn run<C: Consumer>(mut consumer: C, lanes: Vec<Lane>, pace: &Pace) -> C {
    for (n, l) in lanes.into_iter().enumerate() {
        pace.set(|st| st.current = n);
        run_lane(&mut consumer, l, pace);
    }
    consumer
}

/// Every call of one lane, until its producer is dropped.
fn run_lane<C: Consumer>(consumer: &mut C, lane: Lane, pace: &Pace) {
    let Lane {
        rx,
        errors,
        spare,
        gate,
    } = lane;
    let report = |r: Result<(), ConsumerError>| {
        if let Err(e) = r {
            let _ = errors.send(e);
            gate.error.store(true, Ordering::Release);
        }
    };
    loop {
        let batch = match rx.try_recv() {
            Ok(b) => b,
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {
                // idle: a later lane's reader may use the core meanwhile
                pace.set(|st| st.busy = false);
                let b = rx.recv();
                pace.set(|st| st.busy = true);
                match b {
                    Ok(b) => b,
                    Err(_) => break,
                }
            }
        };
        for call in batch.calls {
            match call {
                Call::Begin(i, t, s) => consumer.begin(&i, t, s),
                Call::Events(i, v) => report(consumer.events(&i, &v)),
                Call::Pauses(i, v) => report(consumer.pauses(&i, &v)),
                Call::Latency(i, v) => report(consumer.latency(&i, &v)),
                Call::Snapshot(d) => {
                    let d = *d;
                    let mut changed = d.changed;
                    let (qps, entries) = if d.full {
                        let mut qps = vec![(QpKey::default(), QpValue::ZERO); d.len];
                        for (n, e) in qps.iter_mut().enumerate() {
                            e.0 = d.entries.expand(n, &mut e.1);
                        }
                        (qps, Some(d.entries))
                    } else {
                        // the consumer had the base: the changed entries as they came
                        if let Some(c) = &mut changed {
                            c.sparse = Some(Box::new(Sparse {
                                keys: d.len,
                                values: d.entries,
                            }));
                        }
                        (Vec::new(), None)
                    };
                    let mut snap = Snapshot {
                        iface: d.iface,
                        time_ns: d.time_ns,
                        link_speed_bps: d.link_speed_bps,
                        qps,
                        iface_stats: d.iface_stats,
                        macs: d.macs,
                        changed,
                    };
                    report(consumer.snapshot(&snap));
                    // back to the producer to be filled again ([`SPARES`] kept at most)
                    let done = entries
                        .or_else(|| snap.changed.take().and_then(|c| c.sparse).map(|s| s.values));
                    if let Some(b) = done {
                        let _ = spare.try_send(b);
                    }
                }
                Call::Evicted(i, f) => consumer.evicted(&i, &f),
                Call::Quiet(i, t) => consumer.quiet(&i, t),
                Call::IntervalDone(t) => consumer.interval_done(t),
                Call::IfaceGone(i, t) => consumer.iface_gone(&i, t),
                Call::IfaceRestarted(i, t) => consumer.iface_restarted(&i, t),
                Call::Nic(i, s, c) => report(consumer.nic(&i, &s, c.as_deref())),
                Call::Qps(t, inv, p, f) => report(consumer.qps(t, &inv, &p, &f)),
                Call::IdleKeys(i, now, idle, max, reply) => {
                    let _ = reply.send(consumer.idle_keys(&i, now, idle, max));
                }
            }
        }
        gate.leave(batch.entries, batch.items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::capture::{Replay, ReplayOptions};
    use crate::sources::snapshot::nonzero_blocks;
    use test_support::corpus;

    /// Every call as text, each snapshot with all its entries and its change list.
    #[derive(Default)]
    struct Record {
        log: Vec<String>,
        /// Fail the snapshot with this number (1-based).
        fail_at: Option<usize>,
        snapshots: usize,
        /// Snapshot ids (unique in the process) by order of appearance.
        ids: HashMap<u64, usize>,
        /// Snapshots that said their entries' non-zero blocks.
        blocks_said: usize,
        /// Sparse snapshots, and the entries of each interface's last snapshot.
        sparse: usize,
        mirrors: HashMap<String, Vec<(QpKey, QpValue)>>,
    }

    impl Record {
        fn ordinal(&mut self, id: u64) -> usize {
            let n = self.ids.len();
            *self.ids.entry(id).or_insert(n)
        }
    }

    impl Consumer for Record {
        fn begin(&mut self, iface: &str, start_ns: u64, s: Option<u64>) {
            self.log.push(format!("begin {iface} {start_ns} {s:?}"));
        }
        fn events(&mut self, iface: &str, events: &[Event]) -> Result<(), ConsumerError> {
            for e in events {
                self.log.push(format!("event {iface} {e:?}"));
            }
            Ok(())
        }
        fn pauses(&mut self, iface: &str, p: &[PauseEvent]) -> Result<(), ConsumerError> {
            for e in p {
                self.log.push(format!("pause {iface} {e:?}"));
            }
            Ok(())
        }
        fn snapshot(&mut self, s: &Snapshot) -> Result<(), ConsumerError> {
            self.snapshots += 1;
            if self.fail_at == Some(self.snapshots) {
                return Err(format!("snapshot {} refused", self.snapshots).into());
            }
            // the snapshot's entries: a sparse one's applied to the last ones of the interface
            let mirror = self.mirrors.entry(s.iface.clone()).or_default();
            match s
                .changed
                .as_ref()
                .and_then(|c| c.sparse.as_ref().map(|sp| (c, sp)))
            {
                Some((c, sp)) => {
                    assert!(s.qps.is_empty());
                    assert_eq!(sp.values.len(), c.positions.len());
                    mirror.resize(sp.keys, (QpKey::default(), QpValue::ZERO));
                    for (n, &p) in c.positions.iter().enumerate() {
                        let e = &mut mirror[p as usize];
                        e.0 = sp.values.expand(n, &mut e.1);
                    }
                    self.sparse += 1;
                }
                None => *mirror = s.qps.clone(),
            }
            let entries = mirror.clone();
            let changed = s.changed.clone().map(|mut c| {
                // the non-zero blocks, when said, cover every non-zero block (a superset is
                // allowed: the collector then reads a zero block), and are not compared
                if !c.blocks.is_empty() {
                    assert_eq!(c.blocks.len(), c.positions.len());
                    for (&p, &b) in c.positions.iter().zip(&c.blocks) {
                        let nz = nonzero_blocks(&entries[p as usize].1);
                        assert_eq!(nz & !b, 0, "block of entry {p} not said");
                    }
                    self.blocks_said += 1;
                }
                c.blocks.clear();
                c.sparse = None;
                c.base = c.base.map(|b| self.ordinal(b) as u64);
                c.id = self.ordinal(c.id) as u64;
                c
            });
            self.log.push(format!(
                "snapshot {} {} {} {:?} {:?} {:?} {:?}",
                s.iface,
                s.len(),
                s.time_ns,
                s.link_speed_bps,
                s.iface_stats,
                s.macs,
                changed
            ));
            for (k, v) in &entries {
                self.log.push(format!("  {k:?} {v:?}"));
            }
            Ok(())
        }
        fn quiet(&mut self, iface: &str, t: u64) {
            self.log.push(format!("quiet {iface} {t}"));
        }
        fn interval_done(&mut self, t: u64) {
            self.log.push(format!("done {t}"));
        }
        fn idle_keys(&self, iface: &str, _: u64, _: u64, _: usize) -> Vec<QpKey> {
            // answers with what it has seen: a query overtaking calls would see fewer
            let n = self
                .log
                .iter()
                .filter(|l| l.starts_with("snapshot"))
                .count();
            vec![QpKey {
                dest_qp: n as u32 + iface.len() as u32,
                ..QpKey::default()
            }]
        }
    }

    /// Two interfaces (a pcapng of two), keys appearing over many intervals, some keys
    /// quiet for several, CNPs and NAKs (events), PFC frames (pauses).
    fn capture() -> Vec<u8> {
        let mut frames: Vec<(u32, u64, Vec<u8>)> = Vec::new();
        let t0 = 1_700_000_000_000_000_000u64;
        for i in 0..3000u64 {
            let conn = (i * 7919 % (50 + i / 20)) as u32;
            let a = [10, 1, (conn >> 8) as u8, conn as u8];
            let b = [10, 2, 0, 1];
            let r = corpus::Roce::v4(a, b, 0x100 + conn, i as u32).payload(64);
            let r = if i % 13 == 0 {
                r.mark(26, 3)
            } else {
                r.mark(26, 2)
            };
            let t = t0 + i * 7_000_000;
            frames.push(((i % 2) as u32, t, r.frame()));
            if i % 17 == 0 {
                frames.push((0, t + 1, corpus::Roce::v4(b, a, 0x200, 0).cnp().frame()));
            }
            if i % 29 == 0 {
                frames.push((
                    1,
                    t + 2,
                    corpus::Roce::v4(b, a, 0x300 + conn, i as u32)
                        .ack(0x60)
                        .frame(),
                ));
            }
            if i % 101 == 0 {
                frames.push((
                    1,
                    t + 3,
                    corpus::pfc([2, 0, 0, 0, 0, 1], 0x08, [0, 0, 0, 0xffff, 0, 0, 0, 0]),
                ));
            }
        }
        let recs: Vec<corpus::Rec> = frames
            .into_iter()
            .map(|(iface, ts_ns, data)| corpus::Rec {
                ts_ns,
                data,
                iface,
                epb_flags: 0,
            })
            .collect();
        let mut out = Vec::new();
        corpus::write_pcapng(&mut out, &[(1, "e0", 9), (1, "e1", 9)], &recs).unwrap();
        out
    }

    /// The snapshots made, and the consumer's answer to a query after them.
    fn replay<C: Consumer>(out: &mut C, data: &[u8], interval_ms: u64) -> (u64, Vec<QpKey>) {
        let opts = ReplayOptions {
            interval_ns: interval_ms * 1_000_000,
            ..ReplayOptions::default()
        };
        let mut rp = Replay::new(opts, out);
        let n = rp.feed_slice("two.pcapng", "two", data).unwrap().snapshots;
        drop(rp);
        (n, out.idle_keys("two:e0", 0, 0, 1))
    }

    #[test]
    fn the_consumer_sees_the_same_calls_on_its_thread() {
        let data = capture();
        for interval_ms in [20, 1000] {
            let mut inline = Record::default();
            let (n, answer) = replay(&mut inline, &data, interval_ms);
            let mut off = Offload::start(Record::default()).unwrap();
            assert_eq!(replay(&mut *off, &data, interval_ms), (n, answer));
            assert!(
                off.partial_snapshots() > n / 2,
                "{interval_ms} ms: most snapshots handed over as their changes ({} of {n})",
                off.partial_snapshots()
            );
            let partial = off.partial_snapshots();
            let (rec, errors) = off.finish();
            assert!(errors.is_empty());
            assert_eq!(inline.blocks_said, 0, "replay's datapath does not say them");
            assert_eq!(
                rec.blocks_said as u64, n,
                "the hand-off says them for every snapshot"
            );
            assert_eq!(inline.sparse, 0);
            assert_eq!(
                rec.sparse as u64, partial,
                "each handed over as changes is sparse"
            );
            assert!(n > 1, "{interval_ms} ms: several snapshots ({n})");
            assert!(inline.log.iter().any(|l| l.starts_with("event")));
            assert!(inline.log.iter().any(|l| l.starts_with("pause")));
            assert_eq!(rec.log.len(), inline.log.len(), "{interval_ms} ms");
            for (i, (a, b)) in rec.log.iter().zip(&inline.log).enumerate() {
                assert_eq!(a, b, "{interval_ms} ms: line {i}");
            }
        }
    }

    #[test]
    fn an_error_of_the_consumer_reaches_the_producer_once() {
        let data = capture();
        let opts = ReplayOptions {
            interval_ns: 100_000_000,
            ..ReplayOptions::default()
        };
        let mut inline = Record {
            fail_at: Some(3),
            ..Record::default()
        };
        let e = Replay::new(opts.clone(), &mut inline)
            .feed_slice("two.pcapng", "two", &data)
            .unwrap_err();
        assert!(
            contract::error::chain(&e).contains("snapshot 3 refused"),
            "{e}"
        );

        let mut off = Offload::start(Record {
            fail_at: Some(3),
            ..Record::default()
        })
        .unwrap();
        let fed = Replay::new(opts, &mut *off).feed_slice("two.pcapng", "two", &data);
        let (rec, later) = off.finish();
        let mut said: Vec<String> = later.iter().map(|e| e.to_string()).collect();
        if let Err(e) = fed {
            said.push(contract::error::chain(&e));
        }
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("snapshot 3 refused"), "{said:?}");
        // the consumer went on with the calls after it, as an inline one would
        assert!(rec.snapshots >= 3);
    }

    /// Snapshots a source hands over whole (no change list; a first one naming some entries
    /// only; one not following the last) reach the consumer whole, and the ones after them
    /// sparse again, with the same entries.
    #[test]
    fn snapshots_without_a_usable_base_are_handed_over_whole() {
        let key = |i: u32| QpKey {
            dest_qp: i,
            ..QpKey::default()
        };
        let value = |i: u32, t: u64| {
            let mut v = QpValue::ZERO;
            v.pkts = t * 10 + i as u64;
            v.dscp_hist[0][(i % 64) as usize] = t as u32;
            v
        };
        // each snapshot's entries: the previous ones, with those at `changed` positions (or
        // all, without a change list) new, as the contract of a change list says
        let mut cur: Vec<(QpKey, QpValue)> = Vec::new();
        let mut snap = |t: u64, n: u32, changed: Option<Changed>| {
            cur.resize(n as usize, (QpKey::default(), QpValue::ZERO));
            for i in 0..n {
                let listed = changed
                    .as_ref()
                    .is_none_or(|c| c.positions.contains(&i) || c.base.is_none());
                if listed || cur[i as usize].0 != key(i) {
                    cur[i as usize] = (key(i), value(i, t));
                }
            }
            Snapshot {
                iface: "e0".into(),
                time_ns: t,
                link_speed_bps: None,
                qps: cur.clone(),
                iface_stats: Default::default(),
                macs: Vec::new(),
                changed,
            }
        };
        let ch = |base: Option<u64>, id: u64, positions: Vec<u32>| {
            Some(Changed {
                base,
                id,
                positions,
                ..Changed::default()
            })
        };
        let snaps = [
            snap(1, 3, None),
            snap(2, 4, ch(None, 901, vec![1, 3])),
            snap(3, 5, ch(Some(901), 902, vec![0, 2, 4])),
            snap(4, 5, ch(Some(777), 903, vec![2])),
            snap(5, 6, ch(Some(903), 904, vec![1, 5])),
        ];
        let mut inline = Record::default();
        let mut off = Offload::start(Record::default()).unwrap();
        for s in &snaps {
            inline.snapshot(s).unwrap();
            off.snapshot(s).unwrap();
        }
        assert_eq!(off.partial_snapshots(), 2, "the third and the fifth");
        let (rec, errors) = off.finish();
        assert!(errors.is_empty());
        assert_eq!(rec.sparse, 2);
        assert_eq!(rec.log, inline.log);
    }

    /// Lanes: the consumer does the first lane's calls, then the second's, whatever order
    /// their threads made them in; a later lane runs ahead by at most [`AHEAD_ENTRIES`]
    /// changed entries (its producer waits, memory does not grow), and an error of a lane's
    /// last call reaches [`Offload::finish`].
    #[test]
    fn lanes_are_done_in_order_and_a_later_one_waits() {
        let snap = |iface: &str, t: u64, n: usize| Snapshot {
            iface: iface.into(),
            time_ns: t,
            link_speed_bps: None,
            qps: (0..n)
                .map(|i| {
                    let mut v = QpValue::ZERO;
                    v.pkts = t + i as u64;
                    (
                        QpKey {
                            dest_qp: i as u32,
                            ..QpKey::default()
                        },
                        v,
                    )
                })
                .collect(),
            iface_stats: Default::default(),
            macs: Vec::new(),
            changed: None,
        };
        let rec = Record {
            // the last snapshot of all: the second lane's last call
            fail_at: Some(1 + 40),
            ..Record::default()
        };
        const AHEAD: usize = 64;
        let (off, mut lanes) = Offload::start_lanes_with(rec, 2, AHEAD, 0).unwrap();
        let second = lanes.pop().unwrap();
        let mut first = lanes.pop().unwrap();
        let gate = second.gate.clone();
        // the second lane: 40 snapshots of AHEAD / 8 entries, five times its bound
        let per = AHEAD / 8;
        let t = std::thread::spawn(move || {
            let mut second = second;
            for n in 0..40 {
                second.snapshot(&snap("b", 100 + n, per)).unwrap();
            }
            second.quiet("b", 999);
        });
        // while the first lane is open, the second waits at its bound
        let mut waited = 0;
        while gate.lock().entries + per <= AHEAD && waited < 2000 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            waited += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let in_flight = gate.lock().entries;
        assert!(in_flight <= AHEAD + per, "{in_flight} entries in flight");
        assert!(in_flight + per > AHEAD, "it filled its bound: {in_flight}");
        assert!(!t.is_finished(), "the second lane's producer waits");
        first.begin("a", 1, None);
        first.snapshot(&snap("a", 1, 3)).unwrap();
        first.quiet("a", 2);
        drop(first);
        t.join().unwrap();
        let (rec, errors) = off.finish();
        assert_eq!(
            errors.len(),
            1,
            "the failed last snapshot, reported at the end"
        );
        let heads: Vec<&str> = rec
            .log
            .iter()
            .filter_map(|l| l.split(' ').nth(1).filter(|w| !w.is_empty()))
            .collect();
        let first_b = heads.iter().position(|h| *h == "b").unwrap();
        assert!(first_b > 0, "the first lane first: {:?}", &rec.log[..3]);
        assert!(
            heads[first_b..].iter().all(|h| *h == "b"),
            "then only the second lane: {heads:?}"
        );
        assert_eq!(rec.snapshots, 41);
    }

    /// Pace: the consumer's lane and the `free` lanes after it read on at once; a later lane
    /// waits while the consumer is busy and goes on once it waits for a call, or once the
    /// consumer reaches a lane near it.
    #[test]
    fn a_lane_beyond_the_free_ones_reads_while_the_consumer_waits() {
        use std::time::{Duration, Instant};
        let pace = Arc::new(Pace::new(1));
        pace.set(|st| st.busy = true);
        let t = Instant::now();
        pace.wait_turn(0);
        pace.wait_turn(1);
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "the consumer's lane and the free one"
        );
        for release in ["idle", "current"] {
            pace.set(|st| {
                st.busy = true;
                st.current = 0;
            });
            let p = pace.clone();
            let waiter = std::thread::spawn(move || {
                let t = Instant::now();
                p.wait_turn(2);
                t.elapsed()
            });
            std::thread::sleep(Duration::from_millis(150));
            assert!(
                !waiter.is_finished(),
                "{release}: lane 2 waits while the consumer is busy"
            );
            match release {
                "idle" => pace.set(|st| st.busy = false),
                _ => pace.set(|st| st.current = 1),
            }
            let waited = waiter.join().unwrap();
            assert!(
                waited >= Duration::from_millis(150),
                "{release}: {waited:?}"
            );
            assert!(
                waited < PACE_WAIT_MAX,
                "{release}: released, not timed out: {waited:?}"
            );
        }
    }
}
