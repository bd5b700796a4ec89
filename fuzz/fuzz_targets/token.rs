//! An auth token, checked as every API checks one; an accepted token must
//! carry the real signature. See `understudy_server::fuzzing::token`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| understudy_server::fuzzing::token(data));
