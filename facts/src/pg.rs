//! Where PostgreSQL keeps its data in the images, and where a test server's data goes: a
//! volume, or memory.

/// PostgreSQL's data directory in the image (the upstream image's `PGDATA`).
pub const PGDATA: &str = "/var/lib/postgresql/data";

/// Puts `PGDATA` on an anonymous volume (removed with the container), as the upstream image's
/// `VOLUME` does: on a copy-on-write storage driver (fuse-overlayfs here) writing the cluster
/// into the container's own layer is slow (measured here: 5.1–6.1 s until ready, against
/// 1.8–2.4 s on a volume). The volume survives a container restart, like a real server's disk.
pub fn data_volume(host: &mut testcontainers::bollard::models::HostConfig) {
    mount_data(host, testcontainers::bollard::models::MountTypeEnum::VOLUME);
}

/// Puts `PGDATA` in memory (a tmpfs, removed with the container) for a server that is never
/// stopped: a stop loses the cluster, so whoever stops the server must use [`data_volume`].
/// On this project's machine (a fresh one, 2026-12-07) the image's cluster unpacks into a
/// tmpfs in 57 to 78 ms, against 1.0 to 1.4 s into a volume (the same 40 MB, about a thousand
/// files), and the container is ready in 0.85 to 0.98 s against 1.28 to 2.5 s (slower round
/// after round on a volume); the elector's 78 integration tests ran in 71 s against 110 s.
/// `fsync` stays on (PostgreSQL's setting); on a tmpfs it costs nothing.
pub fn data_in_memory(host: &mut testcontainers::bollard::models::HostConfig) {
    mount_data(host, testcontainers::bollard::models::MountTypeEnum::TMPFS);
}

fn mount_data(
    host: &mut testcontainers::bollard::models::HostConfig,
    typ: testcontainers::bollard::models::MountTypeEnum,
) {
    host.mounts
        .get_or_insert_with(Vec::new)
        .push(testcontainers::bollard::models::Mount {
            target: Some(PGDATA.to_owned()),
            typ: Some(typ),
            ..Default::default()
        });
}
