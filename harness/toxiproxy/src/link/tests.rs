//! Unit tests of the link state machine, on explicit instants (no sockets, no sleeping).

use super::*;
use crate::toxic::Direction;

const UPSTREAM: TimeoutMode = TimeoutMode::Upstream;
const PARTITION: TimeoutMode = TimeoutMode::Partition;

fn toxic(id: u64, kind: ToxicKind) -> Arc<Toxic> {
    Arc::new(Toxic {
        id,
        generation: 0,
        name: format!("t{id}"),
        stream: "downstream".into(),
        direction: Direction::Downstream,
        toxicity: 1.0,
        kind,
    })
}

fn data(s: &str, ts: Instant) -> Item {
    Item::Data {
        data: Bytes::copy_from_slice(s.as_bytes()),
        ts,
    }
}

/// Drains everything writable; returns it as a string.
fn take_out(link: &mut Link) -> String {
    let mut out = Vec::new();
    while let Some(b) = link.next_write() {
        out.extend_from_slice(&b);
        link.wrote(b.len());
    }
    String::from_utf8(out).unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn no_toxics_passes_through_and_ends() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let mut link = Link::new(&[], UPSTREAM, t0, &mut rng);
    link.push_input(data("hello", t0));
    assert_eq!(link.advance(t0, &mut rng), None);
    assert_eq!(take_out(&mut link), "hello");
    link.push_input(Item::Eof);
    link.advance(t0, &mut rng);
    assert!(link.output_ended());
    assert!(!link.wants_input());
}

#[test]
fn latency_delays_each_chunk_from_its_read_time() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(
        1,
        ToxicKind::Latency {
            latency: 100,
            jitter: 0,
        },
    )];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    link.push_input(data("a", t0));
    link.push_input(data("b", t0 + ms(10)));
    assert_eq!(link.advance(t0, &mut rng), Some(t0 + ms(100)));
    assert_eq!(take_out(&mut link), "");
    assert_eq!(link.advance(t0 + ms(100), &mut rng), Some(t0 + ms(110)));
    assert_eq!(take_out(&mut link), "a");
    assert_eq!(link.advance(t0 + ms(110), &mut rng), None);
    assert_eq!(take_out(&mut link), "b");
}

#[test]
fn jitter_stays_within_bounds() {
    let mut rng = fastrand::Rng::with_seed(7);
    let t0 = Instant::now();
    let chain = [toxic(
        1,
        ToxicKind::Latency {
            latency: 100,
            jitter: 20,
        },
    )];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    for _ in 0..50 {
        link.push_input(data("x", t0));
        let due = link.advance(t0, &mut rng).unwrap();
        assert!(due >= t0 + ms(80) && due < t0 + ms(120), "{:?}", due - t0);
        link.advance(due, &mut rng);
        assert_eq!(take_out(&mut link), "x");
    }
}

#[test]
fn bandwidth_zero_holds_then_heals_in_order() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(1, ToxicKind::Bandwidth { rate: 0 })];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    link.push_input(data("one ", t0));
    link.push_input(data("two ", t0));
    assert_eq!(link.advance(t0 + ms(1000), &mut rng), None);
    assert_eq!(take_out(&mut link), "");
    assert_eq!(link.buffered(), 8);
    link.reconcile(&[], t0, &mut rng);
    link.push_input(data("three", t0));
    link.advance(t0, &mut rng);
    assert_eq!(take_out(&mut link), "one two three");
}

#[test]
fn bandwidth_paces_data() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    // 10 KB/s: 2000 bytes take 200 ms, in pieces of 1000 bytes (100 ms each).
    let chain = [toxic(1, ToxicKind::Bandwidth { rate: 10 })];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    link.push_input(data(&"x".repeat(2000), t0));
    assert_eq!(link.advance(t0, &mut rng), Some(t0 + ms(100)));
    assert_eq!(link.advance(t0 + ms(100), &mut rng), Some(t0 + ms(200)));
    assert_eq!(take_out(&mut link).len(), 1000);
    assert_eq!(link.advance(t0 + ms(200), &mut rng), None);
    assert_eq!(take_out(&mut link).len(), 1000);
}

