//! An uploaded config archive (a ZIP with `.metadata.yml`), read as the
//! import reads it. See `understudy_server::fuzzing::config_zip`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| understudy_server::fuzzing::config_zip(data));
