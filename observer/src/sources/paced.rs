//! Sources read on the wall clock (the kernel's maps, the synthetic generator): every
//! `interval` a snapshot of each interface, first-occurrence events polled every 100 ms in
//! between (alerts within the interval), and a last partial interval at stop.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::synthetic::Synthetic;
use super::{Consumer, ConsumerError, Source, Stop};

/// Wall-clock time now, ns since the UNIX epoch.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A source that is read when the clock says so.
pub trait Polled {
    type Error: std::error::Error + Send + Sync + 'static;
    /// Observation starts at `t0_ns`: declare every interface to the consumer.
    fn begin(&mut self, out: &mut dyn Consumer, t0_ns: u64);
    /// Hands over the events that arrived since the last call.
    fn poll_events(&mut self, out: &mut dyn Consumer) -> Result<(), Self::Error>;
    /// The interval ending at `t_ns`: a snapshot of every interface.
    fn interval(&mut self, out: &mut dyn Consumer, t_ns: u64) -> Result<(), Self::Error>;
}

/// Runs a [`Polled`] source on the wall clock.
pub struct Paced<P> {
    pub inner: P,
    pub interval: Duration,
    /// Stop after this long (`None`: until the stop is set).
    pub duration: Option<Duration>,
}

impl<P: Polled> Source for Paced<P> {
    type Error = P::Error;

    fn run(&mut self, out: &mut dyn Consumer, stop: &Stop) -> Result<(), P::Error> {
        self.inner.begin(out, now_ns());
        let started = Instant::now();
        let mut next = started + self.interval;
        let poll = Duration::from_millis(100).min(self.interval);
        while !stop.is_set() && !self.duration.is_some_and(|d| started.elapsed() >= d) {
            self.inner.poll_events(out)?;
            let now = Instant::now();
            if now < next {
                std::thread::sleep(poll.min(next - now));
                continue;
            }
            next += self.interval;
            if next < Instant::now() {
                next = Instant::now() + self.interval; // fell behind: skip, do not burst
            }
            self.interval_now(out)?;
        }
        // The last partial interval.
        self.inner.poll_events(out)?;
        self.interval_now(out)
    }
}

impl<P: Polled> Paced<P> {
    fn interval_now(&mut self, out: &mut dyn Consumer) -> Result<(), P::Error> {
        let t = now_ns();
        self.inner.interval(out, t)?;
        out.interval_done(t);
        Ok(())
    }
}

/// The consumer failed (the pipeline cannot account a snapshot).
#[derive(Debug, thiserror::Error)]
#[error("the pipeline failed")]
pub struct ConsumerFailed(#[source] pub ConsumerError);

/// [`Synthetic`] traffic as one interface, for the live command without BPF
/// (`--synthetic-qps`).
pub struct SyntheticFeed {
    pub synth: Synthetic,
    pub iface: String,
    pub link_speed_bps: Option<u64>,
    /// No more traffic this long after the start (`--synthetic-stop-after`): the keys stay,
    /// idle.
    pub stop_after: Option<Duration>,
    t0_ns: u64,
}

impl SyntheticFeed {
    pub fn new(synth: Synthetic, iface: &str, link_speed_bps: Option<u64>) -> SyntheticFeed {
        SyntheticFeed {
            synth,
            iface: iface.into(),
            link_speed_bps,
            stop_after: None,
            t0_ns: 0,
        }
    }
}

impl Polled for SyntheticFeed {
    type Error = ConsumerFailed;

    fn begin(&mut self, out: &mut dyn Consumer, t0_ns: u64) {
        self.t0_ns = t0_ns;
        out.begin(&self.iface, t0_ns, self.link_speed_bps);
    }

    fn poll_events(&mut self, _out: &mut dyn Consumer) -> Result<(), ConsumerFailed> {
        Ok(())
    }

    fn interval(&mut self, out: &mut dyn Consumer, t_ns: u64) -> Result<(), ConsumerFailed> {
        let elapsed = Duration::from_nanos(t_ns.saturating_sub(self.t0_ns));
        if self.stop_after.is_none_or(|d| elapsed < d) {
            self.synth.step(t_ns);
        }
        let ev = self.synth.dp.take_events();
        out.events(&self.iface, &ev).map_err(ConsumerFailed)?;
        let pauses = self.synth.dp.take_pauses();
        out.pauses(&self.iface, &pauses).map_err(ConsumerFailed)?;
        let snap = self
            .synth
            .dp
            .snapshot(&self.iface, t_ns, self.link_speed_bps);
        out.snapshot(&snap).map_err(ConsumerFailed)
    }
}