#[test]
fn timeout_zero_drops_silently_and_removal_closes() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(1, ToxicKind::Timeout { timeout: 0 })];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    link.push_input(data("lost", t0));
    assert_eq!(link.advance(t0 + ms(60_000), &mut rng), None);
    assert_eq!(take_out(&mut link), "");
    assert!(!link.output_ended());
    assert!(link.wants_input());
    link.reconcile(&[], t0, &mut rng);
    link.advance(t0, &mut rng);
    assert!(link.output_ended());
}

#[test]
fn timeout_closes_after_quiet_period() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(1, ToxicKind::Timeout { timeout: 50 })];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    assert_eq!(link.advance(t0, &mut rng), Some(t0 + ms(50)));
    link.push_input(data("x", t0 + ms(30)));
    assert_eq!(link.advance(t0 + ms(30), &mut rng), Some(t0 + ms(80)));
    link.advance(t0 + ms(80), &mut rng);
    assert!(link.output_ended());
    assert_eq!(take_out(&mut link), "");
}

/// Upstream's `timeout` closes its link when its input ends, whatever its timer.
#[test]
fn timeout_closes_the_link_when_its_input_ends() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    for timeout in [0, 50] {
        let chain = [toxic(1, ToxicKind::Timeout { timeout })];
        let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
        link.push_input(data("lost", t0));
        link.push_input(Item::Eof);
        link.advance(t0, &mut rng);
        assert!(link.output_ended(), "timeout {timeout}");
        assert_eq!(take_out(&mut link), "");
    }
}

#[test]
fn partition_timeout_zero_holds_the_end_of_stream_until_removed() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(1, ToxicKind::Timeout { timeout: 0 })];
    let mut link = Link::new(&chain, PARTITION, t0, &mut rng);
    link.push_input(data("lost", t0));
    link.push_input(Item::Eof);
    assert_eq!(link.advance(t0 + ms(60_000), &mut rng), None);
    assert!(!link.output_ended());
    assert!(!link.wants_input());
    assert_eq!(take_out(&mut link), "");
    link.reconcile(&[], t0, &mut rng);
    link.advance(t0, &mut rng);
    assert!(link.output_ended());
}

#[test]
fn partition_held_end_of_stream_goes_on_when_the_proxy_closes_the_source() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(1, ToxicKind::Timeout { timeout: 0 })];
    let mut link = Link::new(&chain, PARTITION, t0, &mut rng);
    link.push_input(Item::Eof);
    link.advance(t0, &mut rng);
    assert!(!link.output_ended());
    link.close_source();
    link.advance(t0, &mut rng);
    assert!(link.output_ended());
    // Closing the source of a link still reading ends it too (the timeout drops the end).
    let mut link = Link::new(&chain, PARTITION, t0, &mut rng);
    link.close_source();
    link.advance(t0, &mut rng);
    assert!(link.output_ended());
}

#[test]
fn partition_held_end_of_stream_goes_on_when_an_update_unapplies_the_timeout() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let t = toxic(1, ToxicKind::Timeout { timeout: 0 });
    let mut link = Link::new(std::slice::from_ref(&t), PARTITION, t0, &mut rng);
    link.push_input(Item::Eof);
    link.advance(t0, &mut rng);
    assert!(!link.output_ended());
    let mut updated = (*t).clone();
    updated.generation += 1;
    updated.toxicity = 0.0;
    link.reconcile(&[Arc::new(updated)], t0, &mut rng);
    link.advance(t0, &mut rng);
    assert!(link.output_ended());
}

#[test]
fn partition_timeout_closes_on_its_timer_not_on_the_end_of_stream() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(1, ToxicKind::Timeout { timeout: 50 })];
    let mut link = Link::new(&chain, PARTITION, t0, &mut rng);
    link.push_input(data("x", t0 + ms(10)));
    link.push_input(Item::Eof);
    assert_eq!(link.advance(t0 + ms(10), &mut rng), Some(t0 + ms(60)));
    assert!(!link.output_ended());
    link.advance(t0 + ms(60), &mut rng);
    assert!(link.output_ended());
    assert_eq!(take_out(&mut link), "");
}

