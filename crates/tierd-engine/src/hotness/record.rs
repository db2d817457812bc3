//! The two pghot per-page hotness records, bit-exact.
//!
//! * [`DefaultRecord`]: the `u8` record of default mode (`!CONFIG_PGHOT_PRECISE`),
//!   source: include/linux/pghot.h, mm/pghot-default.c.
//! * [`PreciseRecord`]: the `u32` record of precise mode (`CONFIG_PGHOT_PRECISE`),
//!   source: include/linux/pghot.h, mm/pghot-precise.c.
//!
//! `update` follows `pghot_update_record()` and `take` follows `pghot_get_record()`; the word
//! each produces is the word the kernel would store, with one deliberate difference in precise
//! mode (the ready bit is sticky, see [`PreciseRecord::update`]). The kernel's `try_cmpxchg`
//! loops are not needed: a record is only reached through `&mut`.
//!
//! Times are jiffies at `HZ=1000` (one jiffy is one millisecond, [`crate::types::Nanos::jiffies`]),
//! so the kernel's `jiffies_to_msecs()` is the identity here.

/// Default value of `pghot_freq_threshold`: two accesses within the window make a page hot.
/// Source: include/linux/pghot.h `PGHOT_FREQ_THRESHOLD_DEFAULT`.
pub const PGHOT_FREQ_THRESHOLD_DEFAULT: u8 = 2;

/// `jiffies_to_msecs()` at `HZ=1000`: the identity. Kept as a function so every place the
/// kernel converts is visible here too.
const fn jiffies_to_msecs(jiffies: u64) -> u64 {
    jiffies
}

/// Layout constants of the default-mode `u8` record (`typedef u8 phi_t`).
///
/// Source: include/linux/pghot.h, `#else /* !CONFIG_PGHOT_PRECISE */` branch:
///
/// ```text
///  bit  7   6 5 4 3 2   1 0
///      [R] [ time 5b ] [f 2b]    R = PGHOT_MIGRATE_READY, time = jiffies >> 7 (128-jiffy buckets)
/// ```
pub mod default_mode {
    /// Bit index of the migrate-ready flag. Source: include/linux/pghot.h `PGHOT_MIGRATE_READY`.
    pub const PGHOT_MIGRATE_READY: u32 = 7;
    /// Width of the access-frequency field. Source: include/linux/pghot.h `PGHOT_FREQ_WIDTH`.
    pub const PGHOT_FREQ_WIDTH: u32 = 2;
    /// Jiffies are bucketed by this shift before being stored (128-jiffy buckets).
    /// Source: include/linux/pghot.h `PGHOT_TIME_BUCKETS_SHIFT`.
    pub const PGHOT_TIME_BUCKETS_SHIFT: u32 = 7;
    /// Width of the bucketed time field ("up to 3.9s with HZ=1000").
    /// Source: include/linux/pghot.h `PGHOT_TIME_WIDTH`.
    pub const PGHOT_TIME_WIDTH: u32 = 5;
    /// Position of the frequency field. Source: include/linux/pghot.h `PGHOT_FREQ_SHIFT`.
    pub const PGHOT_FREQ_SHIFT: u32 = 0;
    /// Position of the time field. Source: include/linux/pghot.h `PGHOT_TIME_SHIFT`.
    pub const PGHOT_TIME_SHIFT: u32 = PGHOT_FREQ_SHIFT + PGHOT_FREQ_WIDTH;
    /// `GENMASK(PGHOT_FREQ_WIDTH - 1, 0)`. Source: include/linux/pghot.h `PGHOT_FREQ_MASK`.
    pub const PGHOT_FREQ_MASK: u8 = (1 << PGHOT_FREQ_WIDTH) - 1;
    /// `GENMASK(PGHOT_TIME_WIDTH - 1, 0)`. Source: include/linux/pghot.h `PGHOT_TIME_MASK`.
    pub const PGHOT_TIME_MASK: u8 = (1 << PGHOT_TIME_WIDTH) - 1;
    /// `PGHOT_TIME_MASK << PGHOT_TIME_BUCKETS_SHIFT` = `0xF80`: the jiffy bits the time field
    /// keeps. Source: include/linux/pghot.h `PGHOT_TIME_BUCKETS_MASK`.
    pub const PGHOT_TIME_BUCKETS_MASK: u64 = 0x1F << PGHOT_TIME_BUCKETS_SHIFT;
    /// Largest frequency (3). Source: include/linux/pghot.h `PGHOT_FREQ_MAX`.
    pub const PGHOT_FREQ_MAX: u8 = (1 << PGHOT_FREQ_WIDTH) - 1;
    /// Largest stored time bucket (31). Source: include/linux/pghot.h `PGHOT_TIME_MAX`.
    pub const PGHOT_TIME_MAX: u8 = (1 << PGHOT_TIME_WIDTH) - 1;
    /// Smallest `pghot_promote_freq_window_ms` (1 s).
    /// Source: include/linux/pghot.h `PGHOT_FREQ_WINDOW_MIN`.
    pub const PGHOT_FREQ_WINDOW_MIN: u32 = 1000;
    /// Default `pghot_promote_freq_window_ms` (3 s).
    /// Source: include/linux/pghot.h `PGHOT_FREQ_WINDOW_DEFAULT`.
    pub const PGHOT_FREQ_WINDOW_DEFAULT: u32 = 3000;
    /// Largest `pghot_promote_freq_window_ms`: `PGHOT_TIME_BUCKETS_MASK` = 3968 ms.
    /// Source: include/linux/pghot.h `PGHOT_FREQ_WINDOW_MAX`.
    pub const PGHOT_FREQ_WINDOW_MAX: u32 = 0x1F << PGHOT_TIME_BUCKETS_SHIFT;
    /// Bytes per record, `sizeof(phi_t)`. Source: include/linux/pghot.h `PGHOT_RECORD_SIZE`.
    pub const PGHOT_RECORD_SIZE: usize = 1;

