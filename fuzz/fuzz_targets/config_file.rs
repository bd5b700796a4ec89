//! A TOML config file, parsed and validated.
//! See `understudy_server::fuzzing::config_file`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| understudy_server::fuzzing::config_file(data));
