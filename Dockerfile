# syntax=docker/dockerfile:1
# The understudy server as a small image: built in the official Rust image,
# run on distroless (glibc and libgcc, no shell, no package manager). The
# build needs no protoc: proto/build.rs compiles the .proto files with
# protox, in Rust. Used by docker-compose.yml (checked by
# cli/tests/compose.rs).

FROM rust:1-bookworm AS build
WORKDIR /src
# The whole workspace: cargo loads every member, even for one binary.
COPY . .
# The caches keep crates and build artefacts between image builds; the
# binary is copied out of the cached target directory in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p understudy --bin understudy \
 && cp target/release/understudy /usr/local/bin/understudy

FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /usr/local/bin/understudy /usr/local/bin/understudy
# HTTP (Nacos Open API, admin, /ready), gRPC (HTTP + 1000), raft.
EXPOSE 8848 9848 7848
ENTRYPOINT ["/usr/local/bin/understudy"]
