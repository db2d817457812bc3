//! Getting files out of the guest through its serial console.
//!
//! The guest has no network and no shared disk, only the console. The helpers in
//! [`crate::initramfs::LIB_SCRIPT`] print each file as
//!
//! ```text
//! TIERD-VM-FILE-BEGIN <size in bytes> <name>
//! TIERD-VM-B64 <base64 line>      (busybox `base64`, 76 characters a line)
//! ...
//! TIERD-VM-FILE-END <name>
//! ```
//!
//! and [`decode_exports`] turns a console log back into files, checking the byte count
//! (which catches a kernel message that got into a base64 line). The console arrives with
//! `\r\n` line ends (the guest tty's ONLCR), which are tolerated. [`strip_exports`] removes
//! the framing so a human-readable console remains.

use std::path::{Component, Path, PathBuf};

use base64::Engine as _;

use crate::Error;

/// Line that opens an exported file: `BEGIN <size> <name>`.
pub const BEGIN: &str = "TIERD-VM-FILE-BEGIN ";
/// Prefix of each base64 line.
pub const B64: &str = "TIERD-VM-B64 ";
/// Line that closes an exported file.
pub const END: &str = "TIERD-VM-FILE-END ";

/// One file exported by the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedFile {
    /// The name the guest gave it (a relative or absolute guest path).
    pub name: String,
    /// Its bytes.
    pub data: Vec<u8>,
}

impl ExportedFile {
    /// The path under `dir` this file is written to: the name with any leading `/`
    /// removed. Names with `..` (or that would escape `dir`) are refused.
    ///
    /// # Errors
    /// [`Error::BadGuestPath`].
    pub fn host_path(&self, dir: &Path) -> Result<PathBuf, Error> {
        let rel = Path::new(self.name.trim_start_matches('/'));
        let ok = !self.name.trim_start_matches('/').is_empty()
            && rel.components().all(|c| matches!(c, Component::Normal(_)));
        if !ok {
            return Err(Error::BadGuestPath {
                path: self.name.clone(),
                reason: "exported name must be a plain relative path",
            });
        }
        Ok(dir.join(rel))
    }

    /// Writes the file under `dir` (creating parents) and returns where.
    ///
    /// # Errors
    /// [`Error::BadGuestPath`], [`Error::Io`].
    pub fn write_under(&self, dir: &Path) -> Result<PathBuf, Error> {
        let path = self.host_path(dir)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(&path, &self.data).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }
}

struct Open {
    name: String,
    size: usize,
    b64: String,
}

/// Extracts every exported file from a console log.
///
/// # Errors
/// [`Error::Export`] for a malformed header, a file that is not closed, bad base64, or a
/// size that does not match the header.
pub fn decode_exports(console: &str) -> Result<Vec<ExportedFile>, Error> {
    let mut out = Vec::new();
    let mut open: Option<Open> = None;
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix(BEGIN) {
            if let Some(o) = &open {
                return Err(Error::Export {
                    name: o.name.clone(),
                    reason: "not closed before the next file began".into(),
                });
            }
            let (size, name) = rest.split_once(' ').ok_or_else(|| Error::Export {
                name: rest.to_owned(),
                reason: "header lacks `<size> <name>`".into(),
            })?;
            let size = size.trim().parse().map_err(|_| Error::Export {
                name: name.to_owned(),
                reason: format!("bad size {size:?}"),
            })?;
            open = Some(Open {
                name: name.to_owned(),
                size,
                b64: String::new(),
            });
        } else if let Some(data) = line.strip_prefix(B64) {
            match &mut open {
                Some(o) => o.b64.push_str(data.trim()),
                None => {
                    return Err(Error::Export {
                        name: String::new(),
                        reason: "base64 line outside a file".into(),
                    })
                }
            }
        } else if let Some(name) = line.strip_prefix(END) {
            let o = open.take().ok_or_else(|| Error::Export {
                name: name.to_owned(),
                reason: "end without begin".into(),
            })?;
            if o.name != name {
                return Err(Error::Export {
                    name: o.name,
                    reason: format!("closed as {name:?}"),
                });
            }
            let data = base64::engine::general_purpose::STANDARD
                .decode(o.b64.as_bytes())
                .map_err(|e| Error::Export {
                    name: o.name.clone(),
                    reason: format!("base64: {e}"),
                })?;
            if data.len() != o.size {
                return Err(Error::Export {
                    name: o.name,
                    reason: format!("{} bytes decoded, header said {}", data.len(), o.size),
                });
            }
            out.push(ExportedFile { name: o.name, data });
        }
    }
    match open {
        Some(o) => Err(Error::Export {
            name: o.name,
            reason: "console ended inside the file".into(),
        }),
        None => Ok(out),
    }
}

