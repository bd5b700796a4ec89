//! A raft entry, snapshot or RPC: a type byte, then the raft codec's bytes.
//! See `understudy_server::fuzzing::raft_payload`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| understudy_server::fuzzing::raft_payload(data));
