//! What PFC / PAUSE counters cannot give, from the frames themselves ([`PauseEvent`]s, in
//! arrival order): the time each priority was actually paused, and the densest one-second window
//! of XOFF frames (docs/metrics.md "PFC and 802.3x PAUSE").
//!
//! - **Paused time**: a frame with pause time q on priority p at time t pauses p until
//!   t + q × 512 bit times; a later frame on p replaces the running pause (q = 0, an XON, ends
//!   it). The paused time of an interval is the union of those windows clipped to the interval,
//!   so it never exceeds the interval's length, unlike the requested quanta's sum. It needs the
//!   link speed (a quantum is 512 bit times); without one it is unknown.
//! - **XOFF peak**: the largest number of XOFF frames of a priority in a one-second window
//!   ending at one of the interval's XOFF frames, at 1 ms resolution (a ring of 1,000
//!   one-millisecond buckets): a 5,000/s storm lasting half a second reads 2,500, whatever the
//!   interval's length; one across an interval boundary reads all of its densest second in the
//!   later interval; an interval without XOFF reads 0.
//!
//! Memory per interface direction is fixed: 9 pause clocks and, for a priority once it saw an
//! XOFF, one ring of 4 KB.

use observer_common::maps::{PauseEvent, dir};
use observer_common::parse::{MAC_CONTROL_PAUSE, MAC_CONTROL_PFC};

/// PFC priorities 0-7, and index 8 for 802.3x PAUSE.
pub const CLOCKS: usize = 9;
/// The 802.3x PAUSE clock's index.
pub const PAUSE_8023X: usize = 8;
const BUCKET_NS: u64 = 1_000_000;
const BUCKETS: usize = 1000;

/// One priority's pause: paused until `until`, time accounted up to `mark`.
#[derive(Clone, Copy, Debug, Default)]
struct PauseClock {
    until: u64,
    mark: u64,
    /// Paused nanoseconds accounted since the last [`PauseClock::take`].
    acc: u64,
}

impl PauseClock {
    /// Accounts the paused time up to `t` (a time before `mark` changes nothing).
    fn advance(&mut self, t: u64) {
        if t <= self.mark {
            return;
        }
        if self.until > self.mark {
            self.acc += self.until.min(t) - self.mark;
        }
        self.mark = t;
    }

    /// A frame at `t` asking for `pause_ns` (0: XON). A frame older than the last one seen (two
    /// CPUs' records crossing) is taken as arriving at that time.
    fn frame(&mut self, t: u64, pause_ns: u64) {
        let t = t.max(self.mark);
        self.advance(t);
        self.until = t.saturating_add(pause_ns);
    }

    /// Paused time since the last take, up to `t`.
    fn take(&mut self, t: u64) -> u64 {
        self.advance(t);
        std::mem::take(&mut self.acc)
    }
}

/// XOFF frames per 1 ms bucket over the last second, and the largest one-second sum.
#[derive(Clone, Debug)]
struct XoffWindow {
    ring: Box<[u32; BUCKETS]>,
    /// Bucket index (time / 1 ms) of the newest bucket.
    head: u64,
    /// XOFF frames in the window ending with `head`.
    sum: u64,
    /// Largest `sum` since the last [`XoffWindow::take_peak`].
    peak: u64,
}

impl XoffWindow {
    fn new() -> XoffWindow {
        XoffWindow {
            ring: Box::new([0; BUCKETS]),
            head: 0,
            sum: 0,
            peak: 0,
        }
    }

    /// Moves the window's end to bucket `b`, dropping the buckets that fall out of it.
    fn advance(&mut self, b: u64) {
        if b <= self.head {
            return;
        }
        if b - self.head >= BUCKETS as u64 {
            self.ring.fill(0);
            self.sum = 0;
        } else {
            for x in self.head + 1..=b {
                let slot = &mut self.ring[(x % BUCKETS as u64) as usize];
                self.sum -= *slot as u64;
                *slot = 0;
            }
        }
        self.head = b;
    }

    fn xoff(&mut self, t: u64) {
        let b = t / BUCKET_NS;
        self.advance(b);
        // An older record still inside the window counts in its own bucket; one older than the
        // window counts in the oldest (the window cannot reach back further).
        let b = b.max(self.head.saturating_sub(BUCKETS as u64 - 1));
        let slot = &mut self.ring[(b % BUCKETS as u64) as usize];
        *slot = slot.saturating_add(1);
        self.sum += 1;
        self.peak = self.peak.max(self.sum);
    }

