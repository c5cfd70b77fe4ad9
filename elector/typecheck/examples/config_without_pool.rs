// CFG-1: there is no way to build a Config without a pool.
fn main() {
    let _config = elector::Config {
        check_interval: std::time::Duration::ZERO,
        registry: None,
        verify_lock: false,
        detect_shared_session: true,
        identity: None,
        fencing: false,
        wake: false,
    };
}
