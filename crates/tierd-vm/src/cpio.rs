//! A minimal writer (and reader, for tests and checks) of the "newc" cpio format that the
//! kernel unpacks as an initramfs.
//!
//! Format: Documentation/driver-api/early-userspace/buffer-format.rst and init/initramfs.c
//! (`do_header()`): every entry is the 6-byte magic `070701`, thirteen 8-digit hexadecimal
//! fields (ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor,
//! rdevminor, namesize including the NUL, check), the name and its NUL padded to a multiple
//! of 4, then the data padded to a multiple of 4. The archive ends with the entry
//! `TRAILER!!!`.
//!
//! We write it ourselves (instead of running `cpio`, which is not installed everywhere)
//! mainly because the archive must hold a *character device* `dev/console`: without it the
//! kernel cannot open a console for `/init`, which then has no stdout. Creating that node on
//! the host would need root and `mknod`; in the archive it is just a header.

use crate::Error;

/// The newc magic (no checksum variant).
pub const NEWC_MAGIC: &[u8; 6] = b"070701";
/// Name of the entry that ends an archive.
pub const TRAILER: &str = "TRAILER!!!";
/// Size of a newc header: magic plus 13 fields of 8 hex digits.
pub const HEADER_LEN: usize = 6 + 13 * 8;

/// File type bits of `st_mode` (include/uapi/linux/stat.h).
pub const S_IFREG: u32 = 0o100_000;
/// Directory.
pub const S_IFDIR: u32 = 0o040_000;
/// Character device.
pub const S_IFCHR: u32 = 0o020_000;
/// Symbolic link.
pub const S_IFLNK: u32 = 0o120_000;

/// What an archive entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file with its contents.
    File(Vec<u8>),
    /// A symbolic link and its target.
    Symlink(String),
    /// A character device node.
    CharDev {
        /// Device major number.
        major: u32,
        /// Device minor number.
        minor: u32,
    },
}

/// One archive entry: a path relative to the archive root (no leading `/`), permission
/// bits, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path inside the archive, e.g. `bin/busybox`.
    pub name: String,
    /// Permission bits (`0o755`); the file type bits come from `kind`.
    pub perm: u32,
    /// Directory, file, link or device.
    pub kind: EntryKind,
}

impl Entry {
    /// The full `st_mode`: type bits plus permission bits.
    #[must_use]
    pub fn mode(&self) -> u32 {
        let ty = match self.kind {
            EntryKind::Dir => S_IFDIR,
            EntryKind::File(_) => S_IFREG,
            EntryKind::Symlink(_) => S_IFLNK,
            EntryKind::CharDev { .. } => S_IFCHR,
        };
        ty | (self.perm & 0o7777)
    }