#[test]
fn reset_peer_fires_after_first_data_plus_timeout() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(1, ToxicKind::ResetPeer { timeout: 20 })];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    assert_eq!(link.advance(t0 + ms(500), &mut rng), None);
    link.push_input(data("x", t0 + ms(500)));
    assert_eq!(link.advance(t0 + ms(500), &mut rng), Some(t0 + ms(520)));
    assert!(!link.reset_requested());
    link.advance(t0 + ms(520), &mut rng);
    assert!(link.reset_requested());
    assert_eq!(take_out(&mut link), "");
}

#[test]
fn slow_close_delays_only_the_end() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(1, ToxicKind::SlowClose { delay: 40 })];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    link.push_input(data("bye", t0));
    link.push_input(Item::Eof);
    assert_eq!(link.advance(t0, &mut rng), Some(t0 + ms(40)));
    assert_eq!(take_out(&mut link), "bye");
    assert!(!link.output_ended());
    link.advance(t0 + ms(40), &mut rng);
    assert!(link.output_ended());
}

#[test]
fn limit_data_truncates_then_closes() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(1, ToxicKind::LimitData { bytes: 5 })];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    link.push_input(data("abc", t0));
    link.advance(t0, &mut rng);
    assert!(!link.output_ended());
    link.push_input(data("defg", t0));
    link.advance(t0, &mut rng);
    assert_eq!(take_out(&mut link), "abcde");
    assert!(link.output_ended());
}

#[test]
fn slicer_cuts_chunks_with_delays() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let chain = [toxic(
        1,
        ToxicKind::Slicer {
            average_size: 4,
            size_variation: 0,
            delay: 1000,
        },
    )];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    link.push_input(data("abcdefghij", t0));
    assert_eq!(link.advance(t0, &mut rng), Some(t0 + ms(1)));
    assert_eq!(take_out(&mut link), "ab");
    assert_eq!(link.advance(t0 + ms(1), &mut rng), Some(t0 + ms(2)));
    assert_eq!(take_out(&mut link), "cde");
    link.advance(t0 + ms(2), &mut rng);
    link.advance(t0 + ms(3), &mut rng);
    assert_eq!(take_out(&mut link), "fghij");
}

/// The sizes of the pieces a slicer cuts one chunk of `len` bytes into (no delay).
fn slice_sizes(len: usize, average_size: i64, size_variation: i64, seed: u64) -> Vec<usize> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let t0 = Instant::now();
    let chain = [toxic(
        1,
        ToxicKind::Slicer {
            average_size,
            size_variation,
            delay: 0,
        },
    )];
    let mut link = Link::new(&chain, UPSTREAM, t0, &mut rng);
    let payload: String = (0..len)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    link.push_input(data(&payload, t0));
    assert_eq!(link.advance(t0, &mut rng), None);
    let mut sizes = Vec::new();
    let mut out = Vec::new();
    while let Some(piece) = link.next_write() {
        sizes.push(piece.len());
        out.extend_from_slice(&piece);
        link.wrote(piece.len());
    }
    assert_eq!(out, payload.as_bytes(), "the pieces keep the data in order");
    sizes
}

/// Upstream's slicer halves a chunk recursively until a piece is at most
/// `average_size + size_variation` long: 10 bytes at average 4 are 5 + 5, then 2 + 3 twice.
#[test]
fn slicer_halves_recursively_like_upstream() {
    assert_eq!(slice_sizes(10, 4, 0, 1), [2, 3, 2, 3]);
    assert_eq!(
        slice_sizes(100, 10, 0, 1),
        [6, 6, 6, 7, 6, 6, 6, 7, 6, 6, 6, 7, 6, 6, 6, 7]
    );
    assert_eq!(slice_sizes(9, 4, 0, 1), [4, 2, 3]);
    assert_eq!(slice_sizes(4, 4, 0, 1), [4]);
}

