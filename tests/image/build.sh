#!/usr/bin/env bash
# tests/image/build.sh OUTDIR: the operator image, built from the repo's Dockerfile without a
# daemon, written to OUTDIR as an OCI layout (tag "latest").
#
#   base:  a Debian bookworm rootfs made here with debootstrap (python3, python3-venv and
#          python-is-python3 from Debian's packages; Docker Hub's python:* is not reachable),
#          committed into buildah's vfs storage as localhost/inference-capacity-base:bookworm;
#   image: buildah build --isolation chroot --storage-driver vfs of the Dockerfile with
#          --build-arg PYTHON_IMAGE=that base (pip fetches the dependencies from PyPI).
#
# Cached by hash under ${IMAGE_CACHE:-~/.cache/inference-capacity/image}: the base by the
# debootstrap command, the image by the base, the Dockerfile, .dockerignore, pyproject.toml,
# README.md and every file under operator/ (a cache hit copies the layout: seconds).
# Needs root (or a user namespace with mounts) and: debootstrap buildah umoci skopeo.
set -euo pipefail
OUT=${1:?usage: tests/image/build.sh OUTDIR}
cd "$(dirname "$0")/../.."
CACHE=${IMAGE_CACHE:-$HOME/.cache/inference-capacity/image}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$CACHE"
for tool in debootstrap buildah skopeo; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is required (apt-get install -y $tool)" >&2; exit 2; }
done
T0=$(date +%s)
STORE=(--root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver vfs)

# ---- the base rootfs --------------------------------------------------------------------------
BASE_CMD="debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates bookworm"
BASE_KEY=$(printf '%s\n%s\n' "$BASE_CMD" "$MIRROR" | sha256sum | cut -c1-16)
BASE_REF=localhost/inference-capacity-base:$BASE_KEY
if ! buildah "${STORE[@]}" inspect --type image "$BASE_REF" >/dev/null 2>&1; then
  ROOTFS=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$ROOTFS"' EXIT
  echo "build.sh: debootstrap bookworm (base $BASE_KEY)" >&2
  $BASE_CMD "$ROOTFS" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
  # apt's lists and caches are not part of the image
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/tmp/*
  CTR=$(buildah "${STORE[@]}" from scratch)
  MNT=$(buildah "${STORE[@]}" mount "$CTR")
  cp -a "$ROOTFS"/. "$MNT"/
  buildah "${STORE[@]}" umount "$CTR" >/dev/null
  buildah "${STORE[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd '["python3"]' "$CTR"
  buildah "${STORE[@]}" commit -q "$CTR" "$BASE_REF" >/dev/null
  buildah "${STORE[@]}" rm "$CTR" >/dev/null
  rm -rf "$ROOTFS"
  trap - EXIT
  echo "build.sh: base committed at +$(( $(date +%s) - T0 )) s" >&2
fi

# ---- the image --------------------------------------------------------------------------------
KEY=$( {
  echo "$BASE_KEY"
  sha256sum Dockerfile .dockerignore pyproject.toml README.md
  git ls-files -co --exclude-standard operator | grep -v -e __pycache__ -e '\.pyc$' -e 'egg-info' | sort | xargs sha256sum
} | sha256sum | cut -c1-16)
LAYOUT=$CACHE/oci-$KEY
if [ ! -f "$LAYOUT/index.json" ]; then
  echo "build.sh: buildah build (image $KEY)" >&2
  # a CA bundle the host trusts (a TLS-inspecting egress proxy's, here) is given to pip during
  # the build's RUN steps only, as bind mounts: nothing of it is committed into the image
  TRUST=()
  CA=${PIP_CERT:-${SSL_CERT_FILE:-}}
  if [ -n "$CA" ] && [ -f "$CA" ]; then
    printf '[global]\ncert = /run/build-ca.crt\n' >"$CACHE/pip.conf"
    TRUST=(--volume "$CA:/run/build-ca.crt:ro" --volume "$CACHE/pip.conf:/etc/pip.conf:ro")
  fi
  buildah "${STORE[@]}" build --isolation chroot --pull=never --layers=false "${TRUST[@]}" \
    --build-arg PYTHON_IMAGE="$BASE_REF" -t "localhost/inference-capacity:$KEY" -f Dockerfile . >&2
  rm -rf "$LAYOUT.tmp"
  skopeo --override-os linux copy -q \
    "containers-storage:[vfs@$CACHE/storage+$CACHE/run]localhost/inference-capacity:$KEY" \
    "oci:$LAYOUT.tmp:latest"
  mv "$LAYOUT.tmp" "$LAYOUT"
  # only the newest image and base are kept in the store (vfs keeps a full copy per layer)
  buildah "${STORE[@]}" rmi "localhost/inference-capacity:$KEY" >/dev/null 2>&1 || true
fi
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
cp -a "$LAYOUT" "$OUT"
SIZE=$(du -sb "$OUT" | cut -f1)
echo "build.sh: $OUT (image $KEY, $(( SIZE / 1048576 )) MiB compressed layers) at +$(( $(date +%s) - T0 )) s" >&2
