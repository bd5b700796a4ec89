//! What a server process costs, read from `/proc`: CPU seconds (user +
//! system, every thread) and resident memory.

use std::time::Duration;

/// Clock ticks per second of `/proc/PID/stat`'s times (`USER_HZ`), which
/// Linux fixes at 100 on every architecture it reports to user space.
const USER_HZ: f64 = 100.0;

/// Processes whose cost a run measures (a cluster's nodes, say).
#[derive(Debug, Clone, Default)]
pub struct Watched {
    pids: Vec<u32>,
}

impl Watched {
    /// The processes `pids` (none: nothing is measured).
    pub fn new(pids: Vec<u32>) -> Self {
        Self { pids }
    }

    /// Whether any process is watched.
    pub fn is_empty(&self) -> bool {
        self.pids.is_empty()
    }

    /// CPU time used so far, summed over the processes.
    pub fn cpu(&self) -> anyhow::Result<Duration> {
        let mut ticks = 0u64;
        for pid in &self.pids {
            ticks += cpu_ticks(*pid)?;
        }
        Ok(Duration::from_secs_f64(ticks as f64 / USER_HZ))
    }

    /// Resident memory in bytes, summed over the processes.
    pub fn rss(&self) -> anyhow::Result<u64> {
        let mut bytes = 0;
        for pid in &self.pids {
            bytes += rss_bytes(*pid)?;
        }
        Ok(bytes)
    }
}

/// How long ago process `pid` started.
pub fn age(pid: u32) -> anyhow::Result<Duration> {
    // Field 22, starttime: clock ticks from boot to the process' start.
    let started = stat_fields(pid, &[22])?[0] as f64;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")?
        .split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("/proc/uptime is unreadable"))?;
    Ok(Duration::from_secs_f64(
        (uptime - started / USER_HZ).max(0.0),
    ))
}

/// Numeric fields `numbers` (counted from 1, as `proc(5)` does) of
/// `/proc/PID/stat`.
fn stat_fields(pid: u32, numbers: &[usize]) -> anyhow::Result<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| anyhow::anyhow!("reading /proc/{pid}/stat: {e}"))?;
    // The command name (field 2) may hold spaces; fields count from its
    // closing parenthesis, which ends field 2.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat has no command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    numbers
        .iter()
        .map(|n| {
            fields
                .get(n - 3)
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat lacks field {n}"))
        })
        .collect()
}

fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    // utime and stime.
    Ok(stat_fields(pid, &[14, 15])?.iter().sum())
}

fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| anyhow::anyhow!("reading /proc/{pid}/status: {e}"))?;
    let kb = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/status has no VmRSS"))?;
    Ok(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let me = Watched::new(vec![std::process::id()]);
        // Spin until the kernel has charged some CPU time (with a
        // deadline: a loaded machine may schedule this thread rarely).
        let before = me.cpu().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut spin = 0u64;
        while me.cpu().unwrap() < before + Duration::from_millis(50) {
            assert!(std::time::Instant::now() < deadline, "no CPU time charged");
            for _ in 0..100_000 {
                spin = std::hint::black_box(spin.wrapping_add(1));
            }
        }
        assert!(me.rss().unwrap() > 1 << 20);
        assert!(age(std::process::id()).unwrap() < Duration::from_secs(3600));
        assert!(Watched::new(vec![u32::MAX]).cpu().is_err());
    }
}
