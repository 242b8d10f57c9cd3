//! The terminal: raw mode and the alternate screen while the view runs, restored on every way
//! out (the view closed, its thread ending, a panic anywhere); log lines held back meanwhile.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use ratatui::crossterm::cursor::Show;
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};

/// The terminal is in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Raw mode, the alternate screen; a panic hook that restores the terminal before the panic
/// message is printed. Log lines for stderr are held until [`restore`] when stderr is this
/// terminal.
pub fn enter() -> std::io::Result<()> {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
    enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    if std::io::stderr().is_terminal() {
        LOGS.hold.store(true, Ordering::SeqCst);
    }
    if let Err(e) = execute!(std::io::stdout(), EnterAlternateScreen) {
        restore();
        return Err(e);
    }
    Ok(())
}

/// Back to the terminal as it was (idempotent: only the first call after [`enter`] acts), then
/// the log lines held meanwhile.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(std::io::stdout(), LeaveAlternateScreen, Show);
    }
    LOGS.release();
}

/// The terminal (stdout) hung up: the session closed.
pub fn hung_up() -> bool {
    let mut p = [libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    }];
    poll(&mut p, 0).is_ok_and(|_| gone(&p[0]))
}

fn gone(p: &libc::pollfd) -> bool {
    p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> std::io::Result<usize> {
    // SAFETY: `fds` is a valid slice of pollfd for the call's duration.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    match n {
        n if n >= 0 => Ok(n as usize),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Where keys come from: the terminal crossterm reads (standard input when it is a terminal,
/// else `/dev/tty`). Waited on here, not in crossterm, whose reader spins without end on a
/// terminal that hung up instead of returning.
pub struct Input {
    fd: RawFd,
    _tty: Option<std::fs::File>,
}

impl Input {
    pub fn open() -> std::io::Result<Input> {
        if std::io::stdin().is_terminal() {
            return Ok(Input {
                fd: libc::STDIN_FILENO,
                _tty: None,
            });
        }
        let tty = std::fs::File::open("/dev/tty")?;
        Ok(Input {
            fd: tty.as_raw_fd(),
            _tty: Some(tty),
        })
    }

    /// Up to `timeout` for bytes to read: true when there are; an error when the terminal
    /// (the input or stdout) hung up.
    pub fn wait(&self, timeout: Duration) -> std::io::Result<bool> {
        let mut p = [
            libc::pollfd {
                fd: self.fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: libc::STDOUT_FILENO,
                events: 0,
                revents: 0,
            },
        ];
        match poll(&mut p, timeout.as_millis().min(60_000) as i32) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(false),
            r => r?,
        };
        if p.iter().any(gone) {
            return Err(std::io::Error::other("the terminal hung up"));
        }
        Ok(p[0].revents & libc::POLLIN != 0)
    }
}

/// Log lines held while the view covers the terminal (at most [`HELD_MAX`] bytes; older lines
/// are dropped and counted).
struct HeldLogs {
    hold: AtomicBool,
    lines: Mutex<(VecDeque<Vec<u8>>, usize, u64)>,
}

const HELD_MAX: usize = 1 << 20;

static LOGS: HeldLogs = HeldLogs {
    hold: AtomicBool::new(false),
    lines: Mutex::new((VecDeque::new(), 0, 0)),
};

impl HeldLogs {
    fn release(&self) {
        self.hold.store(false, Ordering::SeqCst);
        let (lines, _, dropped) =
            std::mem::take(&mut *self.lines.lock().unwrap_or_else(|e| e.into_inner()));
        let mut err = std::io::stderr().lock();
        if dropped > 0 {
            let _ = writeln!(
                err,
                "({dropped} earlier log lines dropped while the terminal view ran)"
            );
        }
        for l in lines {
            let _ = err.write_all(&l);
        }
    }
}

/// The writer of the log lines on stderr: held while the terminal view runs on the same
/// terminal, written at once otherwise (`tracing_subscriber`'s `with_writer(term::log_writer)`).
pub fn log_writer() -> LogWriter {
    LogWriter
}

pub struct LogWriter;

impl Write for LogWriter {
    /// One log line (the formatter writes each event at once), its control characters made
    /// visible ([`contract::error::visible`]): an interface name holding an escape sequence
    /// reaches the log as text.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let line = contract::error::visible(&text);
        if !LOGS.hold.load(Ordering::SeqCst) {
            std::io::stderr().write_all(line.as_bytes())?;
            return Ok(buf.len());
        }
        let mut g = LOGS.lines.lock().unwrap_or_else(|e| e.into_inner());
        let (lines, bytes, dropped) = &mut *g;
        let buf = line.as_bytes();
        lines.push_back(buf.to_vec());
        *bytes += buf.len();
        while *bytes > HELD_MAX {
            match lines.pop_front() {
                Some(l) => {
                    *bytes -= l.len();
                    *dropped += 1;
                }
                None => break,
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
