#!/usr/bin/env bash
# stock-vm.sh: a stock Debian 12 guest (systemd as PID 1, pure cgroup v2,
# AppArmor on, nft-backed iptables, sudo) booted under qemu's TCG, to run
# podlab where its users run it. This machine's /dev/kvm runs no stock
# kernel, but TCG boots Debian's own.
#
#   scripts/stock-vm.sh build          build the guest image once (cached)
#   scripts/stock-vm.sh run -- CMD...  boot a throwaway copy of it, run CMD
#                                      as user podlab in a copy of this clone,
#                                      stream its output, exit with its status
#   scripts/stock-vm.sh run --reboot -- CMD...
#                                      the same, then, if CMD passed, boot the
#                                      same disks again and run CMD again:
#                                      $STOCK_VM_BOOT is 1, then 2
#
# The image is made natively on the host with debootstrap and cached by the
# hash of its recipe (the section below, setup.sh's APT_PACKAGES and the Go
# version) in $STOCK_VM_CACHE/<hash>/. A run boots it through a qcow2
# overlay (the image stays pristine) with a second ext4 disk holding the
# clone (at the same path as on the host) and Go's module and build caches,
# warmed on the host (same Go, same paths; GOPROXY=off in the guest).
#
# Env: STOCK_VM_CACHE (/var/cache/podlab/stock-vm), STOCK_VM_MEM (4G),
#      STOCK_VM_CPUS (2), STOCK_VM_TIMEOUT (seconds, 5400),
#      STOCK_VM_CONSOLE=1 prints the guest's console log after the run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
self=$repo/scripts/stock-vm.sh
cache=${STOCK_VM_CACHE:-/var/cache/podlab/stock-vm}
export PATH=/usr/local/go/bin:$PATH

