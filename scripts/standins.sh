# The Dockerfile's base images on a machine that cannot pull them (sourced by
# scripts/container-smoke after lib.sh). Each external FROM image is used as it is when the
# machine has it, else pulled, else played by a stand-in: Debian bookworm (debootstrap)
# plus Debian's packages, scripts/standins/KIND.Containerfile, tagged with the exact name
# the FROM line uses, so the Dockerfile builds unchanged. A stand-in is not the pinned
# upstream image: the same Debian release and the layout the Dockerfile relies on, but
# Debian's versions of Python, Node.js and nginx. Stand-ins carry the label
# messenger.standin (a hash of their definition) and are kept as a cache; one whose
# definition changed is built again. `podman rmi NAME` drops one (the next run tries to
# pull the real image first).

STANDIN_DIR=$ROOT/scripts/standins
STANDIN_DEBIAN=localhost/messenger-standin-debian:bookworm
STANDIN_MIRROR=${STANDIN_MIRROR:-http://deb.debian.org/debian}
STANDIN_LABEL=messenger.standin
STANDIN_ROOTFS=  # debootstrap's tree while it is being imported (removed on exit too)
BASES_PULLED=()    # the real images, as "name"
BASES_STANDINS=()  # the bases played by stand-ins

dockerfile_bases() {  # the Dockerfile's external images: every FROM that names no stage
  local keyword image as name stages=" "
  while read -r keyword image as name _; do
    [ "${keyword^^}" = FROM ] || continue
    if [[ $stages != *" $image "* ]]; then echo "$image"; fi
    if [ "${as^^}" = AS ]; then stages+="$name "; fi
  done <"$ROOT/Dockerfile"
}

standin_kind() {  # node:20.19.0-bookworm-slim -> node
  local name=${1%%[:@]*}
  echo "${name##*/}"
}

standin_hash() {  # KIND: its Containerfile and the files it copies, as one hash
  local kind=$1
  {
    cat "$STANDIN_DIR/$kind.Containerfile"
    [ ! -d "$STANDIN_DIR/$kind" ] || find "$STANDIN_DIR/$kind" -type f | sort | xargs cat
  } | sha256sum | cut -c1-16
}

ensure_base_images() {
  local image
  for image in $(dockerfile_bases); do ensure_base_image "$image"; done
}

ensure_base_image() {  # IMAGE, as its FROM line names it
  local image=$1 kind have want
  kind=$(standin_kind "$image")
  if [ ! -f "$STANDIN_DIR/$kind.Containerfile" ]; then
    log "no stand-in for $image: add scripts/standins/$kind.Containerfile, or make the" \
      "image available to podman (podman pull / podman load)"
    return 1
  fi
  want=$(standin_hash "$kind")
  if podman image exists "$image"; then
    have=$(podman image inspect --format "{{index .Labels \"$STANDIN_LABEL\"}}" "$image")
    case "$have" in
      "" | "<no value>") BASES_PULLED+=("$image"); return 0 ;;  # the real one
      "$want") BASES_STANDINS+=("$image"); return 0 ;;
    esac
    log "the stand-in for $image changed (scripts/standins/$kind.*): building it again"
  elif timeout 300 podman pull -q "docker.io/library/$image" >"$LOCAL/pull.log" 2>&1; then
    log "pulled $image"
    BASES_PULLED+=("$image")
    return 0
  else
    have=$(tail -n1 "$LOCAL/pull.log")
    log "cannot pull $image (${have##*: }): building a stand-in from Debian bookworm's" \
      "packages (scripts/standins/$kind.Containerfile)"
  fi
  ensure_standin_debian
  # Debian's packages come over plain HTTP (signed): the build needs no CA bundle.
  run_logged "$LOCAL/standin-$kind.log" podman build --format docker --network host \
    --label "$STANDIN_LABEL=$want" -f "$STANDIN_DIR/$kind.Containerfile" -t "$image" \
    "$STANDIN_DIR"
  BASES_STANDINS+=("$image")
}

ensure_standin_debian() {  # the stand-ins' common base: a minimal Debian bookworm
  podman image exists "$STANDIN_DEBIAN" && return 0
  command -v debootstrap >/dev/null || apt_install debootstrap
  STANDIN_ROOTFS=$(mktemp -d /var/tmp/messenger-standin.XXXXXX)
  log "debootstrap of a minimal Debian bookworm for the stand-ins (about a minute;" \
    "its log: $LOCAL/standin-debootstrap.log)"
  if ! debootstrap --variant=minbase bookworm "$STANDIN_ROOTFS" "$STANDIN_MIRROR" \
    >"$LOCAL/standin-debootstrap.log" 2>&1; then
    log "debootstrap failed: $(tail -n1 "$LOCAL/standin-debootstrap.log")"
    return 1
  fi
  local root=$STANDIN_ROOTFS
  # As Debian's own container images are: package installs start no services, apt keeps
  # no downloaded packages, and updates come from the release's updates and security.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  printf '%s\n' 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb || true"; };' \
    'APT::Install-Recommends "false";' >"$root/etc/apt/apt.conf.d/docker-clean"
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $STANDIN_MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${STANDIN_MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar --numeric-owner -C "$root" -c . |
    podman import --quiet --change 'CMD ["bash"]' - "$STANDIN_DEBIAN" >/dev/null
  remove_standin_rootfs
}

remove_standin_rootfs() {
  [ -z "$STANDIN_ROOTFS" ] || rm -rf --one-file-system "$STANDIN_ROOTFS"
  STANDIN_ROOTFS=
}