    /// The peak since the last take. The ring keeps the frames (they belong to windows that
    /// end at the next interval's frames too), the peak starts again: only a window ending at
    /// one of an interval's own XOFF frames counts for it, so an interval without XOFF reads 0.
    fn take_peak(&mut self, t: u64) -> u64 {
        self.advance(t / BUCKET_NS);
        std::mem::take(&mut self.peak)
    }
}

/// Paused time and XOFF peak of one interface direction over one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PauseFigures {
    /// Paused nanoseconds per [`CLOCKS`] index; `None` without a link speed.
    pub paused_ns: Option<[u64; CLOCKS]>,
    /// Largest XOFF count in a one-second window per PFC priority.
    pub xoff_peak_1s: [u64; 8],
}

#[derive(Clone, Debug, Default)]
struct DirState {
    clocks: [PauseClock; CLOCKS],
    windows: [Option<XoffWindow>; 8],
}

/// The pause clocks and XOFF windows of one interface, both directions.
#[derive(Clone, Debug, Default)]
pub struct PauseTracker {
    dirs: [DirState; dir::COUNT],
    link_bps: Option<u64>,
}

impl PauseTracker {
    /// A tracker for a link of `link_bps` (None or 0: unknown, no paused time).
    pub fn new(link_bps: Option<u64>) -> PauseTracker {
        PauseTracker {
            link_bps: link_bps.filter(|&b| b > 0),
            ..Default::default()
        }
    }

    /// The link speed became known or changed (from the next frame on).
    pub fn set_link_speed(&mut self, link_bps: Option<u64>) {
        if let Some(b) = link_bps.filter(|&b| b > 0) {
            self.link_bps = Some(b);
        }
    }

    fn pause_ns(&self, quanta: u16) -> u64 {
        let bps = self.link_bps.unwrap_or(0);
        if bps == 0 {
            return 0;
        }
        (quanta as u128 * 512 * 1_000_000_000 / bps as u128) as u64
    }

    /// One PFC or PAUSE frame.
    pub fn frame(&mut self, e: &PauseEvent) {
        let d = (e.dir as usize).min(dir::COUNT - 1);
        let durations: [u64; 8] = e.times.map(|q| self.pause_ns(q));
        let st = &mut self.dirs[d];
        match e.opcode {
            MAC_CONTROL_PFC => {
                for (p, &pause_ns) in durations.iter().enumerate() {
                    if e.class_enable & (1 << p) == 0 {
                        continue;
                    }
                    st.clocks[p].frame(e.ts_ns, pause_ns);
                    if e.times[p] > 0 {
                        st.windows[p]
                            .get_or_insert_with(XoffWindow::new)
                            .xoff(e.ts_ns);
                    }
                }
            }
            MAC_CONTROL_PAUSE => st.clocks[PAUSE_8023X].frame(e.ts_ns, durations[0]),
            _ => {}
        }
    }