say() { echo "stock-vm: $*" >&2; }
die() { say "$*"; exit 125; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- recipe (its text is part of the image's hash) ---
SUITE=bookworm
# The kernel: Debian's stock cloud kernel (virtio, cgroup v2 by default,
# AppArmor in its default LSM list), installed in the image so that
# initramfs-tools makes its initrd (virtio_blk is a module).
KERNEL_PKG=linux-image-cloud-amd64
GUEST_USER=podlab
GUEST_UID=1000
IMAGE_SIZE=8G
# What a stock Debian 12 host has that podlab meets: systemd as PID 1, dbus,
# AppArmor and its parser, iptables (nft backend by default), sudo.
BASE_PACKAGES=(systemd systemd-sysv dbus apparmor iptables sudo kmod udev
  e2fsprogs procps less "$KERNEL_PKG" initramfs-tools)
# Units the packages of setup.sh enable on install that a host does not
# run unless asked (docker-registry listens on :5000): off in the image.
DISABLED_UNITS=(containerd.service docker-registry.service)

# configure_rootfs DIR: the guest's own files, written into the debootstrap
# tree (runs as root on the host).
configure_rootfs() {
  local root=$1
  echo stockvm > "$root/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\tstockvm\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"
  printf 'LABEL=podlab-root\t/\text4\tdefaults\t0\t1\nLABEL=podlab-work\t/mnt/podlab-work\text4\tdefaults,nofail\t0\t2\n' > "$root/etc/fstab"
  mkdir -p "$root/mnt/podlab-work"
  chroot "$root" useradd -m -u "$GUEST_UID" -s /bin/bash "$GUEST_USER"
  echo "$GUEST_USER ALL=(ALL:ALL) NOPASSWD: ALL" > "$root/etc/sudoers.d/$GUEST_USER"
  chmod 0440 "$root/etc/sudoers.d/$GUEST_USER"
  # No network device: no resolver either.
  echo '# stock-vm: no network' > "$root/etc/resolv.conf"
  # Go: the host's, at the same path. Offline: modules come only from the
  # module cache warmed (and checked against the checksum database) on the
  # host, served as a file:// proxy rather than GOPROXY=off, because
  # `go install pkg@version` (setup.sh) asks the proxy for the module's
  # latest version to print its deprecation; go env -w files, as a user
  # would set them.
  cp -a /usr/local/go "$root/usr/local/go"
  echo 'PATH=/usr/local/go/bin:$PATH' > "$root/etc/profile.d/go.sh"
  local home
  for home in "/home/$GUEST_USER" /root; do
    mkdir -p "$root$home/.config/go"
    printf 'GOPROXY=file://%s\nGOSUMDB=off\nGOFLAGS=-mod=mod\nGOTOOLCHAIN=local\nGOMODCACHE=%s\nGOCACHE=%s\n' \
      "$cache/go/mod/cache/download" "$cache/go/mod" "$cache/go/build" > "$root$home/.config/go/env"
  done
  chroot "$root" chown -R "$GUEST_USER:$GUEST_USER" "/home/$GUEST_USER"
  local u
  for u in "${DISABLED_UNITS[@]}"; do
    if [ -e "$root/lib/systemd/system/$u" ]; then chroot "$root" systemctl disable "$u" 2>/dev/null; fi
  done
  # The runner: started once the boot is done (Type=simple does not hold
  # up multi-user.target), it runs the command the host put on the work
  # disk, reports on two virtio-serial ports, and powers the guest off.
  cat > "$root/etc/systemd/system/podlab-run.service" <<'EOF'
[Unit]
Description=podlab stock-vm: run the host's command, then power off
After=multi-user.target
# The work disk is nofail (the image boots without it), so nothing waits
# for its mount: after an unclean poweroff its fsck replays the journal,
# and the second boot reached multi-user.target before the mount, so the
# condition failed and the guest idled at its login prompt.
RequiresMountsFor=/mnt/podlab-work
ConditionPathExists=/mnt/podlab-work/run.sh

[Service]
Type=simple
ExecStart=/usr/local/sbin/podlab-run
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
EOF
  cat > "$root/usr/local/sbin/podlab-run" <<'EOF'
#!/bin/bash
# Runs /mnt/podlab-work/run.sh (written by stock-vm.sh on the host) as the
# guest's user; its output goes to the podlab.out port, then "boot <s>",
# "status <n>" lines to podlab.status, then the guest powers off.
set -u
work=/mnt/podlab-work
out=/dev/virtio-ports/podlab.out
status=/dev/virtio-ports/podlab.status
off() { sync; systemctl poweroff --force --force; }
trap off EXIT
# Paths the host put on the work disk appear where they are on the host.
while read -r p; do
  [ -n "$p" ] || continue
  mkdir -p "$p" && mount --bind "$work/root$p" "$p" || { echo "status 125 bind $p" > "$status"; exit; }
done < "$work/mounts"
systemctl is-system-running --wait >/dev/null 2>&1
echo "boot $(cut -d' ' -f1 /proc/uptime)" > "$status"
. "$work/run.env"
start=$(cut -d' ' -f1 /proc/uptime)
runuser -u "$GUEST_USER" -- env -i HOME="/home/$GUEST_USER" USER="$GUEST_USER" LOGNAME="$GUEST_USER" \
  LANG=C.UTF-8 TERM=dumb PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'cd "$1" && . /mnt/podlab-work/run.sh' - "$REPO" </dev/null >"$out" 2>&1
rc=$?
echo "cmd $start $(cut -d' ' -f1 /proc/uptime)" > "$status"
echo "status $rc" > "$status"
EOF
  chmod 0755 "$root/usr/local/sbin/podlab-run"
  chroot "$root" systemctl enable podlab-run.service 2>/dev/null
}
# --- end recipe ---

apt_packages() {
  # setup.sh's packages for its widest purpose (critest's): the guest
  # gets them in the image, never by apt.
  "$repo/scripts/setup.sh" --apt-packages critest
}

recipe_hash() {
  {
    sed -n '/^# --- recipe/,/^# --- end recipe/p' "$self"
    apt_packages
    go version
  } | sha256sum | cut -c1-16
}

# The Debian mirror the host's apt uses (deb822 URIs: or one-line deb).
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk -v suite="$SUITE" '
      /^URIs:/ { uri = $2 } /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite && uri ~ /debian\/?$/) { print uri; exit } }
      /^deb / { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { u = $i; if ($(i+1) == suite && u ~ /debian\/?$/) { print u; exit } } }
    ' "$f"
  done | head -n1
}

need() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} on the host"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

image_dir() { echo "$cache/$(recipe_hash)"; }

