//! The clock records are stamped with.

use nix::time::{clock_gettime, ClockId};

/// `CLOCK_MONOTONIC` in microseconds: the clock of `std::time::Instant` and tokio's on Linux,
/// shared by every process (and container) on one kernel, so a proxy's records and a
/// harness's timeline can be put on one axis.
pub fn monotonic_us() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1_000)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_the_clock_of_instant() {
        let a = monotonic_us();
        let start = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = monotonic_us();
        let elapsed = start.elapsed().as_micros() as u64;
        assert!(b > a && b - a >= elapsed, "{a} {b} {elapsed}");
        assert!(b - a < elapsed + 5_000, "{a} {b} {elapsed}");
    }
}