    const _: () = assert!(PGHOT_FREQ_WINDOW_MAX as u64 == PGHOT_TIME_BUCKETS_MASK);
    const _: () = assert!(PGHOT_TIME_SHIFT + PGHOT_TIME_WIDTH == PGHOT_MIGRATE_READY);
}

/// Layout constants of the precise-mode `u32` record (`typedef u32 phi_t`).
///
/// Source: include/linux/pghot.h, `#if defined(CONFIG_PGHOT_PRECISE)` branch:
///
/// ```text
///  bit  31  30..27    26 ........ 13   12 11 10   9 ...... 0
///      [R] [unused]  [ time 14b     ] [freq 3b ] [ nid 10b  ]   time = jiffies & 0x3FFF
/// ```
pub mod precise_mode {
    /// Bit index of the migrate-ready flag. Source: include/linux/pghot.h `PGHOT_MIGRATE_READY`.
    pub const PGHOT_MIGRATE_READY: u32 = 31;
    /// Width of the node-id field. Source: include/linux/pghot.h `PGHOT_NID_WIDTH`.
    pub const PGHOT_NID_WIDTH: u32 = 10;
    /// Width of the access-frequency field. Source: include/linux/pghot.h `PGHOT_FREQ_WIDTH`.
    pub const PGHOT_FREQ_WIDTH: u32 = 3;
    /// Width of the time field ("up to 16s with HZ=1000").
    /// Source: include/linux/pghot.h `PGHOT_TIME_WIDTH`.
    pub const PGHOT_TIME_WIDTH: u32 = 14;
    /// Position of the node-id field. Source: include/linux/pghot.h `PGHOT_NID_SHIFT`.
    pub const PGHOT_NID_SHIFT: u32 = 0;
    /// Position of the frequency field. Source: include/linux/pghot.h `PGHOT_FREQ_SHIFT`.
    pub const PGHOT_FREQ_SHIFT: u32 = PGHOT_NID_SHIFT + PGHOT_NID_WIDTH;
    /// Position of the time field. Source: include/linux/pghot.h `PGHOT_TIME_SHIFT`.
    pub const PGHOT_TIME_SHIFT: u32 = PGHOT_FREQ_SHIFT + PGHOT_FREQ_WIDTH;
    /// `GENMASK(PGHOT_NID_WIDTH - 1, 0)`. Source: include/linux/pghot.h `PGHOT_NID_MASK`.
    pub const PGHOT_NID_MASK: u32 = (1 << PGHOT_NID_WIDTH) - 1;
    /// `GENMASK(PGHOT_FREQ_WIDTH - 1, 0)`. Source: include/linux/pghot.h `PGHOT_FREQ_MASK`.
    pub const PGHOT_FREQ_MASK: u32 = (1 << PGHOT_FREQ_WIDTH) - 1;
    /// `GENMASK(PGHOT_TIME_WIDTH - 1, 0)` = `0x3FFF`.
    /// Source: include/linux/pghot.h `PGHOT_TIME_MASK`.
    pub const PGHOT_TIME_MASK: u32 = (1 << PGHOT_TIME_WIDTH) - 1;
    /// Largest storable node id (1023). Source: include/linux/pghot.h `PGHOT_NID_MAX`.
    pub const PGHOT_NID_MAX: u16 = (1 << PGHOT_NID_WIDTH) - 1;
    /// Largest frequency (7). Source: include/linux/pghot.h `PGHOT_FREQ_MAX`.
    pub const PGHOT_FREQ_MAX: u8 = (1 << PGHOT_FREQ_WIDTH) - 1;
    /// Largest stored time (16383 jiffies). Source: include/linux/pghot.h `PGHOT_TIME_MAX`.
    pub const PGHOT_TIME_MAX: u16 = (1 << PGHOT_TIME_WIDTH) - 1;
    /// Smallest `pghot_promote_freq_window_ms` (1 s).
    /// Source: include/linux/pghot.h `PGHOT_FREQ_WINDOW_MIN`.
    pub const PGHOT_FREQ_WINDOW_MIN: u32 = 1000;
    /// Default `pghot_promote_freq_window_ms` (5 s).
    /// Source: include/linux/pghot.h `PGHOT_FREQ_WINDOW_DEFAULT`.
    pub const PGHOT_FREQ_WINDOW_DEFAULT: u32 = 5000;
    /// Largest `pghot_promote_freq_window_ms`: `PGHOT_TIME_MAX` = 16383 ms.
    /// Source: include/linux/pghot.h `PGHOT_FREQ_WINDOW_MAX`.
    pub const PGHOT_FREQ_WINDOW_MAX: u32 = PGHOT_TIME_MASK;
    /// Bytes per record, `sizeof(phi_t)`. Source: include/linux/pghot.h `PGHOT_RECORD_SIZE`.
    pub const PGHOT_RECORD_SIZE: usize = 4;