build() {
  [ "$(id -u)" = 0 ] || die "build must run as root (debootstrap, chroot)"
  local dir; dir=$(image_dir)
  if [ -f "$dir/done" ]; then
    say "image $dir is built"
    return
  fi
  need debootstrap qemu-system-x86 qemu-utils e2fsprogs
  mkdir -p "$cache"
  exec 9>"$cache/.build.lock"
  flock 9
  [ -f "$dir/done" ] && return
  local t0 t; t0=$(now)
  local url; url=$(mirror)
  [ -n "$url" ] || die "no Debian $SUITE mirror in /etc/apt/sources.list*"
  local tmp="$dir.tmp"
  rm -rf "$tmp"; mkdir -p "$tmp/rootfs"
  local include
  include=$(printf '%s,' "${BASE_PACKAGES[@]}" $(apt_packages)); include=${include%,}
  say "debootstrap $SUITE from $url into $tmp/rootfs"
  t=$(now)
  # Services do not start in the chroot (systemctl ignores start requests there).
  if ! debootstrap --arch=amd64 --components=main --include="$include" "$SUITE" "$tmp/rootfs" "$url" >"$tmp/debootstrap.log" 2>&1; then
    tail -n 30 "$tmp/debootstrap.log" >&2
    die "debootstrap failed (log: $tmp/debootstrap.log)"
  fi
  say "debootstrap: $(since "$t") s"
  t=$(now)
  configure_rootfs "$tmp/rootfs"
  cp "$tmp/rootfs"/boot/vmlinuz-* "$tmp/vmlinuz"
  cp "$tmp/rootfs"/boot/initrd.img-* "$tmp/initrd.img"
  ls "$tmp/rootfs/boot" | sed -n 's/^vmlinuz-//p' > "$tmp/kernel-version"
  rm -rf "$tmp/rootfs"/var/cache/apt/archives/*.deb
  truncate -s "$IMAGE_SIZE" "$tmp/rootfs.img"
  mkfs.ext4 -q -L podlab-root -d "$tmp/rootfs" "$tmp/rootfs.img"
  rm -rf "$tmp/rootfs"
  say "configure and image: $(since "$t") s"
  touch "$tmp/done"
  rm -rf "$dir"; mv "$tmp" "$dir"
  # Images of older recipes are never booted again.
  find "$cache" -mindepth 1 -maxdepth 1 -type d -regextype egrep -regex '.*/[0-9a-f]{16}(\.tmp)?' \
    ! -path "$dir" -exec rm -rf {} +
  say "built $dir (kernel $(cat "$dir/kernel-version")) in $(since "$t0") s"
}

# warm_go STAGE_REPO: fill the guest's Go caches on the host, with the same
# Go and the same paths the guest uses: the clone's modules, its build (as
# make build compiles it), its test packages, and setup.sh's Go builds.
warm_go() {
  local stage_repo=$1
  export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOFLAGS=-mod=mod GOTOOLCHAIN=local
  mkdir -p "$GOMODCACHE" "$GOCACHE" "$cache/go/bin"
  (
    cd "$repo"
    go mod download
    make -s build BIN="$cache/go/bin" >/dev/null
    go list -tags seccomp -test -export ./... >/dev/null
    # demo-image.sh's static tlsprobe
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$cache/go/bin/tlsprobe" ./test/tlsprobe
  )
  # setup.sh's own Go steps (CNI plugins, crictl, critest), from a copy of
  # the clone with no bin/podlab (so it imports no image on the host).
  CNI_BIN_DIR=$cache/go/bin/cni CRICTL_BIN_DIR=$cache/go/bin "$stage_repo/scripts/setup.sh" critest >/dev/null
  # bench-peers.sh's cnitool, where PODLAB_PEERS_CACHE=$cache/go/bin/peers
  # finds it: its module's dependencies are not the clone's, so the
  # offline guest cannot build it.
  local cni; cni=$(awk '$1 == "github.com/containernetworking/cni" { print $2; exit }' "$repo/go.mod")
  [ -x "$cache/go/bin/peers/cnitool-$cni/cnitool" ] ||
    (cd / && GOBIN=$cache/go/bin/peers/cnitool-$cni GOFLAGS= go install "github.com/containernetworking/cni/cnitool@$cni")
  unset GOMODCACHE GOCACHE GOFLAGS GOTOOLCHAIN
  # The guest's user owns the caches (root in the guest writes too).
  chown -R "$GUEST_UID:$GUEST_UID" "$cache/go/mod" "$cache/go/build"
}

