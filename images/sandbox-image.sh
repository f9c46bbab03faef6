#!/bin/sh
# The steps every sandbox image takes alike. proctor.sandbox.images copies this file into
# each image's build context, so an edit here changes every image's tag; each Dockerfile
# runs it as /usr/local/sbin/proctor-image:
#   packages PKG...  install the Debian packages the base lacks (a base that has them all
#                    needs no network); apt lists and .debs are removed to keep it small
#   user             the unprivileged user jobs run as (uid and gid 1000, home /work)
#   server           the fork server in /opt/proctor: root-owned, so no job can rewrite
#                    its own supervisor; readable by all
set -eu
case "${1:-}" in
  packages)
    shift
    need=""
    for p in "$@"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need="$need $p"
    done
    if [ -n "$need" ]; then
      apt-get update
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $need
      apt-get clean
      rm -rf /var/lib/apt/lists/*
    fi
    ;;
  user)
    groupadd -g 1000 sandbox
    useradd -u 1000 -g 1000 -d /work -M -s /bin/sh sandbox
    mkdir -p /work
    chown 1000:1000 /work
    ;;
  server)
    chmod -R a+rX,go-w /opt/proctor
    ;;
  *)
    echo "usage: proctor-image packages PKG... | user | server" >&2
    exit 2
    ;;
esac
