//! The threads of one scenario run, in the order they start: the fallback captures (with
//! `--observer userspace` or `--pcap`), the responder on h2, the PFC/PAUSE sender in the switch
//! (pfc-storm), then the requester on h1. When the requester is done (and a short wait for the
//! last ACKs has passed), `done` stops the others, and their results make the ground truth.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::faults::{self, NftCounts, PfcSent};
use super::observe::{self, ObserverMode};
use super::rc::{self, RcConfig, ReqStats, Responder};
use super::topo::{H1_IF, H2_IF, Topology};
use super::{LabArgs, LabError, ScenarioSpec, Truth, stop_requested};
use observer::pipeline::PolicyConfig;

/// A fallback capture's summary.json document and the frames its socket lost.
pub type Captured = (Value, u64);

type Handle<'scope, T> = ScopedJoinHandle<'scope, Result<T, LabError>>;

/// Everything the traffic of one scenario needs, and the flags its threads share.
pub struct TrafficRun<'a> {
    pub args: &'a LabArgs,
    pub spec: &'a ScenarioSpec,
    pub cfg: &'a RcConfig,
    pub topo: &'a Topology,
    /// The scenario's observer output directory (`<out>/<scenario>`).
    pub out_dir: &'a Path,
    pub policy: &'a PolicyConfig,
    /// Set when the traffic is over: the responder and the captures stop.
    done: AtomicBool,
    /// Each capture (h2, h1) has its socket open.
    cap_ready: [AtomicBool; 2],
    /// The responder has its socket open.
    resp_ready: AtomicBool,
}

impl<'a> TrafficRun<'a> {
    pub fn new(
        args: &'a LabArgs,
        spec: &'a ScenarioSpec,
        cfg: &'a RcConfig,
        topo: &'a Topology,
        out_dir: &'a Path,
        policy: &'a PolicyConfig,
    ) -> Self {
        TrafficRun {
            args,
            spec,
            cfg,
            topo,
            out_dir,
            policy,
            done: AtomicBool::new(false),
            cap_ready: [AtomicBool::new(false), AtomicBool::new(false)],
            resp_ready: AtomicBool::new(false),
        }
    }

    /// Runs the traffic and returns the ground truth (without the nft counters, read from the
    /// switch afterwards) and what the fallback captures returned.
    pub fn run(&self) -> Result<(Truth, Vec<Captured>), LabError> {
        std::thread::scope(|s| {
            let r = self.start_and_finish(s);
            // Also when a thread failed at start: the others stop instead of waiting for `done`.
            self.done.store(true, Ordering::SeqCst);
            r
        })
    }

    fn start_and_finish<'s>(
        &'s self,
        s: &'s Scope<'s, '_>,
    ) -> Result<(Truth, Vec<Captured>), LabError> {
        let caps = self.start_captures(s)?;
        let resp = self.start_responder(s)?;
        let pfc = self.spec.pfc.map(|plan| {
            let sw = &self.topo.sw;
            s.spawn(move || faults::send_pfc(sw, plan))
        });
        let req = self.start_requester(s);
        self.finish(req, pfc, resp, caps)
    }

    /// The fallback captures on h2 and h1, when the observer is the fallback or `--pcap` is
    /// given; returns once both sockets are open.
    fn start_captures<'s>(
        &'s self,
        s: &'s Scope<'s, '_>,
    ) -> Result<Vec<Handle<'s, Captured>>, LabError> {
        let args = self.args;
        let mut caps = Vec::new();
        if args.observer != ObserverMode::Userspace && args.pcap.is_none() {
            return Ok(caps);
        }
        for (i, (ns, iface, host)) in self.topo.observed_hosts().into_iter().enumerate() {
            let (done, ready) = (&self.done, &self.cap_ready[i]);
            let pcap = args
                .pcap
                .as_ref()
                .map(|d| d.join(format!("{}-{iface}.pcap", self.spec.name)));
            let col =
                (args.observer == ObserverMode::Userspace).then(|| observe::FallbackCollector {
                    out_dir: self.out_dir.join(host),
                    host: format!("lab-{host}"),
                    policy: self.policy.clone(),
                });
            caps.push(s.spawn(move || {
                observe::userspace_capture(ns, iface, done, ready, pcap.as_deref(), col)
            }));
        }
        wait_flags(&self.cap_ready[..], &caps)?;
        Ok(caps)
    }

    /// The responder on h2; returns once its socket is open.
    fn start_responder<'s>(
        &'s self,
        s: &'s Scope<'s, '_>,
    ) -> Result<Handle<'s, Responder>, LabError> {
        let (cfg, done, ready, h2) = (self.cfg, &self.done, &self.resp_ready, &self.topo.h2);
        let resp = s.spawn(move || -> Result<Responder, LabError> {
            let _in = h2.enter().map_err(|source| LabError::Topology {
                what: "entering h2",
                source,
            })?;
            rc::run_responder(cfg, H2_IF, done, ready)
        });
        wait_flags(
            std::slice::from_ref(&self.resp_ready),
            std::slice::from_ref(&resp),
        )?;
        Ok(resp)
    }

    /// The requester on h1: the traffic itself.
    fn start_requester<'s>(&'s self, s: &'s Scope<'s, '_>) -> Handle<'s, Vec<ReqStats>> {
        let (cfg, h1) = (self.cfg, &self.topo.h1);
        s.spawn(move || -> Result<Vec<ReqStats>, LabError> {
            let _in = h1.enter().map_err(|source| LabError::Topology {
                what: "entering h1",
                source,
            })?;
            rc::run_requester(cfg, H1_IF)
        })
    }

    /// Waits for the requester and the PFC sender, lets the last ACKs through, stops the
    /// responder and the captures, and gathers every thread's result (the first error wins, in
    /// the order requester, PFC sender, responder, captures).
    fn finish(
        &self,
        req: Handle<'_, Vec<ReqStats>>,
        pfc: Option<Handle<'_, PfcSent>>,
        resp: Handle<'_, Responder>,
        caps: Vec<Handle<'_, Captured>>,
    ) -> Result<(Truth, Vec<Captured>), LabError> {
        let req = join(req);
        let pfc = pfc.map(join).transpose();
        // Stragglers (last ACKs) reach the observers before they stop.
        std::thread::sleep(Duration::from_millis(50));
        self.done.store(true, Ordering::SeqCst);
        let resp = join(resp);
        let caps: Vec<_> = caps.into_iter().map(join).collect();
        let truth = Truth {
            req: req?,
            pfc: pfc?.unwrap_or_default(),
            resp: resp?,
            nft: NftCounts::default(),
        };
        let caps = caps.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok((truth, caps))
    }
}

/// Waits until every flag is set (each thread has opened its socket); fails when one of the
/// threads ended first, on Ctrl-C / SIGTERM, or after 10 s.
fn wait_flags<T>(flags: &[AtomicBool], handles: &[Handle<'_, T>]) -> Result<(), LabError> {
    let t0 = Instant::now();
    while !flags.iter().all(|f| f.load(Ordering::SeqCst)) {
        if handles.iter().any(|h| h.is_finished()) {
            return Err(LabError::Traffic(
                "a lab thread failed at start (see the error below)".into(),
            ));
        }
        if stop_requested() {
            return Err(LabError::Interrupted);
        }
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(LabError::Traffic(
                "lab threads did not start within 10 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn join<T>(h: Handle<'_, T>) -> Result<T, LabError> {
    h.join()
        .unwrap_or_else(|_| Err(LabError::Traffic("a lab thread panicked".into())))
}