/// The console without the export framing: each exported file is replaced by one line
/// `[exported <name>]`.
#[must_use]
pub fn strip_exports(console: &str) -> String {
    let mut out = String::with_capacity(console.len().min(1 << 16));
    for line in console.lines() {
        let bare = line.trim_end_matches('\r');
        if bare.starts_with(BEGIN) || bare.starts_with(B64) {
            continue;
        }
        if let Some(name) = bare.strip_prefix(END) {
            out.push_str("[exported ");
            out.push_str(name);
            out.push_str("]\n");
            continue;
        }
        out.push_str(bare);
        out.push('\n');
    }
    out
}

/// Encodes a file the way the guest helper does (76-character base64 lines); used by
/// tests and by anything that wants to feed [`decode_exports`] synthetic input.
#[must_use]
pub fn encode_export(name: &str, data: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);
    let mut s = format!("{BEGIN}{} {name}\r\n", data.len());
    let bytes = b64.as_bytes();
    for chunk in bytes.chunks(76) {
        s.push_str(B64);
        s.push_str(&String::from_utf8_lossy(chunk));
        s.push_str("\r\n");
    }
    s.push_str(END);
    s.push_str(name);
    s.push_str("\r\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary() -> Vec<u8> {
        // pagemap-like: 8-byte little-endian entries with bit 63 (present) and PFNs, plus
        // bytes that are not valid UTF-8 and CR/LF bytes.
        let mut v = Vec::new();
        for i in 0u64..300 {
            v.extend_from_slice(&((1u64 << 63) | (0x12_3456 + i)).to_le_bytes());
        }
        v.extend_from_slice(&[0xff, 0xfe, b'\r', b'\n', 0]);
        v
    }

    #[test]
    fn binary_files_survive_between_console_noise() {
        let data = binary();
        let console = format!(
            "[    1.0] kernel says hi\r\nTIERD-VM: START\r\n{}some output\r\n{}TIERD-VM: END rc=0\r\n",
            encode_export("/proc/42/pagemap", &data),
            encode_export("empty", b""),
        );
        let files = decode_exports(&console).expect("decode");
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].name, "/proc/42/pagemap");
        assert_eq!(files[0].data, data);
        assert!(files[1].data.is_empty());
        let stripped = strip_exports(&console);
        assert!(stripped.contains("[exported /proc/42/pagemap]"));
        assert!(stripped.contains("some output"));
        assert!(!stripped.contains(B64));
    }

    #[test]
    fn busybox_base64_output_decodes() {
        // `printf 'tier\0d\n' | busybox base64` on the host gives dGllcgBkCg==
        let console = "TIERD-VM-FILE-BEGIN 7 x\nTIERD-VM-B64 dGllcgBkCg==\nTIERD-VM-FILE-END x\n";
        let files = decode_exports(console).expect("decode");
        assert_eq!(files[0].data, b"tier\0d\n");
    }

    #[test]
    fn corrupted_exports_are_errors() {
        let good = encode_export("f", &binary());
        // a kernel message spliced into a base64 line
        let spliced = good.replacen("TIERD-VM-B64 ", "TIERD-VM-B64 [ 3.1] oops ", 1);
        assert!(matches!(
            decode_exports(&spliced),
            Err(Error::Export { .. })
        ));
        // a dropped line: the size no longer matches
        let mut lines: Vec<&str> = good.lines().collect();
        lines.remove(2);
        assert!(matches!(
            decode_exports(&lines.join("\n")),
            Err(Error::Export { .. })
        ));
        // never closed
        let cut = &good[..good.len() / 2];
        assert!(matches!(decode_exports(cut), Err(Error::Export { .. })));
        // bad header
        assert!(matches!(
            decode_exports("TIERD-VM-FILE-BEGIN x\n"),
            Err(Error::Export { .. })
        ));
    }

    #[test]
    fn host_paths_stay_inside_the_output_dir() {
        let dir = Path::new("/out");
        let f = |n: &str| ExportedFile {
            name: n.into(),
            data: vec![],
        };
        assert_eq!(
            f("/proc/1/maps").host_path(dir).expect("ok"),
            Path::new("/out/proc/1/maps")
        );
        assert!(f("../etc/passwd").host_path(dir).is_err());
        assert!(f("a/../../b").host_path(dir).is_err());
        assert!(f("/").host_path(dir).is_err());
    }
}
