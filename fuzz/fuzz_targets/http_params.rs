//! Nacos HTTP parameters: the query string, a newline, then the form body.
//! See `understudy_server::fuzzing::http_params`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| understudy_server::fuzzing::http_params(data));
