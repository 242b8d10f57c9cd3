//! The terminal view of the live command (stdout a terminal, no `--plain`), on ratatui with its
//! crossterm backend:
//!
//! - [`model`]: the view's data, kept by a [`crate::sinks::Sink`] of the collector from the
//!   same rows as the tables, posted to a [`model::Mailbox`] after every interval;
//! - [`screen`]: sort, filter, scroll and pause, and what each key does;
//! - [`draw`]: the panes;
//! - [`term`]: raw mode and the alternate screen, restored on every way out, and the log
//!   lines held back meanwhile.
//!
//! The screen has a thread of its own: it takes what the mailbox holds, waits at most 50 ms
//! for keys, and draws after every new interval and every key. The collector never waits
//! for it. `q` (or Ctrl-C, which raw mode turns into a key) sets the run's [`Stop`], as
//! SIGINT does.

pub mod draw;
pub mod model;
pub mod screen;
pub mod term;

use std::io::BufWriter;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyEventKind};

use crate::sources::Stop;
use model::Mailbox;
pub use model::ViewSink;
pub use screen::HeaderInfo;
use screen::{Action, Screen};

#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    #[error("terminal")]
    Terminal(#[from] std::io::Error),
    #[error("the terminal view's thread panicked (see the message above)")]
    Panicked,
}

/// The running view. [`Tui::close`] (or dropping it) ends its thread and restores the terminal.
pub struct Tui {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), TuiError>>>,
    /// Closed when the thread has ended.
    ended: Receiver<()>,
}

/// How long [`Tui::close`] waits for the view's thread (a draw and a 50 ms key poll take far
/// less); past it the thread is left to the process's exit.
const END_WAIT: Duration = Duration::from_secs(2);

type Term = Terminal<CrosstermBackend<BufWriter<std::io::Stdout>>>;

impl Tui {
    /// Takes over the terminal and starts the view's thread; the returned sink goes to the
    /// collector (off-DSCP counted against `expected_dscp`). The thread sets `stop` when `q` is
    /// pressed, and when it ends on an error or a panic (the run then stops cleanly).
    pub fn start(
        info: HeaderInfo,
        expected_dscp: [u8; 3],
        stop: &Stop,
    ) -> Result<(Tui, ViewSink), TuiError> {
        let mailbox = Arc::new(Mailbox::default());
        term::enter()?;
        let backend = CrosstermBackend::new(BufWriter::with_capacity(1 << 16, std::io::stdout()));
        let terminal = Terminal::new(backend).inspect_err(|_| term::restore())?;
        let done = Arc::new(AtomicBool::new(false));
        let (m, d, st) = (mailbox.clone(), done.clone(), stop.clone());
        let (ended_tx, ended) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("terminal view".into())
            .spawn(move || {
                let _guard = StopOnExit {
                    stop: st.clone(),
                    done: d.clone(),
                    _ended: ended_tx,
                };
                let mut t = terminal;
                let res = run(&mut t, &m, Screen::new(info), &st, &d);
                if term::hung_up() {
                    // nothing to restore on a terminal that is gone (its drop would complain)
                    std::mem::forget(t);
                }
                res
            })
            .inspect_err(|_| term::restore())?;
        let tui = Tui {
            done,
            thread: Some(thread),
            ended,
        };
        Ok((tui, ViewSink::new(expected_dscp, mailbox)))
    }

    /// Ends the view: its thread stops drawing, the terminal is restored. The thread's error,
    /// if it ended on one.
    pub fn close(mut self) -> Result<(), TuiError> {
        self.end()
    }

    fn end(&mut self) -> Result<(), TuiError> {
        self.done.store(true, Ordering::SeqCst);
        // The thread's guard drops its sender when the thread ends (returned or panicked).
        let ended = !matches!(
            self.ended.recv_timeout(END_WAIT),
            Err(RecvTimeoutError::Timeout)
        );
        let res = match self.thread.take() {
            Some(t) if ended => match t.join() {
                Ok(r) => r,
                Err(_) => Err(TuiError::Panicked),
            },
            Some(_) => {
                tracing::warn!(
                    "the terminal view's thread did not end; the terminal is restored without it"
                );
                Ok(())
            }
            None => Ok(()),
        };
        term::restore();
        res
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// Sets the stop when the view's thread ends before it was told to (an error, a panic, the
/// terminal hung up); says that the thread ended.
struct StopOnExit {
    stop: Stop,
    done: Arc<AtomicBool>,
    _ended: Sender<()>,
}

impl Drop for StopOnExit {
    fn drop(&mut self) {
        if !self.done.load(Ordering::SeqCst) {
            term::restore();
            if !self.stop.is_set() {
                self.stop.request();
            }
        }
    }
}

/// The view's loop until it is told to end. A terminal error ends it; one after the stop was
/// set is no error (SIGHUP from a closed session: nothing left to draw on), nor is a hang-up,
/// which stops the run as SIGHUP does.
fn run(
    t: &mut Term,
    mailbox: &Mailbox,
    mut s: Screen,
    stop: &Stop,
    done: &AtomicBool,
) -> Result<(), TuiError> {
    let input = term::Input::open()?;
    let mut dirty = true;
    while !done.load(Ordering::SeqCst) {
        if let Err(e) = step(t, &input, mailbox, &mut s, stop, &mut dirty) {
            if term::hung_up() && !stop.is_set() {
                stop.hang_up();
            }
            return match stop.is_set() {
                true => Ok(()),
                false => Err(e.into()),
            };
        }
    }
    Ok(())
}

/// New data and alerts from the mailbox, a draw when anything changed, then at most 50 ms
/// waiting for keys, and every event crossterm has (keys, resizes).
fn step(
    t: &mut Term,
    input: &term::Input,
    mailbox: &Mailbox,
    s: &mut Screen,
    stop: &Stop,
    dirty: &mut bool,
) -> std::io::Result<()> {
    if let Some(d) = mailbox.take_data() {
        s.set_data(d);
        *dirty = true;
    }
    for a in mailbox.take_alerts() {
        s.push_alert(a);
        *dirty = true;
    }
    if stop.is_set() && !s.stopping {
        s.stopping = true;
        *dirty = true;
    }
    if *dirty {
        t.draw(|f| draw::draw(f, s))?;
        *dirty = false;
    }
    input.wait(Duration::from_millis(50))?;
    while event::poll(Duration::ZERO)? {
        match event::read()? {
            Event::Key(k) if k.kind != KeyEventKind::Release => match s.key(k) {
                Action::Quit => {
                    stop.request();
                    *dirty = true;
                }
                Action::Redraw => *dirty = true,
                Action::Ignore => {}
            },
            Event::Resize(..) => *dirty = true,
            _ => {}
        }
    }
    Ok(())
}
