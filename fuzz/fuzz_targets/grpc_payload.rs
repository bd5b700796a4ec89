//! A Nacos gRPC `Payload` (protobuf) and the JSON body of its request type.
//! See `understudy_server::fuzzing::nacos_grpc`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| understudy_server::fuzzing::nacos_grpc(data));