    const _: () = assert!(PGHOT_TIME_SHIFT + PGHOT_TIME_WIDTH == 27);
}

/// What consuming a ready record yields (`pghot_get_record()`'s out parameters, with the
/// stored time turned into an age).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Consumed {
    /// The node stored in the record: `Some` in precise mode, `None` in default mode, where
    /// the kernel reports `pghot_target_nid` instead.
    pub nid: Option<u16>,
    /// The access frequency at the time of consumption (1..=`PGHOT_FREQ_MAX`).
    pub freq: u8,
    /// `pghot_access_latency(stored time, now)`: how long ago the last recorded access was,
    /// as the kernel computes it (modular in the stored field, so it aliases: see the
    /// record types).
    pub age_ms: u64,
}

/// A default-mode pghot record: one byte per page.
///
/// Layout (LSB first, source: include/linux/pghot.h): freq bits 0-1, time bucket
/// (`jiffies >> 7`, 5 bits) bits 2-6, bit 7 = migrate-ready. The all-zero word is the state
/// of a page never accessed (the kernel's hot maps are `kzalloc`ed).
///
/// Time is kept in 128-jiffy buckets modulo 32 buckets, so ages are quantised to 128 ms and
/// alias every 4096 ms: an access 4096 + 64 ms after the stored one looks at most 128 ms old.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DefaultRecord(pub u8);

impl DefaultRecord {
    /// The cleared record (never accessed, or consumed).
    pub const ZERO: Self = Self(0);

    /// Builds a record from its fields; bits beyond each field's width are masked off, as the
    /// kernel's `& PGHOT_*_MASK` does.
    #[must_use]
    pub const fn from_fields(freq: u8, time_bucket: u8, ready: bool) -> Self {
        use default_mode::{
            PGHOT_FREQ_MASK, PGHOT_FREQ_SHIFT, PGHOT_MIGRATE_READY, PGHOT_TIME_MASK,
            PGHOT_TIME_SHIFT,
        };
        let mut w = ((freq & PGHOT_FREQ_MASK) << PGHOT_FREQ_SHIFT)
            | ((time_bucket & PGHOT_TIME_MASK) << PGHOT_TIME_SHIFT);
        if ready {
            w |= 1 << PGHOT_MIGRATE_READY;
        }
        Self(w)
    }

    /// The access frequency field (0..=3).
    #[must_use]
    pub const fn freq(self) -> u8 {
        (self.0 >> default_mode::PGHOT_FREQ_SHIFT) & default_mode::PGHOT_FREQ_MASK
    }

    /// The stored time bucket, `(jiffies >> 7) & 0x1F`.
    #[must_use]
    pub const fn time(self) -> u8 {
        (self.0 >> default_mode::PGHOT_TIME_SHIFT) & default_mode::PGHOT_TIME_MASK
    }

    /// Whether the migrate-ready bit is set.
    #[must_use]
    pub const fn ready(self) -> bool {
        self.0 & (1 << default_mode::PGHOT_MIGRATE_READY) != 0
    }

    /// Whether the record is all zero (not tracked).
    #[must_use]
    pub const fn is_clear(self) -> bool {
        self.0 == 0
    }

