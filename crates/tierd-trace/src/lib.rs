//! # tierd-trace: record and replay
//!
//! A trace is what the engine was given and what it decided, pass by pass, so that a run can
//! be replayed offline through the same deterministic engine, with the recorded configuration
//! (the same decisions, which the replay checks) or another one (what it would have done).
//!
//! - [`format`](mod@format): the file format (header, records), encode and decode over byte slices;
//!   documented in docs/trace.md.
//! - [`record`]: [`record::Recorder`], the [`tierd_engine::Backend`] wrapper that writes down
//!   every engine input at the one place inputs enter the engine.
//! - [`files`]: `trace.N` files in a directory, bounded in size with rotation, and reading
//!   them back.
//! - [`replay`](mod@replay): [`replay::ReplayBackend`] and [`replay::replay`].
//! - [`heat`]: access heat and working-set size per process, for `tierd report --heatmap`.
//! - [`synth`]: a small deterministic machine to record without a kernel.
//!
//! A crate of its own rather than a module of the engine: the engine stays free of I/O and
//! of the encoders, and the daemon, the CLI and the fuzz targets share one implementation.

pub mod files;
pub mod format;
pub mod heat;
pub mod record;
pub mod replay;
pub mod synth;

pub use files::{read, FileError, Limits, Trace, TraceWriter};
pub use format::{Header, Record, TraceError};
pub use record::Recorder;
pub use replay::{passes, replay, Replay, ReplayError};
