//! Where views come from: a running daemon's `/status`, or a simulated run; and the terminal
//! loop that draws them.
//!
//! A live source runs on its own thread and sends [`Update`]s over a channel, so the UI
//! answers keys while a fetch waits (up to its 5 s timeout) or a simulation step runs.

use std::io;
use std::net::SocketAddr;
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tierd_linux::status::{fetch_status, StatusError};
use tierd_sim::scenario::{ConfigToml, MechanismKind, Scenario, ScenarioError};
use tierd_sim::sim::{SimError, World};

use crate::render::render;
use crate::state::{Key, TopState};
use crate::view::{from_observed, from_snapshot, rates, Rates, TopView};

/// Why `tierd top` cannot show anything.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// The daemon did not answer.
    #[error("no status from {addr}: is `tierd run` running there? (see --addr)")]
    Fetch {
        /// The address asked.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: StatusError,
    },
    /// The scenario could not be found or read.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The simulation failed.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The scale is out of range.
    #[error("--scale must be in (0, 1], got {0}")]
    Scale(f64),
    /// The terminal could not be set up or drawn to.
    #[error("terminal: {0}")]
    Terminal(#[from] io::Error),
}

/// What a live source sends.
#[derive(Clone, Debug)]
pub enum Update {
    /// A new view.
    View(TopView),
    /// This refresh failed (the last view stays).
    Error(String),
    /// No more views will come.
    Finished,
}

/// One view of the daemon at `addr`.
///
/// # Errors
/// [`TopError::Fetch`] when it does not answer with a status.
pub fn daemon_view(addr: SocketAddr) -> Result<TopView, TopError> {
    let s = fetch_status(addr).map_err(|source| TopError::Fetch { addr, source })?;
    Ok(from_snapshot(&s, &addr.to_string()))
}

/// Fetches the daemon's status every `interval` on a thread of its own, until the receiver
/// is dropped.
#[must_use]
pub fn spawn_daemon(addr: SocketAddr, interval: Duration) -> Receiver<Update> {
    let (tx, rx) = channel();
    std::thread::spawn(move || loop {
        let u = match daemon_view(addr) {
            Ok(v) => Update::View(v),
            Err(e) => Update::Error(format!("{e}")),
        };
        if tx.send(u).is_err() {
            return;
        }
        std::thread::sleep(interval);
    });
    rx
}

/// A simulated run to watch: a shipped scenario (or file), one configuration, a scale.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// Shipped scenario name or scenario file.
    pub scenario: String,
    /// Configuration id (default: the first tierd configuration, else the first).
    pub config: Option<String>,
    /// Scale factor, in (0, 1].
    pub scale: f64,
}

impl SimSpec {
    /// The scaled scenario and the configuration to run.
    ///
    /// # Errors
    /// Unknown scenario or configuration, bad scale.
    pub fn resolve(&self) -> Result<(Scenario, ConfigToml), TopError> {
        if !(self.scale > 0.0 && self.scale <= 1.0) {
            return Err(TopError::Scale(self.scale));
        }
        let sc = Scenario::find(&self.scenario)?.scaled(self.scale);
        let config = match &self.config {
            Some(id) => sc.config_by_id(id)?,
            None => match sc
                .config
                .iter()
                .find(|c| c.mechanism == MechanismKind::Tierd)
                .or_else(|| sc.config.first())
            {
                Some(c) => c,
                // A scenario without configurations: the same error, for no id.
                None => sc.config_by_id("")?,
            },
        };
        let config = config.clone();
        Ok((sc, config))
    }
}

fn sim_label(sc: &Scenario, c: &ConfigToml, scale: f64) -> String {
    format!("sim {} {}, scale {scale}", sc.name, c.id)
}

/// The view of one sample, with the configuration's label among the notes.
fn sim_view(o: &tierd_sim::observe::Observed<'_>, source: &str, c: &ConfigToml) -> TopView {
    let mut v = from_observed(o, source);
    v.notes.push(c.label.clone());
    v
}

/// Runs the whole simulation and returns its last view with the rates over the last sample.
///
/// # Errors
/// As [`SimSpec::resolve`], and a failing run.
pub fn sim_final(spec: &SimSpec) -> Result<(TopView, Option<Rates>), TopError> {
    let (sc, c) = spec.resolve()?;
    let label = sim_label(&sc, &c, spec.scale);
    let world = World::build(&sc)?;
    let mut last: Option<TopView> = None;
    let mut before: Option<TopView> = None;
    world.run_observed(
        &c,
        |_| {},
        |o| {
            before = last.take();
            last = Some(sim_view(o, &label, &c));
        },
    )?;
    let Some(v) = last else {
        return Ok((TopView::default(), None));
    };
    let r = before.as_ref().and_then(|b| rates(b, &v));
    Ok((v, r))
}

