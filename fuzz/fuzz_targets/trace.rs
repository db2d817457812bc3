//! libFuzzer entry point for [`tierd_fuzz::trace`] (scripts/fuzz.sh builds and runs it).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tierd_fuzz::trace(data));
