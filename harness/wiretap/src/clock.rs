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
        let start = std::time::Instant::now();
        let a = monotonic_us();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = monotonic_us();
        let elapsed = start.elapsed().as_micros() as u64;
        // `elapsed` spans the two readings and a few instructions more on either side.
        assert!(b > a && elapsed >= b - a, "{a} {b} {elapsed}");
        assert!(elapsed - (b - a) < 1_000, "{a} {b} {elapsed}");
    }
}