#[test]
fn slicer_pieces_stay_within_average_plus_variation() {
    for seed in 0..20 {
        let sizes = slice_sizes(2000, 10, 5, seed);
        assert!(sizes.iter().all(|&n| (1..=15).contains(&n)), "{sizes:?}");
        // Halving, not cutting fixed pieces: the sizes vary around the average.
        let mean = 2000.0 / sizes.len() as f64;
        assert!((7.5..=15.0).contains(&mean), "mean piece {mean}");
    }
}

/// Settings upstream does not survive (average 0 recurses forever; a variation beyond the
/// average cuts out of range) still cut pieces of at least one byte.
#[test]
fn slicer_degenerate_settings_cut_non_empty_pieces() {
    assert_eq!(slice_sizes(5, 0, 0, 1), [1, 1, 1, 1, 1]);
    for seed in 0..20 {
        let sizes = slice_sizes(40, 2, 10, seed);
        assert!(sizes.iter().all(|&n| (1..=12).contains(&n)), "{sizes:?}");
    }
}

#[test]
fn removed_stage_hands_its_data_on_in_order() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let lat = toxic(
        1,
        ToxicKind::Latency {
            latency: 100,
            jitter: 0,
        },
    );
    let stall = toxic(2, ToxicKind::Bandwidth { rate: 0 });
    let mut link = Link::new(&[lat.clone(), stall.clone()], UPSTREAM, t0, &mut rng);
    link.push_input(data("1", t0));
    link.advance(t0 + ms(100), &mut rng); // "1" now held by the stall
    link.push_input(data("2", t0 + ms(100)));
    link.advance(t0 + ms(100), &mut rng); // "2" held by the latency
    link.reconcile(&[lat], t0 + ms(100), &mut rng);
    link.advance(t0 + ms(100), &mut rng);
    assert_eq!(take_out(&mut link), "1");
    link.advance(t0 + ms(200), &mut rng);
    assert_eq!(take_out(&mut link), "2");
}

#[test]
fn toxics_added_later_apply_to_the_live_link() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let mut link = Link::new(&[], UPSTREAM, t0, &mut rng);
    link.reconcile(&[toxic(1, ToxicKind::Timeout { timeout: 0 })], t0, &mut rng);
    link.push_input(data("x", t0));
    link.advance(t0, &mut rng);
    assert_eq!(take_out(&mut link), "");
    assert!(!link.output_ended());
}

#[test]
fn zero_toxicity_never_applies() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let mut t = (*toxic(1, ToxicKind::Timeout { timeout: 0 })).clone();
    t.toxicity = 0.0;
    let mut link = Link::new(&[Arc::new(t)], UPSTREAM, t0, &mut rng);
    link.push_input(data("x", t0));
    link.advance(t0, &mut rng);
    assert_eq!(take_out(&mut link), "x");
}

#[test]
fn update_releases_the_chunk_in_progress() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let lat = toxic(
        1,
        ToxicKind::Latency {
            latency: 1000,
            jitter: 0,
        },
    );
    let mut link = Link::new(std::slice::from_ref(&lat), UPSTREAM, t0, &mut rng);
    link.push_input(data("x", t0));
    link.advance(t0, &mut rng);
    let mut updated = (*lat).clone();
    updated.generation += 1;
    link.reconcile(&[Arc::new(updated)], t0, &mut rng);
    link.advance(t0, &mut rng);
    assert_eq!(take_out(&mut link), "x");
}

#[test]
fn slicer_update_sends_the_rest_of_the_chunk_at_once() {
    let mut rng = fastrand::Rng::with_seed(1);
    let t0 = Instant::now();
    let slicer = toxic(
        1,
        ToxicKind::Slicer {
            average_size: 4,
            size_variation: 0,
            delay: 1000,
        },
    );
    let mut link = Link::new(std::slice::from_ref(&slicer), UPSTREAM, t0, &mut rng);
    link.push_input(data("abcdefghij", t0));
    link.advance(t0, &mut rng);
    assert_eq!(take_out(&mut link), "ab");
    let mut updated = (*slicer).clone();
    updated.generation += 1;
    link.reconcile(&[Arc::new(updated)], t0, &mut rng);
    link.advance(t0, &mut rng);
    assert_eq!(take_out(&mut link), "cdefghij");
}
