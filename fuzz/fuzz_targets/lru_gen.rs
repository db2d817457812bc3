//! libFuzzer entry point for [`tierd_fuzz::lru_gen`] (scripts/fuzz.sh builds and runs it).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tierd_fuzz::lru_gen(data));