run() {
  [ "$(id -u)" = 0 ] || die "run must run as root (it builds the image if needed)"
  local reboot=0
  while [ $# -gt 0 ]; do
    case $1 in
      --reboot) reboot=1; shift ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  [ $# -gt 0 ] || die "usage: $0 run [--reboot] -- CMD..."
  local t0 t; t0=$(now)
  build
  local dir; dir=$(image_dir)
  local tmp; tmp=$(mktemp -d /var/tmp/stock-vm.XXXXXX)
  local qpid=""
  trap '[ -z "$qpid" ] || kill "$qpid" 2>/dev/null; rm -rf "$tmp"' EXIT
  t=$(now)
  local stage=$tmp/work
  mkdir -p "$stage/root$repo"
  # A copy of the clone as it is (tracked and untracked files, not ignored
  # ones such as bin/), owned by the guest's user.
  (cd "$repo" && git ls-files -z -co --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) |
    tar -xf - -C "$stage/root$repo"
  chown -R "$GUEST_UID:$GUEST_UID" "$stage/root$repo"
  say "copy of the clone: $(since "$t") s"
  t=$(now)
  warm_go "$stage/root$repo" >"$tmp/warm.log" 2>&1 || { cat "$tmp/warm.log" >&2; die "warming the Go caches failed"; }
  say "warm Go caches on the host: $(since "$t") s"
  t=$(now)
  # /var/cache/podlab as on the host: the Go caches with setup.sh's tools
  # built from them (CNI plugins, crictl, critest: linking them under TCG
  # takes minutes; scripts/guest-critest.sh installs them), and the
  # kubelet and containerd builds of scripts/build-kubelet.sh and
  # build-containerd.sh when there are some (hard links, no copy).
  mkdir -p "$stage/root/var/cache/podlab/stock-vm"
  cp -al "$cache/go" "$stage/root/var/cache/podlab/stock-vm/go"
  rm -f "$stage/root/var/cache/podlab/stock-vm/go/bin"/{podlab,podlab-shim,podlab-pause,tlsprobe}
  local k
  for k in /var/cache/podlab/kubelet-*/kubelet /var/cache/podlab/containerd-v*/bin/*; do
    [ -x "$k" ] || continue
    mkdir -p "$stage/root$(dirname "$k")"
    ln "$k" "$stage/root$k"
  done
  # critest's test images (scripts/critest.sh builds them from Debian
  # packages it downloads, which the guest cannot): the registry of the
  # clone's last critest run, when there is one, with its stamp.
  if [ -f "$repo/build/critest/images.stamp" ]; then
    mkdir -p "$stage/root$repo/build/critest"
    cp -a "$repo/build/critest/registry" "$repo/build/critest/images.stamp" "$stage/root$repo/build/critest/"
    chown -R "$GUEST_UID:$GUEST_UID" "$stage/root$repo/build"
  fi
  printf '%s\n' "$repo" /var/cache/podlab > "$stage/mounts"
  printf 'REPO=%q\nGUEST_USER=%q\n' "$repo" "$GUEST_USER" > "$stage/run.env"
  # CMD learns which boot this is (STOCK_VM_BOOT, 1 or 2) from a count in
  # the user's home, on the overlay that both boots share.
  # A CMD that hangs is only killed by the host's timeout, with nothing
  # said of why: a watchdog in the guest prints what is running (state,
  # wait channel, kernel stacks of tasks in D state), podlab's units and
  # the kernel's last words 150 s before the timeout (counted from boot).
  local watchdog=$(( ${STOCK_VM_TIMEOUT:-5400} - 150 ))
  [ "$watchdog" -ge 60 ] || watchdog=60
  {
    echo 'STOCK_VM_BOOT=$(( $(cat "$HOME/.stock-vm-boot" 2>/dev/null || echo 0) + 1 ))'
    echo 'echo "$STOCK_VM_BOOT" > "$HOME/.stock-vm-boot"'
    echo 'export STOCK_VM_BOOT'
    cat <<WATCHDOG
( sleep $watchdog
  echo "stock-vm watchdog: CMD still runs after $watchdog s; the host's timeout kills the guest within 150 s. What runs:"
  sudo ps -eo pid,ppid,stat,wchan:32,etimes,args --sort=start_time | grep -v ' \[.*\]\$'
  for p in \$(ps -eo pid=,stat= | awk '\$2 ~ /D/ {print \$1}'); do echo "-- kernel stack of \$p (D):"; sudo cat /proc/\$p/stack; done
  sudo systemctl list-units --all --no-pager 'podlab*' 'kubepods*'
  echo "-- kernel log, last 60 lines:"; sudo dmesg | tail -n 60 ) </dev/null >&2 &
WATCHDOG
    printf 'exec'; printf ' %q' "$@"; echo
  } > "$stage/run.sh"
  local size
  size=$(du -sm "$stage" | cut -f1)
  truncate -s "$((size * 2 + 8192))M" "$tmp/work.img"
  mkfs.ext4 -q -L podlab-work -d "$stage" "$tmp/work.img"
  rm -rf "$stage"
  qemu-img create -q -f qcow2 -b "$dir/rootfs.img" -F raw "$tmp/root.qcow2"
  say "work disk (${size} MiB) and overlay: $(since "$t") s"
  local rc n boots=1
  [ "$reboot" = 1 ] && boots=2
  for n in $(seq "$boots"); do
    boot_guest "$dir" "$tmp" "$n"
    rc=$(awk '$1 == "status" {print $2}' "$tmp/status.$n")
    [ "$rc" = 0 ] || break
    [ "$n" = "$boots" ] || say "rebooting the guest (the same disks)"
  done
  say "total $(since "$t0") s"
  exit "$rc"
}

# boot_guest DIR TMP N: boot the guest (the N-th time) from the overlay and
# work disk in TMP, streaming CMD's output, until it powers off.
boot_guest() {
  local dir=$1 tmp=$2 n=$3 t qrc=0
  : > "$tmp/out.$n"; : > "$tmp/status.$n"
  t=$(now)
  timeout "${STOCK_VM_TIMEOUT:-5400}" qemu-system-x86_64 -accel tcg -cpu max \
    -smp "${STOCK_VM_CPUS:-2}" -m "${STOCK_VM_MEM:-4G}" \
    -display none -monitor none -no-reboot -nic none \
    -kernel "$dir/vmlinuz" -initrd "$dir/initrd.img" \
    -append "root=LABEL=podlab-root rw console=ttyS0 quiet" \
    -drive "file=$tmp/root.qcow2,if=virtio,format=qcow2" \
    -drive "file=$tmp/work.img,if=virtio,format=raw" \
    -device virtio-serial-pci \
    -chardev "file,id=out,path=$tmp/out.$n" -device virtserialport,chardev=out,name=podlab.out \
    -chardev "file,id=status,path=$tmp/status.$n" -device virtserialport,chardev=status,name=podlab.status \
    -serial "file:$tmp/console.$n.log" &
  qpid=$!
  tail -n +1 -f --pid="$qpid" "$tmp/out.$n" &
  local tpid=$!
  wait "$qpid" || qrc=$?
  qpid=""
  wait "$tpid" || true
  [ "${STOCK_VM_CONSOLE:-0}" = 1 ] && cat "$tmp/console.$n.log" >&2
  local boot cmd
  boot=$(awk '$1 == "boot" {print $2}' "$tmp/status.$n")
  cmd=$(awk '$1 == "cmd" {printf "%.1f", $3 - $2}' "$tmp/status.$n")
  say "qemu, boot $n: $(since "$t") s (guest booted in ${boot:-?} s, CMD ran ${cmd:-?} s)"
  if ! grep -q '^status ' "$tmp/status.$n"; then
    tail -n 40 "$tmp/console.$n.log" >&2
    die "the guest gave no exit status (qemu exit $qrc; console above)"
  fi
}

case ${1:-} in
  build) build ;;
  run)
    shift
    run "$@" ;;
  *) echo "usage: $0 build | run [--reboot] -- CMD..." >&2; exit 2 ;;
esac
