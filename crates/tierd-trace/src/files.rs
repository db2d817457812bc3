//! Trace files on disk: a directory of `trace.0`, `trace.1`, ... each at most `max_bytes`,
//! at most `max_files` of them (the oldest removed), and reading them back in order.
//!
//! Every file starts with the header (its `seq` is its number), so each one says what engine
//! it came from. A replay needs the run from its start (the engine's state is built from every
//! earlier input): when rotation has removed `trace.0`, [`read`] still reads what is left
//! and [`Trace::complete`] is false, and the replay says its comparison is not exact.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::format::{decode_header, decode_record, encode_header, Header, Record, TraceError};

/// Why a trace file could not be written or read; names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// An I/O error. (The error is in the message, not a `source`: a caller printing the
    /// chain would say it twice.)
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
    /// The contents are not a trace.
    #[error("{}: {error}", path.display())]
    Trace {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        error: TraceError,
    },
    /// A directory without trace files.
    #[error("{}: no trace files (trace.0, trace.1, ...) in this directory", path.display())]
    Empty {
        /// The directory.
        path: PathBuf,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> FileError + '_ {
    move |error| FileError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Limits of a recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A file is closed and the next one started once it holds this many bytes.
    pub max_bytes: u64,
    /// At most this many files are kept; the oldest is removed.
    pub max_files: u32,
}

impl Default for Limits {
    /// 64 MiB x 8: half a gigabyte, about an hour of a busy 100 ms loop.
    fn default() -> Self {
        Limits {
            max_bytes: 64 << 20,
            max_files: 8,
        }
    }
}

/// The path of file `seq` in `dir`.
#[must_use]
pub fn file_path(dir: &Path, seq: u32) -> PathBuf {
    dir.join(format!("trace.{seq}"))
}

/// Writes a trace into a directory, rotating by [`Limits`].
#[derive(Debug)]
pub struct TraceWriter {
    dir: PathBuf,
    header: Header,
    limits: Limits,
    file: File,
    written: u64,
}

impl TraceWriter {
    /// Creates `dir` if needed, removes its old `trace.N` files (a new run starts a new
    /// trace), and starts `trace.0` with `header`.
    ///
    /// # Errors
    /// [`FileError::Io`] naming the directory or file.
    pub fn create(dir: &Path, mut header: Header, limits: Limits) -> Result<Self, FileError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        for seq in list(dir)? {
            let p = file_path(dir, seq);
            std::fs::remove_file(&p).map_err(io_err(&p))?;
        }
        header.seq = 0;
        let (file, written) = start(dir, &header)?;
        Ok(TraceWriter {
            dir: dir.to_path_buf(),
            header,
            limits: Limits {
                max_bytes: limits.max_bytes.max(1),
                max_files: limits.max_files.max(1),
            },
            file,
            written,
        })
    }

    /// Records that the engine was reconfigured (a SIGHUP reload) before the next pass: a
    /// [`crate::format::Record::Config`] in the trace, and the header of every
    /// later file carries the new configuration, so a file read after rotation starts from
    /// the configuration in force.
    ///
    /// # Errors
    /// A [`FileError`] when the write fails.
    pub fn reconfigured(&mut self, config: &tierd_engine::EngineConfig) -> Result<(), FileError> {
        self.header.config = config.clone();
        let json = serde_json::to_string(config).unwrap_or_default();
        let mut buf = Vec::new();
        crate::format::encode_record(&crate::format::Record::Config(json), &mut buf);
        self.append(&buf)
    }

    /// Appends a pass's records (from [`crate::record::Recorder`]), whole, to the current
    /// file, then starts the next file if this one is full.
    ///
    /// # Errors
    /// [`FileError::Io`] naming the file.
    pub fn append(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let path = file_path(&self.dir, self.header.seq);
        self.file.write_all(bytes).map_err(io_err(&path))?;
        self.written += bytes.len() as u64;
        if self.written >= self.limits.max_bytes {
            self.header.seq += 1;
            let (file, written) = start(&self.dir, &self.header)?;
            self.file = file;
            self.written = written;
            if let Some(old) = self.header.seq.checked_sub(self.limits.max_files) {
                let p = file_path(&self.dir, old);
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err(&p)(e)),
                }
            }
        }
        Ok(())
    }

    /// The directory written to.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn start(dir: &Path, header: &Header) -> Result<(File, u64), FileError> {
    let path = file_path(dir, header.seq);
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .map_err(io_err(&path))?;
    let h = encode_header(header);
    file.write_all(&h).map_err(io_err(&path))?;
    Ok((file, h.len() as u64))
}

