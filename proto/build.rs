//! Generates the gRPC code (Nacos, the native API, the raft transport and
//! node-to-node control)
//! with protox, a protobuf compiler written in Rust, so no system protoc is
//! needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/nacos_grpc_service.proto",
        "proto/understudy_v1.proto",
        "proto/understudy_raft.proto",
        "proto/understudy_peer.proto",
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