    /// The time bucket `now_jiffies` is stored as.
    #[must_use]
    pub const fn time_bucket(now_jiffies: u64) -> u8 {
        // Masked to 5 bits before the cast: cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let t = ((now_jiffies >> default_mode::PGHOT_TIME_BUCKETS_SHIFT)
            & default_mode::PGHOT_TIME_MAX as u64) as u8;
        t
    }

    /// `pghot_access_latency(old_time, time)` of mm/pghot-default.c, in ms: `old_time` is a
    /// stored bucket, `now_jiffies` plain jiffies;
    /// `((now & 0xF80) - (old_time << 7)) & 0xF80`. Quantised to 128 jiffies, aliasing
    /// after 4096.
    #[must_use]
    pub const fn access_latency(old_time: u8, now_jiffies: u64) -> u64 {
        use default_mode::{PGHOT_TIME_BUCKETS_MASK, PGHOT_TIME_BUCKETS_SHIFT};
        let time = now_jiffies & PGHOT_TIME_BUCKETS_MASK;
        let old = (old_time as u64) << PGHOT_TIME_BUCKETS_SHIFT;
        jiffies_to_msecs(time.wrapping_sub(old) & PGHOT_TIME_BUCKETS_MASK)
    }

    /// How old the stored access looks at `now_jiffies`, per [`Self::access_latency`].
    #[must_use]
    pub const fn age_ms(self, now_jiffies: u64) -> u64 {
        Self::access_latency(self.time(), now_jiffies)
    }

    /// Records one access at `now_jiffies`, as `pghot_update_record()` of mm/pghot-default.c:
    /// a latency above `window_ms` starts a new window (freq 1), otherwise freq grows by one,
    /// saturating at 3; the time bucket is stored; the ready bit is set once
    /// `freq >= threshold` and, as in the kernel (which starts from the old word), stays set
    /// until [`Self::take`]. Returns the ready bit of the new word.
    pub fn update(&mut self, now_jiffies: u64, window_ms: u32, threshold: u8) -> bool {
        use default_mode::{
            PGHOT_FREQ_MASK, PGHOT_FREQ_MAX, PGHOT_FREQ_SHIFT, PGHOT_MIGRATE_READY,
            PGHOT_TIME_MASK, PGHOT_TIME_SHIFT,
        };
        let old = *self;
        let old_freq = old.freq();
        let freq = if old.age_ms(now_jiffies) > u64::from(window_ms) {
            1
        } else if old_freq < PGHOT_FREQ_MAX {
            old_freq + 1
        } else {
            old_freq
        };
        let mut w = old.0;
        w &= !(PGHOT_FREQ_MASK << PGHOT_FREQ_SHIFT);
        w &= !(PGHOT_TIME_MASK << PGHOT_TIME_SHIFT);
        w |= (freq & PGHOT_FREQ_MASK) << PGHOT_FREQ_SHIFT;
        w |= (Self::time_bucket(now_jiffies) & PGHOT_TIME_MASK) << PGHOT_TIME_SHIFT;
        if freq >= threshold {
            w |= 1 << PGHOT_MIGRATE_READY;
        }
        self.0 = w;
        self.ready()
    }

    /// Consumes a ready record, as `pghot_get_record()`: `None` (the kernel's `-EINVAL`) if
    /// the ready bit is clear; otherwise the record is reset to 0 and its fields returned,
    /// the stored time as an age at `now_jiffies`.
    pub fn take(&mut self, now_jiffies: u64) -> Option<Consumed> {
        if !self.ready() {
            return None;
        }
        let old = std::mem::take(self);
        Some(Consumed {
            nid: None,
            freq: old.freq(),
            age_ms: old.age_ms(now_jiffies),
        })
    }
}

/// A precise-mode pghot record: four bytes per page.
///
/// Layout (LSB first, source: include/linux/pghot.h): nid bits 0-9, freq bits 10-12, time
/// (`jiffies & 0x3FFF`) bits 13-26, bits 27-30 unused, bit 31 = migrate-ready. Ages are exact
/// to the jiffy but alias every 16384 jiffies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PreciseRecord(pub u32);

impl PreciseRecord {
    /// The cleared record (never accessed, or consumed).
    pub const ZERO: Self = Self(0);

    /// Builds a record from its fields; bits beyond each field's width are masked off, as the
    /// kernel's `& PGHOT_*_MASK` does.
    #[must_use]
    pub const fn from_fields(nid: u16, freq: u8, time: u16, ready: bool) -> Self {
        use precise_mode::{
            PGHOT_FREQ_MASK, PGHOT_FREQ_SHIFT, PGHOT_MIGRATE_READY, PGHOT_NID_MASK,
            PGHOT_NID_SHIFT, PGHOT_TIME_MASK, PGHOT_TIME_SHIFT,
        };
        let mut w = ((nid as u32 & PGHOT_NID_MASK) << PGHOT_NID_SHIFT)
            | ((freq as u32 & PGHOT_FREQ_MASK) << PGHOT_FREQ_SHIFT)
            | ((time as u32 & PGHOT_TIME_MASK) << PGHOT_TIME_SHIFT);
        if ready {
            w |= 1 << PGHOT_MIGRATE_READY;
        }
        Self(w)
    }

    /// The node id field (0..=1023).
    #[must_use]
    pub const fn nid(self) -> u16 {
        // Masked to 10 bits before the cast: cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let n = ((self.0 >> precise_mode::PGHOT_NID_SHIFT) & precise_mode::PGHOT_NID_MASK) as u16;
        n
    }