/// The `seq` numbers of the `trace.N` files in `dir`, rising.
fn list(dir: &Path) -> Result<Vec<u32>, FileError> {
    let mut seqs = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        let name = e.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix("trace."))
            .and_then(|n| n.parse::<u32>().ok())
        {
            seqs.push(n);
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// A trace read back: the first file's header and every record, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// The header of the first file read.
    pub header: Header,
    /// All records of all files.
    pub records: Vec<Record>,
    /// Whether the trace starts at the run's start (its first file is `trace.0`).
    pub complete: bool,
    /// The files read.
    pub files: Vec<PathBuf>,
}

/// Reads one file, or every `trace.N` of a directory in order.
///
/// # Errors
/// [`FileError`] naming the file and, for bad contents, the offset.
pub fn read(path: &Path) -> Result<Trace, FileError> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let seqs = list(path)?;
        if seqs.is_empty() {
            return Err(FileError::Empty {
                path: path.to_path_buf(),
            });
        }
        seqs.into_iter().map(|s| file_path(path, s)).collect()
    } else {
        vec![path.to_path_buf()]
    };
    let mut header = None;
    let mut records = Vec::new();
    for f in &files {
        let buf = std::fs::read(f).map_err(io_err(f))?;
        let bad = |error| FileError::Trace {
            path: f.clone(),
            error,
        };
        let (h, mut at) = decode_header(&buf).map_err(bad)?;
        while at < buf.len() {
            let (r, next) = decode_record(&buf, at).map_err(bad)?;
            records.push(r);
            at = next;
        }
        header.get_or_insert(h);
    }
    let Some(header) = header else {
        return Err(FileError::Empty {
            path: path.to_path_buf(),
        });
    };
    Ok(Trace {
        complete: header.seq == 0,
        header,
        records,
        files,
    })
}

#[cfg(test)]
mod tests {
    use tierd_engine::types::Nanos;

    use super::*;
    use crate::format::encode_record;

    fn header() -> Header {
        crate::format::tests_support::header()
    }

    #[test]
    fn rotation_keeps_the_newest_files_and_reads_back_in_order() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("rec");
        let head = encode_header(&header()).len() as u64;
        let limits = Limits {
            max_bytes: head + 300,
            max_files: 3,
        };
        let mut w = TraceWriter::create(&dir, header(), limits).unwrap();
        for t in 0..400_u64 {
            let mut buf = Vec::new();
            encode_record(&Record::Pass { now: Nanos(t) }, &mut buf);
            w.append(&buf).unwrap();
        }
        let seqs = list(&dir).unwrap();
        assert_eq!(seqs.len(), 3, "{seqs:?}");
        assert!(seqs[0] > 0);
        let t = read(&dir).unwrap();
        assert!(!t.complete);
        let times: Vec<u64> = t
            .records
            .iter()
            .map(|r| match r {
                Record::Pass { now } => now.0,
                _ => panic!("{r:?}"),
            })
            .collect();
        assert!(
            times.windows(2).all(|w| w[1] == w[0] + 1),
            "in order, none lost between files"
        );
        assert_eq!(times.last(), Some(&399));
        for f in &t.files {
            assert!(std::fs::metadata(f).unwrap().len() <= head + 300 + 16);
        }
        // A new recording into the same directory starts over.
        TraceWriter::create(&dir, header(), limits).unwrap();
        let t = read(&dir).unwrap();
        assert!(t.complete && t.records.is_empty());
    }

    #[test]
    fn errors_name_the_file() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("x");
        std::fs::write(&f, b"TIERDTRC\x01\x00").unwrap();
        let e = read(&f).unwrap_err().to_string();
        assert!(e.starts_with(&f.display().to_string()), "{e}");
        assert!(e.contains("truncated at offset 10"), "{e}");
        let e = read(d.path()).unwrap_err().to_string();
        assert!(e.contains("no trace files"), "{e}");
    }
}