    /// The figures of direction `d` for the interval ending at `end_ns`; the next interval
    /// starts there.
    pub fn take(&mut self, d: usize, end_ns: u64) -> PauseFigures {
        let known = self.link_bps.is_some();
        let st = &mut self.dirs[d.min(dir::COUNT - 1)];
        let paused = st.clocks.each_mut().map(|c| c.take(end_ns));
        let peaks = st
            .windows
            .each_mut()
            .map(|w| w.as_mut().map_or(0, |w| w.take_peak(end_ns)));
        PauseFigures {
            paused_ns: known.then_some(paused),
            xoff_peak_1s: peaks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;
    /// 100 Gbit/s: one quantum is 5.12 ns.
    const BPS: u64 = 100_000_000_000;

    fn pfc(t: u64, p: usize, q: u16) -> PauseEvent {
        let mut times = [0; 8];
        times[p] = q;
        PauseEvent {
            ts_ns: t,
            times,
            opcode: MAC_CONTROL_PFC,
            class_enable: 1 << p,
            ..Default::default()
        }
    }

    /// Quanta pausing `ns` nanoseconds at 100G.
    fn q(ns: u64) -> u16 {
        (ns * 100 / 512) as u16
    }

    #[test]
    fn a_new_xoff_replaces_the_running_pause_and_an_xon_ends_it() {
        let mut t = PauseTracker::new(Some(BPS));
        // 65535 quanta = 335.5 us at 100G; XOFFs every 100 us: paused the whole 1 ms run,
        // not 10 x 335.5 us.
        for i in 0..10 {
            t.frame(&pfc(S + i * 100_000, 3, 65535));
        }
        // XON at 1.0011 s ends the last pause (from 1.0009 s) 0.2 ms after it started
        t.frame(&pfc(S + 1_100_000, 3, 0));
        let f = t.take(dir::INGRESS as usize, 2 * S);
        assert_eq!(f.paused_ns.unwrap()[3], 1_100_000);
        let requested = 10 * 65535u64 * 512 * 1_000_000_000 / BPS;
        assert!(
            requested > 3_000_000,
            "the quanta's sum says {requested} ns"
        );
        // nothing in the next interval
        assert_eq!(t.take(0, 3 * S).paused_ns.unwrap()[3], 0);
    }

    #[test]
    fn paused_time_is_clipped_to_the_interval_and_continues_in_the_next() {
        let mut t = PauseTracker::new(Some(BPS));
        t.frame(&pfc(S - 100_000, 3, q(300_000)));
        let whole = q(300_000) as u64 * 512 * 1_000_000_000 / BPS;
        assert_eq!(whole, 299_996);
        assert_eq!(t.take(0, S).paused_ns.unwrap()[3], 100_000);
        assert_eq!(t.take(0, 2 * S).paused_ns.unwrap()[3], whole - 100_000);
    }

    #[test]
    fn pause_8023x_and_priorities_are_separate_and_no_speed_means_unknown() {
        let mut t = PauseTracker::new(Some(BPS));
        t.frame(&PauseEvent {
            ts_ns: S,
            times: [q(1000), 0, 0, 0, 0, 0, 0, 0],
            opcode: MAC_CONTROL_PAUSE,
            ..Default::default()
        });
        t.frame(&pfc(S, 5, q(2000)));
        let f = t.take(0, 2 * S).paused_ns.unwrap();
        assert_eq!((f[PAUSE_8023X], f[5], f[3]), (998, 1996, 0));
        let mut u = PauseTracker::new(None);
        u.frame(&pfc(S, 3, 100));
        let f = u.take(0, 2 * S);
        assert_eq!(f.paused_ns, None);
        assert_eq!(f.xoff_peak_1s[3], 1, "the peak needs no speed");
    }

    #[test]
    fn xoff_peak_is_the_densest_second_not_the_interval_average() {
        let mut t = PauseTracker::new(None);
        // 5,000 XOFF/s for half a second (one every 200 us) inside a 10 s interval
        for i in 0..2500 {
            t.frame(&pfc(3 * S + i * 200_000, 3, 100));
        }
        let f = t.take(0, 10 * S);
        assert_eq!(f.xoff_peak_1s[3], 2500);
        assert_eq!(t.take(0, 20 * S).xoff_peak_1s[3], 0, "window long past");
        // 1,500 per second for 3 s: no one-second window holds more than 1,500 (+1 at the
        // bucket edge, 1 ms resolution)
        let mut t = PauseTracker::new(None);
        for i in 0..4500 {
            t.frame(&pfc(S + i * S / 1500, 3, 100));
        }
        let peak = t.take(0, 5 * S).xoff_peak_1s[3];
        assert!((1500..=1502).contains(&peak), "{peak}");
    }

    #[test]
    fn a_window_spanning_two_intervals_counts_in_the_later_one_and_only_at_its_frames() {
        let mut t = PauseTracker::new(None);
        let at = |i: u64| S - 50 * MS + i * MS; // 0.95 s .. 1.049 s
        for i in 0..50 {
            t.frame(&pfc(at(i), 3, 100));
        }
        // first interval ends at 1 s: 50 frames in it
        assert_eq!(t.take(0, S).xoff_peak_1s[3], 50);
        for i in 50..100 {
            t.frame(&pfc(at(i), 3, 100));
        }
        // windows ending in the second interval hold all 100
        assert_eq!(t.take(0, 2 * S).xoff_peak_1s[3], 100);
        // one frame at 2.01 s: its window reaches back into the second interval and holds the
        // 39 frames of 1.011-1.049 s and itself
        t.frame(&pfc(2 * S + 10 * MS, 3, 100));
        assert_eq!(t.take(0, 3 * S).xoff_peak_1s[3], 40);
        // the fourth interval has no XOFF of its own: no storm in it, although a window ending
        // at its start still holds the frame of 2.01 s
        assert_eq!(t.take(0, 4 * S).xoff_peak_1s[3], 0);
    }

    #[test]
    fn records_out_of_order_and_xon_do_not_count_as_xoff() {
        let mut t = PauseTracker::new(Some(BPS));
        t.frame(&pfc(2 * S, 3, q(1000)));
        t.frame(&pfc(2 * S - 10, 3, 0)); // an XON recorded a little earlier on another CPU
        let f = t.take(0, 3 * S);
        assert_eq!(
            f.paused_ns.unwrap()[3],
            0,
            "taken as arriving with the XOFF: ends it"
        );
        assert_eq!(f.xoff_peak_1s[3], 1);
    }
}