    fn data(&self) -> &[u8] {
        match &self.kind {
            EntryKind::File(d) => d,
            EntryKind::Symlink(t) => t.as_bytes(),
            EntryKind::Dir | EntryKind::CharDev { .. } => &[],
        }
    }
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

fn field(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(format!("{v:08x}").as_bytes());
}

fn to_u32(what: &str, name: &str, v: usize) -> Result<u32, Error> {
    u32::try_from(v)
        .map_err(|_| Error::Cpio(format!("{name}: {what} {v} does not fit newc's 32 bits")))
}

/// Serializes entries (in the given order; parents must come before children, which the
/// kernel needs because it does not create missing directories) and the trailer.
///
/// # Errors
/// [`Error::Cpio`] when a name or file is larger than newc's 32-bit fields.
pub fn write_newc(entries: &[Entry]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let trailer = Entry {
        name: TRAILER.to_owned(),
        perm: 0,
        kind: EntryKind::File(Vec::new()),
    };
    for (i, e) in entries.iter().chain(std::iter::once(&trailer)).enumerate() {
        let is_trailer = e.name == TRAILER;
        let data = e.data();
        let (rmaj, rmin) = match e.kind {
            EntryKind::CharDev { major, minor } => (major, minor),
            _ => (0, 0),
        };
        out.extend_from_slice(NEWC_MAGIC);
        // ino: unique per entry so the kernel does not treat files as hard links
        // (init/initramfs.c find_link() keys on ino when nlink >= 2; we keep nlink at 1
        // for files, but distinct inos are what real archives have).
        field(
            &mut out,
            if is_trailer {
                0
            } else {
                to_u32("index", &e.name, i + 1)?
            },
        );
        field(&mut out, if is_trailer { 0 } else { e.mode() });
        field(&mut out, 0); // uid
        field(&mut out, 0); // gid
        field(
            &mut out,
            if matches!(e.kind, EntryKind::Dir) {
                2
            } else {
                1
            },
        );
        field(&mut out, 0); // mtime: reproducible archives
        field(&mut out, to_u32("size", &e.name, data.len())?);
        field(&mut out, 0); // devmajor
        field(&mut out, 0); // devminor
        field(&mut out, rmaj);
        field(&mut out, rmin);
        field(&mut out, to_u32("name length", &e.name, e.name.len() + 1)?);
        field(&mut out, 0); // check
        out.extend_from_slice(e.name.as_bytes());
        out.push(0);
        pad4(&mut out);
        out.extend_from_slice(data);
        pad4(&mut out);
    }
    Ok(out)
}

/// A decoded header plus its data, as [`parse_newc`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedEntry {
    /// Inode number field.
    pub ino: u32,
    /// Full `st_mode`.
    pub mode: u32,
    /// Link count field.
    pub nlink: u32,
    /// `rdevmajor` (device nodes).
    pub rdev_major: u32,
    /// `rdevminor` (device nodes).
    pub rdev_minor: u32,
    /// Entry name.
    pub name: String,
    /// File data (link target for symlinks).
    pub data: Vec<u8>,
    /// Offset of this entry's header in the archive.
    pub offset: usize,
}

fn hex_field(buf: &[u8], at: usize) -> Result<u32, Error> {
    let s = buf
        .get(at..at + 8)
        .ok_or_else(|| Error::Cpio(format!("truncated header field at byte {at}")))?;
    let s = std::str::from_utf8(s)
        .map_err(|_| Error::Cpio(format!("non-ASCII header field at byte {at}")))?;
    u32::from_str_radix(s, 16).map_err(|_| Error::Cpio(format!("bad hex field {s:?} at byte {at}")))
}

