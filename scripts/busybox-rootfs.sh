#!/usr/bin/env bash
# busybox-rootfs.sh DIR: make a minimal root filesystem from the host's
# static busybox (Debian's busybox-static), so podlab needs no registry.
set -euo pipefail
dir=${1:?usage: busybox-rootfs.sh DIR}
bb=$(command -v busybox || true)
[ -n "$bb" ] || { echo "busybox not found: apt-get install busybox-static" >&2; exit 1; }
if ldd "$bb" >/dev/null 2>&1; then
  echo "$bb is not a static busybox: apt-get install busybox-static" >&2; exit 1
fi
mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,proc,sys,dev,var/tmp,home}
chmod 1777 "$dir/tmp" "$dir/var/tmp"
cp "$bb" "$dir/bin/busybox"
for applet in $("$dir/bin/busybox" --list-full); do
  [ -e "$dir/$applet" ] || ln -s /bin/busybox "$dir/$applet"
done
cat > "$dir/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/home:/bin/false
P
cat > "$dir/etc/group" <<'G'
root:x:0:
nogroup:x:65534:
G
