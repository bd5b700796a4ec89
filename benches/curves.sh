#!/usr/bin/env bash
# Draws the cost curves into docs/cost-curves.svg (points in
# target/curves.jsonl): RSS and query p99 at 10k, 100k and 1M instances,
# push p99 at 100, 1,000 and 5,000 subscribers, register throughput at 1,
# 8, 32 and 128 connections, each on a freshly started release server,
# and a 3-node cluster's through its leader and through its followers;
# r-nacos on the same axes when `rnacos` is on the PATH. Extra arguments
# go to `load curves` (see `load curves --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p understudy --bin understudy -p understudy-benches --bin load
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -sr)"
exec target/release/load curves "$@"
