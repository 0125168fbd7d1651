# serve.sh: sourced by the guest scripts that run `podlab serve` in the
# background (guest-platform, guest-handlers); $serve_pid is its sudo's.

# stop_serve: SIGTERM, and SIGKILL (said, and a failure) if serve is not
# gone in 30 s, so that a serve stuck in its shutdown fails the script
# instead of holding it until the guest's timeout.
stop_serve() {
  [ -n "${serve_pid:-}" ] || return 0
  local st=running rc=0
  sudo kill "$serve_pid" 2>/dev/null || true
  for _ in $(seq 300); do # until sudo (serve's parent, our child) is a zombie or reaped
    st=$(awk '{print $3}' "/proc/$serve_pid/stat" 2>/dev/null) || st=gone
    case $st in Z | gone) break ;; esac
    sleep 0.1
  done
  case $st in
    Z | gone) ;;
    *)
      echo "$(basename "$0"): podlab serve ignored SIGTERM for 30 s: SIGKILL" >&2
      sudo pkill -KILL -P "$serve_pid" || true
      sudo kill -KILL "$serve_pid" || true
      rc=1 ;;
  esac
  wait "$serve_pid" 2>/dev/null || true
  serve_pid=
  return "$rc"
}