fn align4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// Parses a newc archive up to (not including) its trailer, checking the magic and the
/// 4-byte alignment of names and data.
///
/// # Errors
/// [`Error::Cpio`] on a wrong magic, truncation, bad hex, or a missing trailer.
pub fn parse_newc(buf: &[u8]) -> Result<Vec<ParsedEntry>, Error> {
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        let magic = buf
            .get(pos..pos + 6)
            .ok_or_else(|| Error::Cpio(format!("archive ends at byte {pos} without a trailer")))?;
        if magic != NEWC_MAGIC {
            return Err(Error::Cpio(format!("bad magic {magic:?} at byte {pos}")));
        }
        let f = |k: usize| hex_field(buf, pos + 6 + 8 * k);
        let (ino, mode, nlink, size) = (f(0)?, f(1)?, f(4)?, f(6)? as usize);
        let (rdev_major, rdev_minor, namesize) = (f(9)?, f(10)?, f(11)? as usize);
        let name_at = pos + HEADER_LEN;
        let raw = buf
            .get(name_at..name_at + namesize)
            .ok_or_else(|| Error::Cpio(format!("truncated name at byte {name_at}")))?;
        let (nul, name) = raw
            .split_last()
            .ok_or_else(|| Error::Cpio(format!("empty name at byte {name_at}")))?;
        if *nul != 0 {
            return Err(Error::Cpio(format!(
                "name at byte {name_at} not NUL-terminated"
            )));
        }
        let name = String::from_utf8(name.to_vec())
            .map_err(|_| Error::Cpio(format!("non-UTF-8 name at byte {name_at}")))?;
        let data_at = align4(name_at + namesize);
        let data = buf
            .get(data_at..data_at + size)
            .ok_or_else(|| Error::Cpio(format!("{name}: truncated data")))?
            .to_vec();
        let next = align4(data_at + size);
        if name == TRAILER {
            return Ok(out);
        }
        out.push(ParsedEntry {
            ino,
            mode,
            nlink,
            rdev_major,
            rdev_minor,
            name,
            data,
            offset: pos,
        });
        pos = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Entry> {
        vec![
            Entry {
                name: "dev".into(),
                perm: 0o755,
                kind: EntryKind::Dir,
            },
            Entry {
                name: "dev/console".into(),
                perm: 0o600,
                kind: EntryKind::CharDev { major: 5, minor: 1 },
            },
            Entry {
                name: "init".into(),
                perm: 0o755,
                kind: EntryKind::File(b"#!/bin/sh\n".to_vec()),
            },
            Entry {
                name: "bin/sh".into(),
                perm: 0o777,
                kind: EntryKind::Symlink("busybox".into()),
            },
            Entry {
                name: "odd".into(),
                perm: 0o644,
                kind: EntryKind::File(vec![1, 2, 3, 4, 5]),
            },
        ]
    }

    #[test]
    fn round_trip_keeps_names_modes_data_and_devices() {
        let bytes = write_newc(&sample()).expect("write");
        assert_eq!(bytes.len() % 4, 0, "archive length is 4-aligned");
        let parsed = parse_newc(&bytes).expect("parse");
        let names: Vec<_> = parsed.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["dev", "dev/console", "init", "bin/sh", "odd"]);
        let console = &parsed[1];
        assert_eq!(console.mode, S_IFCHR | 0o600);
        assert_eq!((console.rdev_major, console.rdev_minor), (5, 1));
        assert!(console.data.is_empty());
        assert_eq!(parsed[0].mode, S_IFDIR | 0o755);
        assert_eq!(parsed[0].nlink, 2);
        assert_eq!(parsed[2].mode, S_IFREG | 0o755);
        assert_eq!(parsed[2].data, b"#!/bin/sh\n");
        assert_eq!(parsed[3].mode, S_IFLNK | 0o777);
        assert_eq!(parsed[3].data, b"busybox");
        assert_eq!(parsed[4].data, [1, 2, 3, 4, 5]);
        let inos: std::collections::BTreeSet<_> = parsed.iter().map(|p| p.ino).collect();
        assert_eq!(inos.len(), parsed.len(), "inodes are distinct");
    }

    #[test]
    fn header_layout_and_padding_match_the_kernel_format() {
        let bytes = write_newc(&sample()).expect("write");
        // First entry "dev": header 110 bytes + "dev\0" = 114, padded to 116, no data.
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(&bytes[6..14], b"00000001", "ino");
        assert_eq!(&bytes[14..22], b"000041ed", "mode = S_IFDIR|0755");
        assert_eq!(&bytes[94..102], b"00000004", "namesize includes the NUL");
        assert_eq!(&bytes[110..114], b"dev\0");
        assert_eq!(&bytes[114..116], [0, 0], "name padding");
        assert_eq!(&bytes[116..122], b"070701", "next header is 4-aligned");
        // dev/console: rdevmajor/rdevminor are fields 9 and 10.
        let c = 116;
        assert_eq!(&bytes[c + 6 + 8 * 9..c + 6 + 8 * 10], b"00000005");
        assert_eq!(&bytes[c + 6 + 8 * 10..c + 6 + 8 * 11], b"00000001");
        let parsed = parse_newc(&bytes).expect("parse");
        for p in &parsed {
            assert_eq!(p.offset % 4, 0, "{} header is 4-aligned", p.name);
        }
        // The trailer is the last header.
        let tail = String::from_utf8_lossy(&bytes[bytes.len() - 16..]);
        assert!(tail.contains("TRAILER!!!"), "{tail:?}");
    }

    #[test]
    fn parser_rejects_garbage_and_truncation() {
        let bytes = write_newc(&sample()).expect("write");
        assert!(matches!(parse_newc(b"hello"), Err(Error::Cpio(_))));
        assert!(matches!(
            parse_newc(&bytes[..bytes.len() - 20]),
            Err(Error::Cpio(_))
        ));
        let mut bad = bytes.clone();
        bad[0] = b'1';
        assert!(matches!(parse_newc(&bad), Err(Error::Cpio(_))));
    }
}
