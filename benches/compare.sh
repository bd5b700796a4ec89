#!/usr/bin/env bash
# Runs the comparison: every load mode against understudy, r-nacos (when
# `rnacos` is on the PATH; `cargo install rnacos --locked` puts it there),
# each Nacos you started and name with `--nacos NAME=HTTP_ADDRESS@PID`,
# and the bare tonic echo and hyper ceilings, in one run, on release
# builds; prints every run, then the table of targets with their ratios
# (and, with a Nacos, the figures beside it). docs/performance.md says
# how to start a Nacos for it. Extra arguments go to `load compare` (see
# `load compare --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p understudy --bin understudy -p understudy-benches --bin load
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -sr)"
exec target/release/load compare --json target/compare.jsonl "$@"