    /// The access frequency field (0..=7).
    #[must_use]
    pub const fn freq(self) -> u8 {
        // Masked to 3 bits before the cast: cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let f = ((self.0 >> precise_mode::PGHOT_FREQ_SHIFT) & precise_mode::PGHOT_FREQ_MASK) as u8;
        f
    }

    /// The stored time, `jiffies & 0x3FFF`.
    #[must_use]
    pub const fn time(self) -> u16 {
        // Masked to 14 bits before the cast: cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let t = ((self.0 >> precise_mode::PGHOT_TIME_SHIFT) & precise_mode::PGHOT_TIME_MASK) as u16;
        t
    }

    /// Whether the migrate-ready bit is set.
    #[must_use]
    pub const fn ready(self) -> bool {
        self.0 & (1 << precise_mode::PGHOT_MIGRATE_READY) != 0
    }

    /// Whether the record is all zero (not tracked).
    #[must_use]
    pub const fn is_clear(self) -> bool {
        self.0 == 0
    }

    /// The time field `now_jiffies` is stored as: `now & PGHOT_TIME_MASK`.
    #[must_use]
    pub const fn time_of(now_jiffies: u64) -> u16 {
        // Masked to 14 bits before the cast: cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let t = (now_jiffies & precise_mode::PGHOT_TIME_MASK as u64) as u16;
        t
    }

    /// `pghot_access_latency(old_time, time)` of mm/pghot-precise.c, in ms:
    /// `(now - old_time) & 0x3FFF`. Exact to the jiffy, aliasing after 16384.
    #[must_use]
    pub const fn access_latency(old_time: u16, now_jiffies: u64) -> u64 {
        let mask = precise_mode::PGHOT_TIME_MASK as u64;
        jiffies_to_msecs((now_jiffies & mask).wrapping_sub(old_time as u64) & mask)
    }

    /// How old the stored access looks at `now_jiffies`, per [`Self::access_latency`].
    #[must_use]
    pub const fn age_ms(self, now_jiffies: u64) -> u64 {
        Self::access_latency(self.time(), now_jiffies)
    }

    /// Records one access from node `nid` at `now_jiffies`, as `pghot_update_record()` of
    /// mm/pghot-precise.c: a latency above `window_ms` starts a new window (freq 1),
    /// otherwise freq grows by one, saturating at 7; the word is rebuilt from the (masked)
    /// nid, freq and time; the ready bit is set once `freq >= threshold`. Returns the ready
    /// bit of the new word.
    ///
    /// Deviation: mm/pghot-precise.c rebuilds the word from 0 on every update, so a ready
    /// page whose next access opens a new window (freq back to 1) loses its ready bit before
    /// kmigrated sees it. tierd keeps the ready bit sticky until [`Self::take`], as default
    /// mode does: a page that became ready must not lose candidacy because the promoter ran
    /// late. The callers (`pghot_record_access()` sets the section hot bit whenever this
    /// returns true) see the same contract in both modes.
    pub fn update(&mut self, nid: u16, now_jiffies: u64, window_ms: u32, threshold: u8) -> bool {
        let old = *self;
        let old_freq = old.freq();
        let freq = if old.age_ms(now_jiffies) > u64::from(window_ms) {
            1
        } else if old_freq < precise_mode::PGHOT_FREQ_MAX {
            old_freq + 1
        } else {
            old_freq
        };
        let ready = freq >= threshold || old.ready();
        *self = Self::from_fields(nid, freq, Self::time_of(now_jiffies), ready);
        ready
    }

    /// Consumes a ready record, as `pghot_get_record()`: `None` (the kernel's `-EINVAL`) if
    /// the ready bit is clear; otherwise the record is reset to 0 and its fields returned,
    /// the stored time as an age at `now_jiffies`.
    pub fn take(&mut self, now_jiffies: u64) -> Option<Consumed> {
        if !self.ready() {
            return None;
        }
        let old = std::mem::take(self);
        Some(Consumed {
            nid: Some(old.nid()),
            freq: old.freq(),
            age_ms: old.age_ms(now_jiffies),
        })
    }
}

/// The operations the store needs from either record format, so its chunk code is
/// monomorphised per format (no per-access branch on the mode).
pub(crate) trait Record: Copy + Default + PartialEq + std::fmt::Debug {
    /// The cleared record.
    const ZERO: Self;
    /// Bytes per record.
    const SIZE: usize;
    /// Records one access; `nid` is ignored by formats that store no node.
    fn record(&mut self, nid: u16, now_jiffies: u64, window_ms: u32, threshold: u8) -> bool;
    /// Consumes a ready record.
    fn consume(&mut self, now_jiffies: u64) -> Option<Consumed>;
    /// Whether the ready bit is set.
    fn is_ready(self) -> bool;
    /// Whether the record is all zero.
    fn is_zero(self) -> bool;
}

