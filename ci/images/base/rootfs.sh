#!/usr/bin/env bash
# Builds the root file system of elector-local/debian-base: debootstrap minbase @DEBIAN_RELEASE@, then
# PACKAGES, without the PostgreSQL package's own cluster and without apt's caches. Run as root by
# ci/build-images.sh, whose recipe hash covers this file: change it, and the images rebuild.
#   ci/images/base/rootfs.sh ROOTFS MIRROR PACKAGE...
set -euo pipefail
rootfs=$1 mirror=$2
shift 2
trap 'umount -lf "$rootfs/proc" 2>/dev/null || true' EXIT
echo "== debootstrap --variant=minbase @DEBIAN_RELEASE@ from $mirror"
debootstrap --variant=minbase @DEBIAN_RELEASE@ "$rootfs" "$mirror"
# No service starts inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
chmod +x "$rootfs/usr/sbin/policy-rc.d"
mount -t proc proc "$rootfs/proc"
echo "== apt-get install $*"
chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
  --no-install-recommends "$@"
# The package's own cluster is not used: the image's entrypoint runs initdb on PGDATA.
chroot "$rootfs" sh -c 'pg_dropcluster --stop @PG_MAJOR@ main 2>/dev/null || true'
chroot "$rootfs" apt-get clean
umount -lf "$rootfs/proc"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs/usr/sbin/policy-rc.d"
