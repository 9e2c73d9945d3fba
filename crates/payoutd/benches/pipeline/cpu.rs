//! The pipeline benchmark's CPU accounting: the machine's, anvil's and PostgreSQL's CPU time read from /proc.

use std::time::Instant;

/// Clock ticks per second in /proc (USER_HZ on Linux).
const PROC_TICKS_PER_SEC: f64 = 100.0;

/// CPU ticks (user + system) of the machine and of the processes that matter here.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuSample {
    machine_busy: u64,
    machine_total: u64,
    bench: u64,
    anvil: u64,
    /// Every `postgres` process of the cluster (other users of the server count too).
    postgres: u64,
    at: Option<Instant>,
}

/// (comm, ppid, utime + stime) of one /proc/PID/stat.
fn proc_stat(path: &std::path::Path) -> Option<(String, u32, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_owned();
    let fields: Vec<&str> = text[close + 2..].split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((comm, ppid, ticks))
}

pub(crate) fn cpu_sample() -> CpuSample {
    let mut s = CpuSample { at: Some(Instant::now()), ..CpuSample::default() };
    if let Ok(text) = std::fs::read_to_string("/proc/stat") {
        let nums: Vec<u64> = text
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal
        s.machine_total = nums.iter().take(8).sum();
        s.machine_busy =
            s.machine_total - nums.get(3).copied().unwrap_or(0) - nums.get(4).copied().unwrap_or(0);
    }
    let me = std::process::id();
    s.bench = proc_stat(std::path::Path::new("/proc/self/stat")).map(|(_, _, t)| t).unwrap_or(0);
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            if !entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Some((comm, ppid, ticks)) = proc_stat(&entry.path().join("stat")) else { continue };
            if comm == "anvil" && ppid == me {
                s.anvil += ticks;
            } else if comm.starts_with("postgres") {
                s.postgres += ticks;
            }
        }
    }
    s
}

/// CPU use between two samples, in percent of one core (2 cores = 200%).
pub(crate) fn cpu_line(a: &CpuSample, b: &CpuSample) -> String {
    let wall = b.at.unwrap().duration_since(a.at.unwrap()).as_secs_f64().max(1e-9);
    let pct = |x: u64, y: u64| (y.saturating_sub(x)) as f64 / PROC_TICKS_PER_SEC / wall * 100.0;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    let machine = (b.machine_busy - a.machine_busy) as f64
        / ((b.machine_total - a.machine_total).max(1)) as f64
        * 100.0
        * cores;
    let (bench, anvil, postgres) =
        (pct(a.bench, b.bench), pct(a.anvil, b.anvil), pct(a.postgres, b.postgres));
    // Other sessions share the machine: what they took is a warning about this phase's numbers.
    let others = (machine - bench - anvil - postgres).max(0.0);
    format!(
        "cpu (% of one core, {cores:.0} cores): bench {bench:.0}%, anvil {anvil:.0}%, postgres(all) {postgres:.0}%, \
         other processes {others:.0}%, machine {machine:.0}%"
    )
}

/// CPU time per item between two samples, in milliseconds.
struct PerItemMs {
    anvil: f64,
    postgres: f64,
    bench: f64,
    /// Every process of the machine (/proc/stat's first line sums every core, in the same ticks).
    machine: f64,
}

fn per_item_ms(a: &CpuSample, b: &CpuSample, items: usize) -> PerItemMs {
    let ms = |x: u64, y: u64| y.saturating_sub(x) as f64 / PROC_TICKS_PER_SEC * 1e3 / items as f64;
    PerItemMs {
        anvil: ms(a.anvil, b.anvil),
        postgres: ms(a.postgres, b.postgres),
        bench: ms(a.bench, b.bench),
        machine: ms(a.machine_busy, b.machine_busy),
    }
}

fn cores() -> f64 {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64
}

/// CPU time per item (a payout broadcast, a transfer accepted) between two samples, and the rate
/// the machine's cores allow at that cost: the bound a phase that fills the machine cannot pass.
pub(crate) fn cpu_per_item_line(a: &CpuSample, b: &CpuSample, items: usize, item: &str) -> String {
    let wall = b.at.unwrap().duration_since(a.at.unwrap()).as_secs_f64().max(1e-9);
    let (cost, cores) = (per_item_ms(a, b, items), cores());
    let allowed_per_s = cores * 1e3 / cost.machine.max(1e-9);
    let reached_per_s = items as f64 / wall;
    format!(
        "cpu per {item}: anvil {:.2} ms, postgres(all) {:.2} ms, bench {:.2} ms, machine {:.2} ms; \
         {cores:.0} cores allow at most {allowed_per_s:.0}/s at these costs, this phase {reached_per_s:.0}/s = {:.0}% of that",
        cost.anvil,
        cost.postgres,
        cost.bench,
        cost.machine,
        reached_per_s / allowed_per_s * 100.0
    )
}

/// What a rate of `aim_per_s` items leaves each item of the machine's cores, beside what each
/// took between two samples: anvil's part alone against the whole budget shows whether the aim
/// fits on this machine at all.
pub(crate) fn aim_budget_line(
    a: &CpuSample,
    b: &CpuSample,
    items: usize,
    aim_per_s: f64,
) -> String {
    let (cost, cores) = (per_item_ms(a, b, items), cores());
    let budget_ms = cores * 1e3 / aim_per_s.max(1e-9);
    format!(
        "at {aim_per_s:.0}/s {cores:.0} cores leave {budget_ms:.2} ms of cpu per item; here anvil took {:.2} ms, \
         leaving {:.2} ms for PostgreSQL and payoutd, which took {:.2} ms",
        cost.anvil,
        budget_ms - cost.anvil,
        cost.postgres + cost.bench
    )
}
