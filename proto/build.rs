//! Generates the gRPC code (Nacos, the native API and the raft transport)
//! with protox, a protobuf compiler written in Rust, so no system protoc is
//! needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/nacos_grpc_service.proto",
        "proto/understudy_v1.proto",
        "proto/understudy_raft.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