impl Record for DefaultRecord {
    const ZERO: Self = DefaultRecord::ZERO;
    const SIZE: usize = default_mode::PGHOT_RECORD_SIZE;
    #[inline]
    fn record(&mut self, _nid: u16, now_jiffies: u64, window_ms: u32, threshold: u8) -> bool {
        self.update(now_jiffies, window_ms, threshold)
    }
    #[inline]
    fn consume(&mut self, now_jiffies: u64) -> Option<Consumed> {
        self.take(now_jiffies)
    }
    #[inline]
    fn is_ready(self) -> bool {
        self.ready()
    }
    #[inline]
    fn is_zero(self) -> bool {
        self.is_clear()
    }
}

impl Record for PreciseRecord {
    const ZERO: Self = PreciseRecord::ZERO;
    const SIZE: usize = precise_mode::PGHOT_RECORD_SIZE;
    #[inline]
    fn record(&mut self, nid: u16, now_jiffies: u64, window_ms: u32, threshold: u8) -> bool {
        self.update(nid, now_jiffies, window_ms, threshold)
    }
    #[inline]
    fn consume(&mut self, now_jiffies: u64) -> Option<Consumed> {
        self.take(now_jiffies)
    }
    #[inline]
    fn is_ready(self) -> bool {
        self.ready()
    }
    #[inline]
    fn is_zero(self) -> bool {
        self.is_clear()
    }
}

const _: () = assert!(std::mem::size_of::<DefaultRecord>() == default_mode::PGHOT_RECORD_SIZE);
const _: () = assert!(std::mem::size_of::<PreciseRecord>() == precise_mode::PGHOT_RECORD_SIZE);

#[cfg(test)]
mod tests {
    use super::default_mode as dm;
    use super::precise_mode as pm;
    use super::*;

    #[test]
    fn default_layout_constants_match_the_kernel() {
        assert_eq!(dm::PGHOT_FREQ_MASK, 0b11);
        assert_eq!(dm::PGHOT_TIME_MASK, 0b1_1111);
        assert_eq!(dm::PGHOT_TIME_SHIFT, 2);
        assert_eq!(dm::PGHOT_TIME_BUCKETS_MASK, 0xF80);
        assert_eq!(dm::PGHOT_FREQ_MAX, 3);
        assert_eq!(dm::PGHOT_FREQ_WINDOW_MAX, 3968);
    }

    #[test]
    fn precise_layout_constants_match_the_kernel() {
        assert_eq!(pm::PGHOT_FREQ_SHIFT, 10);
        assert_eq!(pm::PGHOT_TIME_SHIFT, 13);
        assert_eq!(pm::PGHOT_NID_MASK, 0x3FF);
        assert_eq!(pm::PGHOT_FREQ_MASK, 0x7);
        assert_eq!(pm::PGHOT_TIME_MASK, 0x3FFF);
        assert_eq!(pm::PGHOT_FREQ_MAX, 7);
        assert_eq!(pm::PGHOT_NID_MAX, 1023);
        assert_eq!(pm::PGHOT_FREQ_WINDOW_MAX, 16383);
    }

    #[test]
    // Binary literals are grouped by record field: ready | time | freq.
    #[allow(clippy::unusual_byte_groupings)]
    fn default_encoding_is_bit_exact() {
        // freq 2, time 0x1F, ready -> 0b1_11111_10.
        let r = DefaultRecord::from_fields(2, 0x1F, true);
        assert_eq!(r.0, 0b1_11111_10);
        assert_eq!(r.0, 0xFE);
        assert_eq!((r.freq(), r.time(), r.ready()), (2, 0x1F, true));
        // freq 1, time 5, not ready -> 0b0_00101_01.
        let r = DefaultRecord::from_fields(1, 5, false);
        assert_eq!(r.0, 0b0_00101_01);
        assert_eq!(r.0, 0x15);
        assert_eq!((r.freq(), r.time(), r.ready()), (1, 5, false));
        // Out-of-range fields are masked, not spilled into neighbours.
        assert_eq!(DefaultRecord::from_fields(7, 0xFF, false).0, 0b0_11111_11);
        // Decoding a raw word.
        let r = DefaultRecord(0b1_01010_11);
        assert_eq!((r.freq(), r.time(), r.ready()), (3, 0b01010, true));
    }

