//! Sources read on the wall clock (the kernel's maps, the synthetic generator): at every
//! multiple of `interval` in wall-clock time (UTC) a snapshot of each interface,
//! first-occurrence events polled every 100 ms in between (alerts within the interval), and a
//! last partial interval at stop.

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
        let every = (self.interval.as_nanos() as u64).max(1);
        let mut next = first_tick(now_ns(), every);
        let poll = Duration::from_millis(100).min(self.interval);
        while !stop.is_set() && !self.duration.is_some_and(|d| started.elapsed() >= d) {
            self.inner.poll_events(out)?;
            let now = now_ns();
            if now < next {
                // further than the first tick can be (an interval and a half): the clock was
                // set back
                if next - now > every + every / 2 {
                    next = next_tick(now, every);
                }
                std::thread::sleep(poll.min(Duration::from_nanos(next - now)));
                continue;
            }
            // fell behind (or the clock was set forward): the next tick, no burst
            next = next_tick(now, every);
            self.interval_now(out)?;
        }
        // The last partial interval.
        self.inner.poll_events(out)?;
        self.interval_now(out)
    }
}

/// The first multiple of `every` ns after `now_ns` on the wall clock: intervals end on the
/// same instants on every host whose clock is synchronised, so that the rows of two observers'
/// trees cover the same times (docs/analysis.md#which-rows-are-compared).
pub fn next_tick(now_ns: u64, every: u64) -> u64 {
    (now_ns / every).saturating_add(1).saturating_mul(every)
}

/// The end of the first interval of a run starting at `now_ns`: the next multiple of `every`,
/// or the one after when the next is less than half an interval away, so that the first
/// interval lasts between half an interval and one and a half (a rate over a first interval of
/// a few milliseconds, such as PFC frames per second from the NIC's counters, would be mostly
/// noise).
pub fn first_tick(now_ns: u64, every: u64) -> u64 {
    let t = next_tick(now_ns, every);
    if t - now_ns < every / 2 {
        t.saturating_add(every)
    } else {
        t
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Snapshot;
    use observer_common::maps::Event;

    #[test]
    fn ticks_are_the_next_multiple_of_the_interval() {
        let s = 1_000_000_000;
        assert_eq!(next_tick(0, s), s);
        assert_eq!(next_tick(5 * s, s), 6 * s, "on a tick: the next one");
        assert_eq!(next_tick(5 * s + 1, s), 6 * s);
        assert_eq!(next_tick(6 * s - 1, s), 6 * s);
        assert_eq!(
            next_tick(1_700_000_000_123_456_789, 250_000_000),
            1_700_000_000_250_000_000
        );
        assert_eq!(next_tick(u64::MAX - 3, 10), u64::MAX, "saturates");
        assert_eq!(first_tick(5 * s, s), 6 * s, "a whole first interval");
        assert_eq!(first_tick(5 * s + s / 2, s), 6 * s, "half an interval");
        assert_eq!(first_tick(5 * s + s / 2 + 1, s), 7 * s, "not less");
        assert_eq!(first_tick(6 * s - 1, s), 7 * s);
    }

    /// Records the times of the intervals.
    #[derive(Default)]
    struct Clock {
        ticks: Vec<u64>,
    }
    impl Polled for Clock {
        type Error = ConsumerFailed;
        fn begin(&mut self, _out: &mut dyn Consumer, _t0_ns: u64) {}
        fn poll_events(&mut self, _out: &mut dyn Consumer) -> Result<(), ConsumerFailed> {
            Ok(())
        }
        fn interval(&mut self, _out: &mut dyn Consumer, t_ns: u64) -> Result<(), ConsumerFailed> {
            self.ticks.push(t_ns);
            Ok(())
        }
    }
    struct Nothing;
    impl Consumer for Nothing {
        fn events(&mut self, _iface: &str, _events: &[Event]) -> Result<(), ConsumerError> {
            Ok(())
        }
        fn snapshot(&mut self, _snap: &Snapshot) -> Result<(), ConsumerError> {
            Ok(())
        }
    }

    /// Every interval but the last (the stop's) ends in its own period of the wall clock, at or
    /// after the period's start: intervals end on multiples of the interval, one per multiple
    /// (however late the thread wakes), never two in a burst.
    #[test]
    fn intervals_end_on_multiples_of_the_interval_of_the_wall_clock() {
        let every = 30_000_000u64;
        let mut p = Paced {
            inner: Clock::default(),
            interval: Duration::from_nanos(every),
            duration: Some(Duration::from_millis(500)),
        };
        let t0 = now_ns();
        p.run(&mut Nothing, &Stop::default()).unwrap();
        let ticks = &p.inner.ticks;
        assert!(ticks.len() >= 2, "{ticks:?}");
        let periods: Vec<u64> = ticks[..ticks.len() - 1].iter().map(|t| t / every).collect();
        assert!(
            periods[0] * every >= t0 + every / 2,
            "the first interval lasts half an interval at least"
        );
        assert!(
            periods.windows(2).all(|w| w[0] < w[1]),
            "one interval per period: {ticks:?}"
        );
    }
}
