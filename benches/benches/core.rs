//! Core registry figures over 100k instances: registration, queries,
//! snapshots and liveness expiry. Pure CPU, no runtime. Run with
//! `cargo bench -p understudy-benches --bench core`; the README records
//! the figures. Under `cargo test` each bench runs once as a smoke test.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use understudy_benches::{populated, register_all, service, LAYOUT};
use understudy_core::{Command, Liveness, NamespaceId, Op, Registry, RegistryOptions, Selection};

fn register(c: &mut Criterion) {
    let mut group = c.benchmark_group("register");
    group.sample_size(10);
    group.throughput(Throughput::Elements(LAYOUT.instances() as u64));
    group.bench_function("100k instances from empty", |b| {
        b.iter_batched(
            || Registry::new(RegistryOptions::default()),
            |mut registry| {
                register_all(&mut registry, 0);
                registry
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();

    let mut group = c.benchmark_group("register one");
    let (mut registry, _) = populated();
    let mut at = 1;
    group.bench_function("into a registry of 100k (register + deregister)", |b| {
        b.iter(|| {
            at += 1;
            let op = understudy_benches::register_op(&service(7), 250, 7);
            registry.apply(&Command::new(at, op)).unwrap();
            let owner = understudy_benches::owner(250, 7);
            registry
                .apply(&Command::new(
                    at,
                    Op::Deregister {
                        service: service(7),
                        owner,
                    },
                ))
                .unwrap();
        })
    });
    group.finish();
}

fn query(c: &mut Criterion) {
    let (registry, _) = populated();
    let mut group = c.benchmark_group("query");
    let key = service(500);
    group.bench_function("select a 100-instance service", |b| {
        b.iter(|| {
            let service = registry.service(black_box(&key)).unwrap();
            black_box(service.select(&Selection {
                enabled_only: true,
                ..Selection::default()
            }))
        })
    });
    group.bench_function("healthy-only select with cluster filter", |b| {
        let clusters = [understudy_core::ClusterName::parse("c1").unwrap()];
        b.iter(|| {
            let service = registry.service(black_box(&key)).unwrap();
            black_box(service.select(&Selection {
                clusters: &clusters,
                healthy_only: true,
                enabled_only: true,
            }))
        })
    });
    group.bench_function("list a page of 20 of 1000 services", |b| {
        let ns = NamespaceId::public();
        let group_name = understudy_core::GroupName::default_group();
        b.iter(|| black_box(registry.list_services(&ns, Some(&group_name), 25, 20)))
    });
    group.bench_function("namespace view of 1000 services", |b| {
        let ns = NamespaceId::public();
        b.iter(|| black_box(registry.namespace_view(&ns)))
    });
    group.sample_size(10);
    group.bench_function("full snapshot of 100k instances", |b| {
        b.iter(|| black_box(registry.snapshot()))
    });
    group.finish();
}

fn expiry(c: &mut Criterion) {
    let mut group = c.benchmark_group("expiry");
    group.sample_size(10);
    group.throughput(Throughput::Elements(LAYOUT.instances() as u64));
    group.bench_function("100k silent instances: unhealthy then removed", |b| {
        b.iter_batched(
            populated,
            |(mut registry, mut liveness): (Registry, Liveness)| {
                for at in [15_000, 30_000] {
                    for transition in liveness.due(at) {
                        for change in registry
                            .apply(&Command::new(at, transition.into_op()))
                            .unwrap()
                        {
                            liveness.observe(&change, at);
                        }
                    }
                }
                assert_eq!(registry.counts().instances, 0);
                (registry, liveness)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();

    let (_, mut liveness) = populated();
    let key = understudy_benches::live_key(500, 50);
    let mut now = 0;
    c.bench_function("expiry/beat among 100k tracked", |b| {
        b.iter(|| {
            now += 1;
            black_box(liveness.beat(&key, now))
        })
    });
}

criterion_group!(benches, register, query, expiry);
criterion_main!(benches);
