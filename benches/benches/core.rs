//! Core registry figures over 100k instances: registration, queries,
//! snapshots and liveness expiry; push encoding; the client's balancer
//! picks. Pure CPU, no runtime. Run with
//! `cargo bench -p understudy-benches --bench core`; docs/performance.md
//! ("Core figures") records the figures. Under `cargo test` each bench
//! runs once as a smoke test.

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

/// Rendering a change for its subscribers: the hosts once per change,
/// then one `NotifySubscriberRequest` per subscriber around them; against
/// rendering and serializing the whole ServiceInfo per subscriber.
fn push_encoding(c: &mut Criterion) {
    use understudy_proto::nacos::{Hosts, NameStyle, ServiceInfo, ServiceInfoRef, View};
    use understudy_proto::nacos_rpc::{seal, NotifySubscriber, ServerRequest};
    let (registry, _) = populated();
    let key = service(0);
    let stored = registry.service(&key);
    let view = View {
        clusters_raw: "",
        clusters: &[],
        healthy_only: false,
    };
    let mut group = c.benchmark_group("push encoding (100 instances)");
    group.bench_function("render the hosts once per change", |b| {
        b.iter(|| Hosts::render(&key, stored.as_deref(), view));
    });
    let hosts = Hosts::render(&key, stored.as_deref(), view);
    group.bench_function("one subscriber's push around shared hosts", |b| {
        b.iter(|| {
            let body = NotifySubscriber {
                service_info: ServiceInfoRef::new(&key, NameStyle::Plain, "", &hosts, 1),
            };
            seal(
                "NotifySubscriberRequest",
                &ServerRequest::new("7", "naming", body),
            )
        });
    });
    group.bench_function("one subscriber's push rendered whole", |b| {
        b.iter(|| {
            let info = ServiceInfo::render(&key, stored.as_deref(), NameStyle::Plain, view, 1);
            serde_json::to_vec(&ServerRequest::new("7", "naming", info)).expect("serializes")
        });
    });
    group.finish();
}

/// One pick by each balancer among 100 targets.
fn balancers(c: &mut Criterion) {
    use rand::SeedableRng;
    use understudy_client::cluster::balance::{
        ConsistentHash, LeastActive, LoadBalance, PeakEwmaP2c, PickContext, RoundRobin,
        ShortestResponse, WeightedRandom,
    };
    use understudy_client::cluster::{Invocation, Target};
    let targets: Vec<Target> = (0..100u32)
        .map(|n| {
            Target::new(understudy_client::Instance {
                instance_id: format!("10.0.0.{n}#8080#DEFAULT#svc"),
                ip: format!("10.0.0.{n}"),
                port: 8080,
                weight: f64::from(1 + n % 5),
                healthy: true,
                enabled: true,
                cluster: "DEFAULT".to_owned(),
                zone: String::new(),
                metadata: Default::default(),
            })
        })
        .collect();
    let invocation = Invocation::new("sayHello").argument("user-42");
    let balancers: Vec<Box<dyn LoadBalance>> = vec![
        Box::new(WeightedRandom::new()),
        Box::new(RoundRobin::new()),
        Box::new(LeastActive::new()),
        Box::new(ShortestResponse::new()),
        Box::new(ConsistentHash::new()),
        Box::new(PeakEwmaP2c),
    ];
    let mut group = c.benchmark_group("balancer pick among 100");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let now = tokio::time::Instant::now();
    for balancer in &balancers {
        group.bench_function(balancer.name(), |b| {
            b.iter(|| {
                let mut cx = PickContext {
                    now,
                    rng: &mut rng,
                    local_zone: None,
                };
                balancer.pick(&targets, &invocation, &mut cx)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, register, query, expiry, push_encoding, balancers);
criterion_main!(benches);
