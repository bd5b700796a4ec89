//! The server's shared maps, measured against a concurrent map: for the
//! shapes understudy keeps behind one lock (the push hub's subscribers
//! by service, the connection table by id), the cost of a lookup while
//! another thread keeps inserting and removing entries, with
//! `std::sync::Mutex`, `std::sync::RwLock`, `dashmap::DashMap` and an
//! `arc_swap::ArcSwap` snapshot replaced on each write. Run with
//! `cargo bench -p understudy-benches --bench maps`; docs/architecture.md
//! ("One lock, not a concurrent map") records the figures. Under
//! `cargo test` each bench runs once as a smoke test.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};

/// Entries in the map: a fleet's services.
const ENTRIES: u64 = 10_000;

/// One map shape behind one kind of sharing.
trait Shared: Send + Sync + 'static {
    fn get(&self, key: u64) -> usize;
    fn churn(&self, key: u64);
}

/// What a lookup returns: the subscribers of a service.
type Entry = Arc<Vec<u64>>;

fn filled() -> HashMap<u64, Entry> {
    (0..ENTRIES).map(|k| (k, Arc::new(vec![k; 4]))).collect()
}

impl Shared for Mutex<HashMap<u64, Entry>> {
    fn get(&self, key: u64) -> usize {
        self.lock().unwrap().get(&key).map_or(0, |e| e.len())
    }
    fn churn(&self, key: u64) {
        let mut map = self.lock().unwrap();
        let entry = map.remove(&key).unwrap_or_default();
        map.insert(key, entry);
    }
}

impl Shared for RwLock<HashMap<u64, Entry>> {
    fn get(&self, key: u64) -> usize {
        self.read().unwrap().get(&key).map_or(0, |e| e.len())
    }
    fn churn(&self, key: u64) {
        let mut map = self.write().unwrap();
        let entry = map.remove(&key).unwrap_or_default();
        map.insert(key, entry);
    }
}

impl Shared for dashmap::DashMap<u64, Entry> {
    fn get(&self, key: u64) -> usize {
        dashmap::DashMap::get(self, &key).map_or(0, |e| e.len())
    }
    fn churn(&self, key: u64) {
        let entry = self.remove(&key).map(|(_, e)| e).unwrap_or_default();
        self.insert(key, entry);
    }
}

/// A snapshot readers share, copied and replaced on each write.
impl Shared for arc_swap::ArcSwap<HashMap<u64, Entry>> {
    fn get(&self, key: u64) -> usize {
        self.load().get(&key).map_or(0, |e| e.len())
    }
    fn churn(&self, key: u64) {
        self.rcu(|map| {
            let mut map = HashMap::clone(map);
            let entry = map.remove(&key).unwrap_or_default();
            map.insert(key, entry);
            map
        });
    }
}

/// Times `iters` lookups on this thread while another thread churns the
/// map as fast as it can (the worst case for the lookups: on the server,
/// writes come at the rate of subscriptions and connections).
fn lookups_under_churn(map: Arc<dyn Shared>, iters: u64) -> Duration {
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (map, stop) = (map.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut key = 0;
            while !stop.load(Ordering::Relaxed) {
                map.churn(key % ENTRIES);
                key += 7919;
            }
        })
    };
    let started = Instant::now();
    let mut key = 0_u64;
    for _ in 0..iters {
        key = (key + 104_729) % ENTRIES;
        black_box(map.get(key));
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer thread");
    took
}

/// Times `iters` lookups with no writer.
fn lookups_alone(map: &dyn Shared, iters: u64) -> Duration {
    let started = Instant::now();
    let mut key = 0_u64;
    for _ in 0..iters {
        key = (key + 104_729) % ENTRIES;
        black_box(map.get(key));
    }
    started.elapsed()
}

fn maps() -> Vec<(&'static str, Arc<dyn Shared>)> {
    vec![
        ("Mutex<HashMap>", Arc::new(Mutex::new(filled()))),
        ("RwLock<HashMap>", Arc::new(RwLock::new(filled()))),
        (
            "DashMap",
            Arc::new(filled().into_iter().collect::<dashmap::DashMap<_, _>>()),
        ),
        // A copy of 10k entries per write: only for maps written rarely.
        (
            "ArcSwap snapshot",
            Arc::new(arc_swap::ArcSwap::from_pointee(filled())),
        ),
    ]
}

fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup, no writer");
    for (name, map) in maps() {
        group.bench_function(name, |b| b.iter_custom(|iters| lookups_alone(&*map, iters)));
    }
    group.finish();
    let mut group = c.benchmark_group("lookup, a writer churning");
    group.measurement_time(Duration::from_secs(3));
    for (name, map) in maps() {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| lookups_under_churn(map.clone(), iters))
        });
    }
    group.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