    #[test]
    fn precise_encoding_is_bit_exact() {
        // nid 5, freq 3, time 0x3FFF, ready:
        //   5 | 3 << 10 | 0x3FFF << 13 | 1 << 31
        //   = 0x0000_0005 | 0x0000_0C00 | 0x07FF_E000 | 0x8000_0000 = 0x87FF_EC05.
        let r = PreciseRecord::from_fields(5, 3, 0x3FFF, true);
        assert_eq!(r.0, 0x87FF_EC05);
        assert_eq!(
            (r.nid(), r.freq(), r.time(), r.ready()),
            (5, 3, 0x3FFF, true)
        );
        // nid 1023, freq 7, time 1, not ready: 0x3FF | 0x1C00 | 0x2000 = 0x3FFF.
        let r = PreciseRecord::from_fields(1023, 7, 1, false);
        assert_eq!(r.0, 0x0000_3FFF);
        assert_eq!(
            (r.nid(), r.freq(), r.time(), r.ready()),
            (1023, 7, 1, false)
        );
        // Masking: nid 1024 -> 0, freq 8 -> 0, time 0x4000 -> 0.
        assert_eq!(PreciseRecord::from_fields(1024, 8, 0x4000, false).0, 0);
        // Bits 27-30 are ignored by the accessors.
        let r = PreciseRecord(0x7800_0000 | 0x0000_0C05);
        assert_eq!((r.nid(), r.freq(), r.time(), r.ready()), (5, 3, 0, false));
    }

    #[test]
    fn default_update_produces_the_kernel_word() {
        let mut r = DefaultRecord::ZERO;
        // now = 1000 jiffies: bucket 1000 >> 7 = 7; latency vs bucket 0 = (1000 & 0xF80) = 896
        // <= 3000, so freq 0 + 1 = 1.
        assert!(!r.update(1000, 3000, 2));
        assert_eq!(r.0, (7 << 2) | 1);
        // now = 1500: bucket 11; latency (1408 - 896) & 0xF80 = 512 -> freq 2 -> ready.
        assert!(r.update(1500, 3000, 2));
        assert_eq!(r.0, 0x80 | (11 << 2) | 2);
    }

    #[test]
    fn precise_update_produces_the_kernel_word() {
        let mut r = PreciseRecord::ZERO;
        assert!(!r.update(3, 1000, 5000, 2));
        assert_eq!(r.0, 3 | (1 << 10) | (1000 << 13));
        assert!(r.update(4, 1500, 5000, 2));
        assert_eq!(r.0, (1 << 31) | 4 | (2 << 10) | (1500 << 13));
        // Node ids above 1023 are masked like the kernel's `nid & PGHOT_NID_MASK`.
        let mut r = PreciseRecord::ZERO;
        r.update(1024 + 9, 0, 5000, 2);
        assert_eq!(r.nid(), 9);
    }

    #[test]
    fn second_access_within_window_makes_ready() {
        let mut d = DefaultRecord::ZERO;
        assert!(!d.update(10_000, 3000, 2));
        assert_eq!(d.freq(), 1);
        assert!(d.update(12_000, 3000, 2));
        assert_eq!(d.freq(), 2);

        let mut p = PreciseRecord::ZERO;
        assert!(!p.update(1, 10_000, 5000, 2));
        assert_eq!(p.freq(), 1);
        assert!(p.update(1, 14_000, 5000, 2));
        assert_eq!(p.freq(), 2);
    }

    #[test]
    fn access_after_window_restarts_frequency() {
        let mut d = DefaultRecord::ZERO;
        d.update(10_000, 3000, 3);
        d.update(10_500, 3000, 3);
        assert_eq!(d.freq(), 2);
        // Stored bucket (10_500 >> 7) & 31 = 18 (2304); 14_000 & 0xF80 = 1664;
        // (1664 - 2304) & 0xF80 = 3456 > 3000: new window.
        assert_eq!(DefaultRecord::access_latency(d.time(), 14_000), 3456);
        assert!(!d.update(14_000, 3000, 3));
        assert_eq!(d.freq(), 1);
        assert!(!d.ready());

        // Default mode at the boundary: a latency of exactly the window stays inside it.
        let mut e = DefaultRecord::ZERO;
        e.update(900, 1024, 3); // bucket 7
        e.update(900 + 1024, 1024, 3); // bucket 15: latency 1024, not > 1024
        assert_eq!(e.freq(), 2);
        e.update(900 + 1024 + 1152, 1024, 3); // bucket 24: latency 1152 > 1024
        assert_eq!(e.freq(), 1);

        let mut p = PreciseRecord::ZERO;
        p.update(0, 10_000, 5000, 3);
        p.update(0, 10_500, 5000, 3);
        assert_eq!(p.freq(), 2);
        // Exactly at the window is still inside (`>` in the kernel), one more ms is outside.
        p.update(0, 15_500, 5000, 3);
        assert_eq!(p.freq(), 3);
        p.update(0, 20_501, 5000, 4);
        assert_eq!(p.freq(), 1);
    }

    #[test]
    fn threshold_one_is_ready_on_first_access() {
        let mut d = DefaultRecord::ZERO;
        assert!(d.update(123_456, 3000, 1));
        assert_eq!(d.freq(), 1);
        let mut p = PreciseRecord::ZERO;
        assert!(p.update(0, 123_456, 5000, 1));
        assert_eq!(p.freq(), 1);
    }

