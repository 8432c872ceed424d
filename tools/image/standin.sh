#!/usr/bin/env bash
# The Dockerfile's base image, python:3.11-slim, in the daemon of tools/image/dockerd.sh
# (DOCKER_HOST set by the caller): kept if present, else pulled, and where no registry serves it,
# a stand-in made under the same name from Debian packages, so that the Dockerfile's FROM resolves
# with no registry and the Dockerfile stays what a user builds with one.
#
# The stand-in: Debian bookworm (whose Python is 3.11) made by debootstrap from the Debian mirror
# the machine's own apt sources name (read here, at run time), with the machine's CA certificates
# added, so that apt and pip in the image build trust what this machine trusts (a proxy that
# intercepts TLS, for one); then imported as one layer. README.md says how it differs from the
# registry's image. It is made once and reused while this script and the image ID are unchanged
# (.cache/docker/standin: the key it was made for and the ID it got).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=$ROOT/.cache/docker
DOCKER=/usr/bin/docker
BASE=python:3.11-slim
SUITE=bookworm
PACKAGES=python3,python3-venv,python-is-python3,ca-certificates,netbase
KEY=$(cat "$0" /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-16)
STAMP=$CACHE/standin

id=$("$DOCKER" image inspect --format '{{.Id}}' "$BASE" 2>/dev/null || true)
if [ -n "$id" ]; then
    # Made here for this key, or not made here at all (pulled, or loaded by the user): kept.
    if [ "$(cat "$STAMP" 2>/dev/null)" = "$KEY $id" ] || ! grep -q " $id\$" "$STAMP" 2>/dev/null; then
        exit 0
    fi
elif "$DOCKER" pull --quiet "$BASE" >/dev/null 2>&1; then
    exit 0
fi

echo "no registry serves $BASE: making a stand-in from Debian $SUITE packages" >&2
command -v debootstrap >/dev/null || { echo "debootstrap: install Debian's debootstrap" >&2; exit 1; }
# Debian's repositories for the suite, its updates and its security fixes, as the machine's apt
# sources name them (REPO_URI of each enabled source of the suite's main component).
# shellcheck disable=SC2016 # apt's own $(FIELD) placeholders, not the shell's
sources=$(apt-get indextargets --format '$(TARGET_OF) $(REPO_URI) $(RELEASE) $(COMPONENT)' \
    | awk -v s="$SUITE" '$1 == "deb" && $4 == "main" && ($3 == s || index($3, s "-") == 1) {print "deb " $2 " " $3 " main"}' \
    | sort -u)
mirror=$(awk -v s="$SUITE" '$3 == s {print $2; exit}' <<<"$sources")
[ -n "$mirror" ] || { echo "the machine's apt sources name no Debian $SUITE mirror" >&2; exit 1; }

rootfs=$CACHE/standin-rootfs
# A debootstrap that failed may leave /proc mounted in the rootfs: unmounted before removing it.
clean() {
    awk -v r="$rootfs/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r | xargs -r umount -l
    rm -rf "$rootfs"
}
trap clean EXIT
clean
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$mirror" >&2
echo "$sources" >"$rootfs/etc/apt/sources.list"
cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
chroot "$rootfs" update-ca-certificates >&2
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
# The registry's image's environment, where it applies (its Python is in /usr/local, this one's
# in /usr/bin, on the same PATH).
tar --numeric-owner -C "$rootfs" -c . | "$DOCKER" import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$BASE" >/dev/null
echo "$KEY $("$DOCKER" image inspect --format '{{.Id}}' "$BASE")" >"$STAMP"
