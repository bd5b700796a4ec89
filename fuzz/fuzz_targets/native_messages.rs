//! A native API (`understudy.v1`) request: a type byte, then protobuf.
//! See `understudy_server::fuzzing::native_message`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| understudy_server::fuzzing::native_message(data));