    #[test]
    fn frequency_saturates_at_freq_max() {
        let mut d = DefaultRecord::ZERO;
        for i in 0..10 {
            d.update(1000 + i * 10, 3000, 7);
        }
        assert_eq!(d.freq(), dm::PGHOT_FREQ_MAX);
        // Threshold above the max is never reached.
        assert!(!d.ready());

        let mut p = PreciseRecord::ZERO;
        for i in 0..20 {
            p.update(2, 1000 + i * 10, 5000, 8);
        }
        assert_eq!(p.freq(), pm::PGHOT_FREQ_MAX);
        assert!(!p.ready());
    }

    #[test]
    fn default_latency_quantises_and_aliases_after_4096_jiffies() {
        // Stored at jiffy 900: bucket 7 = jiffies [896, 1024).
        let mut d = DefaultRecord::ZERO;
        d.update(900, 3000, 2);
        assert_eq!(d.time(), 7);
        // 64 ms later, same bucket: latency 0.
        assert_eq!(d.age_ms(964), 0);
        // 4096 + 64 ms later the bucket index wrapped: the kernel sees 0 ms, not 4160.
        assert_eq!(d.age_ms(900 + 4096 + 64), 0);
        // One bucket further it sees 128 ms.
        assert_eq!(d.age_ms(900 + 4096 + 128), 128);
        // From the end of a bucket, 4096 + 64 ms later lands one bucket on: 128 ms.
        let mut e = DefaultRecord::ZERO;
        e.update(1000, 3000, 2);
        assert_eq!(e.age_ms(1000 + 4096 + 64), 128);
        // So a second access 4160 ms later counts as inside a 3000 ms window.
        assert!(d.update(900 + 4096 + 64, 3000, 2));
        assert_eq!(d.freq(), 2);
        // Raw formula, hand-computed: ((0xF80 & 0xF80) - (7 << 7)) & 0xF80 = 3968 - 896.
        assert_eq!(DefaultRecord::access_latency(7, 3968), 3072);
        // Wrap below zero: (0 - (31 << 7)) & 0xF80 = 128.
        assert_eq!(DefaultRecord::access_latency(31, 0), 128);
    }

    #[test]
    fn precise_latency_wraps_at_16384() {
        let mut p = PreciseRecord::ZERO;
        p.update(1, 1000, 5000, 2);
        assert_eq!(p.age_ms(1000 + 300), 300);
        assert_eq!(p.age_ms(1000 + 16_384 + 300), 300);
        assert_eq!(p.age_ms(1000 + 16_383), 16_383);
        assert_eq!(PreciseRecord::access_latency(0x3FFF, 0x4000), 1);
        // An access 16384 + 100 ms later aliases into the window.
        assert!(p.update(1, 1000 + 16_384 + 100, 5000, 2));
    }

    #[test]
    fn ready_is_sticky_until_consumed_in_both_formats() {
        let mut d = DefaultRecord::ZERO;
        d.update(1000, 3000, 2);
        assert!(d.update(1100, 3000, 2));
        // Next access after the window: freq 1, but the page stays ready.
        assert!(d.update(1100 + 3500, 3000, 2));
        assert_eq!(d.freq(), 1);
        assert!(d.ready());

        let mut p = PreciseRecord::ZERO;
        p.update(1, 1000, 5000, 2);
        assert!(p.update(1, 1100, 5000, 2));
        assert!(p.update(2, 1100 + 6000, 5000, 2));
        assert_eq!((p.freq(), p.nid()), (1, 2));
        assert!(p.ready());
    }

    #[test]
    fn take_resets_and_reports() {
        let mut d = DefaultRecord::ZERO;
        assert_eq!(d.take(0), None);
        d.update(1000, 3000, 2);
        assert_eq!(d.take(1000), None, "not ready: nothing consumed");
        assert_eq!(d.freq(), 1, "a failed take leaves the record alone");
        d.update(1200, 3000, 2);
        let c = d.take(1500).unwrap();
        // 1200 -> bucket 9 (1152); 1500 & 0xF80 = 1408; age 256.
        assert_eq!(
            c,
            Consumed {
                nid: None,
                freq: 2,
                age_ms: 256
            }
        );
        assert_eq!(d, DefaultRecord::ZERO);
        assert_eq!(d.take(1500), None);

        let mut p = PreciseRecord::ZERO;
        p.update(6, 1000, 5000, 2);
        p.update(7, 1200, 5000, 2);
        let c = p.take(1500).unwrap();
        assert_eq!(
            c,
            Consumed {
                nid: Some(7),
                freq: 2,
                age_ms: 300
            }
        );
        assert_eq!(p, PreciseRecord::ZERO);
        assert_eq!(p.take(1500), None);
    }
}