/// Runs the simulation on a thread of its own, sending a view per sample and waiting
/// `interval` after each so it can be watched.
///
/// # Errors
/// As [`SimSpec::resolve`] (checked before the thread starts).
pub fn spawn_sim(spec: &SimSpec, interval: Duration) -> Result<Receiver<Update>, TopError> {
    let (sc, c) = spec.resolve()?;
    let label = sim_label(&sc, &c, spec.scale);
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let world = match World::build(&sc) {
            Ok(w) => w,
            Err(e) => {
                let _ = tx.send(Update::Error(format!("{e}")));
                return;
            }
        };
        let mut watched = true;
        let res = world.run_observed(
            &c,
            |_| {},
            |o| {
                // Once the UI is gone the run finishes unwatched (the process is exiting).
                if watched {
                    watched = tx.send(Update::View(sim_view(o, &label, &c))).is_ok();
                    if watched {
                        std::thread::sleep(interval);
                    }
                }
            },
        );
        let last = match res {
            Ok(_) => Update::Finished,
            Err(e) => Update::Error(format!("{e}")),
        };
        let _ = tx.send(last);
    });
    Ok(rx)
}

/// The key a terminal key event means to `tierd top`, if any.
#[must_use]
pub fn map_key(k: KeyEvent) -> Option<Key> {
    if k.kind != KeyEventKind::Press {
        return None;
    }
    Some(match k.code {
        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Key::Interrupt,
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        _ => return None,
    })
}

/// Applies what the source sent since the last call.
pub fn drain(rx: &Receiver<Update>, state: &mut TopState) {
    loop {
        match rx.try_recv() {
            Ok(Update::View(v)) => state.update(v),
            Ok(Update::Error(e)) => state.set_error(e),
            Ok(Update::Finished) | Err(TryRecvError::Disconnected) => {
                state.finished = true;
                return;
            }
            Err(TryRecvError::Empty) => return,
        }
    }
}

/// The interactive UI over `rx` until `q` or Ctrl-C. Sets the terminal up (raw mode, the
/// alternate screen) and restores it, also on error.
///
/// # Errors
/// The terminal could not be set up or drawn to.
pub fn run_tui(rx: &Receiver<Update>) -> Result<(), TopError> {
    let mut terminal = ratatui::try_init()?;
    let mut state = TopState::default();
    let res = (|| -> io::Result<()> {
        loop {
            if !state.finished {
                drain(rx, &mut state);
            }
            terminal.draw(|f| render(f, &state))?;
            if event::poll(Duration::from_millis(100))? {
                if let Event::Key(k) = event::read()? {
                    if let Some(key) = map_key(k) {
                        state.key(key);
                    }
                }
            }
            if state.quit {
                return Ok(());
            }
        }
    })();
    ratatui::restore();
    Ok(res?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_and_ctrl_c_interrupts() {
        let k = |code, m| KeyEvent::new(code, m);
        assert_eq!(
            map_key(k(KeyCode::Char('s'), KeyModifiers::NONE)),
            Some(Key::Char('s'))
        );
        assert_eq!(
            map_key(k(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Key::Interrupt)
        );
        assert_eq!(map_key(k(KeyCode::Esc, KeyModifiers::NONE)), Some(Key::Esc));
        assert_eq!(map_key(k(KeyCode::F(1), KeyModifiers::NONE)), None);
        let mut release = k(KeyCode::Char('q'), KeyModifiers::NONE);
        release.kind = KeyEventKind::Release;
        assert_eq!(map_key(release), None);
    }

    #[test]
    fn a_bad_spec_is_refused_before_running() {
        let spec = |scenario: &str, config: Option<&str>, scale| SimSpec {
            scenario: scenario.into(),
            config: config.map(str::to_string),
            scale,
        };
        let e = spec("pointer-chase", Some("ZZ"), 0.1)
            .resolve()
            .unwrap_err();
        assert!(e.to_string().contains("no configuration \"ZZ\""), "{e}");
        assert!(e.to_string().contains("T1"), "{e}");
        assert!(matches!(
            spec("pointer-chase", None, 0.0).resolve(),
            Err(TopError::Scale(_))
        ));
        assert!(matches!(
            spec("no-such-scenario", None, 0.5).resolve(),
            Err(TopError::Scenario(_))
        ));
        // Default: the first tierd configuration.
        let (_, c) = spec("pointer-chase", None, 0.5)
            .resolve()
            .expect("resolves");
        assert_eq!(c.mechanism, MechanismKind::Tierd);
    }

    #[test]
    fn the_drain_applies_views_errors_and_the_end() {
        let (tx, rx) = channel();
        let mut s = TopState::default();
        tx.send(Update::View(TopView {
            time_s: 1.0,
            ..TopView::default()
        }))
        .expect("send");
        tx.send(Update::Error("boom".into())).expect("send");
        drain(&rx, &mut s);
        assert!(s.view.is_some());
        assert_eq!(s.error.as_deref(), Some("boom"));
        assert!(!s.finished);
        drop(tx);
        drain(&rx, &mut s);
        assert!(s.finished);
    }
}
