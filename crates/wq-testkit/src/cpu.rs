//! CPU time for benchmarks, read from Linux's `/proc`: this process's and
//! the whole machine's, so a benchmark can say what a unit of work cost
//! here and everywhere else (a database server on the same machine).

/// CPU time in seconds: of this process (`/proc/self/stat`) and of the
/// whole machine (`/proc/stat`: user, nice, system, irq and softirq; not
/// idle, I/O wait, or steal, the time the hypervisor gave to others, nor
/// guest time, which user time already counts). Both count in `USER_HZ`
/// ticks, 100 a second on Linux.
pub fn cpu_seconds() -> (f64, f64) {
    const USER_HZ: f64 = 100.0;
    let own = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the whole line.
    let after = &own[own.rfind(')').expect("stat's command") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |index: usize| fields[index].parse::<f64>().expect("stat's ticks");
    let process = (ticks(11) + ticks(12)) / USER_HZ;
    let all = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let cpu: Vec<f64> = all
        .lines()
        .next()
        .expect("/proc/stat's cpu line")
        .split_whitespace()
        .skip(1)
        .map(|value| value.parse().expect("/proc/stat's ticks"))
        .collect();
    let machine = [0, 1, 2, 5, 6]
        .iter()
        .map(|&field| cpu.get(field).copied().unwrap_or(0.0))
        .sum::<f64>()
        / USER_HZ;
    (process, machine)
}
