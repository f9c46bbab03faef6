#!/bin/sh
# The steps every sandbox image takes alike. proctor.sandbox.images copies this file into
# each image's build context, so an edit here changes every image's tag; each Dockerfile
# runs it as /usr/local/sbin/proctor-image:
#   packages PKG...  install the Debian packages the base lacks (a base that has them all
#                    needs no network); apt lists and .debs are removed to keep it small
#   user             the unprivileged users: `sandbox` (1000) runs programs, `judge` (1001) runs
#                    Python/JavaScript tests apart from them
#   native           the guard every C, C++ and Rust program is linked with (guard.o), and the
#                    names the C and C++ libraries define (sandbox/server/native.py)
#   server           the fork server in /opt/proctor: root-owned, so no job can rewrite
#                    its own supervisor; readable by all. Last step of every image: /work
#                    becomes a symlink into /job, a tmpfs where every job gets new
#                    directories (sandbox/server/layout.py)
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
    groupadd -g 1001 judge
    useradd -u 1001 -g 1001 -G sandbox -d /job/jtmp -M -s /bin/sh judge
    ;;
  native)
    mkdir -p /opt/proctor/native
    gcc -O2 -c /opt/proctor/guard.c -o /opt/proctor/native/guard.o
    if command -v g++ >/dev/null 2>&1; then
      probe="$(mktemp -d)"
      printf '#include <iostream>\n#include <cmath>\nint main() { std::cout << std::sqrt(2.0); }\n' > "$probe/p.cpp"
      g++ -o "$probe/p" "$probe/p.cpp"
      {
        for lib in $(ldd "$probe/p" | awk '$2 == "=>" {print $3} $1 ~ /^\// {print $1}'); do
          nm -D --defined-only "$lib"
        done
        for f in libc_nonshared.a Scrt1.o crt1.o crti.o crtn.o crtbeginS.o crtendS.o; do
          nm --defined-only "$(gcc -print-file-name=$f)"
        done
        nm --defined-only "$(gcc -print-libgcc-file-name)"
      } 2>/dev/null | awk 'NF >= 2 {print $NF}' | sed 's/@.*//' | sort -u > /opt/proctor/native/library-symbols.txt
      rm -rf "$probe"
      test "$(wc -l < /opt/proctor/native/library-symbols.txt)" -gt 1000
    fi
    ;;
  server)
    chmod -R a+rX,go-w /opt/proctor
    # /job and /run/proctor are not made here: Docker makes a missing mount point with the
    # mode the mount asks for, and an existing one keeps the image directory's mode.
    # /tmp stays a directory: a tmpfs is mounted on it (gVisor mounts one there anyway).
    rm -rf /work /tmp/*
    ln -s /job/work /work
    ;;
  *)
    echo "usage: proctor-image packages PKG... | user | native | server" >&2
    exit 2
    ;;
esac
