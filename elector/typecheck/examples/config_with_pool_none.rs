// CFG-1: the pool is not optional either: `None` is not a pool.
fn main() {
    let _config = elector::Config {
        pool: None,
        check_interval: std::time::Duration::ZERO,
        registry: None,
        verify_lock: false,
        detect_shared_session: true,
        identity: None,
        fencing: false,
        wake: false,
    };
}
