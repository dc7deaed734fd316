#!/bin/sh
# Installs (or removes) the Kestrel device runtime on the board it runs on. It is the
# board half of scripts/deploy-board.sh, which copies it beside the files it installs:
#   kestrel-device            the runtime for this board's architecture
#   kestrel-device.service    the unit, its settings filled in (packaging/kestrel-device.service)
#   token, tracker.pem        the token and the tracker's certificate, when given
# POSIX sh and the commands of coreutils or busybox only: boards have no bash.
#   sh install.sh [--prefix DIR] [--systemctl CMD] [--no-start]
#   sh install.sh --uninstall [--purge] [--prefix DIR] [--systemctl CMD]
# Run it as root (sudo sh install.sh): it writes /usr/local/bin, /etc/kestrel and
# /etc/systemd/system, creates the unit's user and starts the service.
set -eu

prefix=/
systemctl_cmd=""
start=yes
action=install
purge=no
here=$(cd "$(dirname "$0")" && pwd)

usage() {
  cat <<'EOF'
usage: sh install.sh [--prefix DIR] [--systemctl CMD] [--no-start]
       sh install.sh --uninstall [--purge] [--prefix DIR] [--systemctl CMD]

Installs the Kestrel device runtime from the files beside this script:
  /usr/local/bin/kestrel-device                 (mode 755)
  /etc/kestrel/token, /etc/kestrel/tracker.pem  (600 and 644, owned by the unit's user)
  /etc/systemd/system/kestrel-device.service    (644)
then creates the unit's user (User=) if missing and runs
`systemctl daemon-reload` and `systemctl enable --now kestrel-device` (a restart when
it was running). Without systemd it prints the command that starts the runtime.

  --prefix DIR      install under DIR instead of / (an image, a chroot, a test's fake
                    root); the unit keeps the board's own paths. systemctl is then run
                    only when --systemctl names one, and no user is created
  --systemctl CMD   the systemctl to run (default: systemctl, when systemd is running)
  --no-start        install and enable nothing: only the files
  --uninstall       stop and disable the service, remove the binary and the unit
  --purge           with --uninstall: remove /etc/kestrel and /var/cache/kestrel too
  --help            this text
EOF
}

die() {
  echo "install.sh: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix="$2"; shift ;;
    --systemctl) [ $# -ge 2 ] || die "--systemctl needs a command"; systemctl_cmd="$2"; shift ;;
    --no-start) start=no ;;
    --uninstall) action=uninstall ;;
    --purge) purge=yes ;;
    --help | -h) usage; exit 0 ;;
    *) die "unknown option '$1' (--help lists them)" ;;
  esac
  shift
done
[ "$purge" = no ] || [ "$action" = uninstall ] || die "--purge goes with --uninstall"

root="${prefix%/}"  # "" for /
bin="$root/usr/local/bin/kestrel-device"
etc="$root/etc/kestrel"
unit="$root/etc/systemd/system/kestrel-device.service"

if [ -z "$root" ] && [ "$(id -u)" != 0 ]; then
  die "run me as root: sudo sh $0 (I write /usr/local/bin, /etc and start a system service)"
fi

# The systemctl to drive: the one named, else the system's when systemd runs and the
# install goes to /; empty when there is none (a board without systemd, an image).
if [ -z "$systemctl_cmd" ] && [ -z "$root" ] && command -v systemctl > /dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl_cmd=systemctl
fi
sctl() {
  # shellcheck disable=SC2086  # CMD may carry its own arguments
  $systemctl_cmd "$@"
}

if [ "$action" = uninstall ]; then
  if [ -n "$systemctl_cmd" ] && [ -f "$unit" ]; then
    sctl disable --now kestrel-device || echo "install.sh: could not stop kestrel-device (going on)" >&2
  fi
  rm -f "$bin" "$unit"
  [ -z "$systemctl_cmd" ] || sctl daemon-reload
  if [ "$purge" = yes ]; then
    rm -rf "$etc" "$root/var/cache/kestrel"
    echo "removed kestrel-device, its unit, /etc/kestrel and /var/cache/kestrel${root:+ under $root}"
  else
    echo "removed kestrel-device and its unit${root:+ under $root} (/etc/kestrel stays: --purge removes it)"
  fi
  [ -z "$systemctl_cmd" ] && [ -z "$root" ] && echo "no systemd here: stop a running kestrel-device yourself (kill it)"
  exit 0
fi

[ -f "$here/kestrel-device" ] || die "no kestrel-device beside me in $here"
[ -f "$here/kestrel-device.service" ] || die "no kestrel-device.service beside me in $here"
user=$(sed -n 's/^User=//p' "$here/kestrel-device.service")
[ -n "$user" ] || die "kestrel-device.service has no User= line"

# Does the binary run here at all (the right architecture, the C library it needs)?
"$here/kestrel-device" --version > /dev/null 2>&1 ||
  die "kestrel-device does not run on this board ($(uname -m)): $("$here/kestrel-device" --version 2>&1 | head -1)"

was_active=no
if [ -n "$systemctl_cmd" ] && [ "$start" = yes ] && sctl is-active --quiet kestrel-device 2> /dev/null; then
  was_active=yes
fi

mkdir -p "$root/usr/local/bin" "$etc" "$root/etc/systemd/system"
# A copy then a rename: replacing a running binary in place fails ("text file busy").
cp "$here/kestrel-device" "$bin.new"
chmod 755 "$bin.new"
mv -f "$bin.new" "$bin"
chmod 755 "$etc"
if [ -f "$here/token" ]; then
  (umask 077 && cp "$here/token" "$etc/token.new")
  chmod 600 "$etc/token.new"
  mv -f "$etc/token.new" "$etc/token"
fi
if [ -f "$here/tracker.pem" ]; then
  cp "$here/tracker.pem" "$etc/tracker.pem"
  chmod 644 "$etc/tracker.pem"
fi
cp "$here/kestrel-device.service" "$unit"
chmod 644 "$unit"

# The unit's user, a system account without a home or a shell; it owns the token.
if [ -z "$root" ] && [ "$user" != root ]; then
  if ! id "$user" > /dev/null 2>&1; then
    if command -v useradd > /dev/null 2>&1; then
      useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
    elif command -v adduser > /dev/null 2>&1; then
      adduser -S -D -H "$user"  # busybox
    else
      die "no useradd or adduser to create the user '$user': create it, or deploy with --user root"
    fi
    echo "created the system user $user"
  fi
  [ ! -f "$etc/token" ] || chown "$user" "$etc/token"
fi

exec_line=$(sed -n 's/^ExecStart=//p' "$unit")
if [ -z "$systemctl_cmd" ]; then
  if [ -n "$root" ]; then
    echo "installed under $root; not started (no --systemctl for a prefix)"
  else
    # %H is systemd's host name; without systemd the shell gives it.
    echo "installed; no systemd here: start it with (as user $user)"
    echo "  $(echo "$exec_line" | sed "s/%H/$(hostname)/g")"
  fi
  exit 0
fi
sctl daemon-reload
[ "$start" = yes ] || { echo "installed; not started (--no-start)"; exit 0; }
if [ "$was_active" = yes ]; then
  sctl enable kestrel-device
  sctl restart kestrel-device
else
  sctl enable --now kestrel-device
fi
# A runtime that cannot start (a bad option, exit status 3) is down within a moment.
sleep 2
if ! sctl is-active --quiet kestrel-device; then
  echo "install.sh: kestrel-device did not stay up; see: journalctl -u kestrel-device -n 30" >&2
  command -v journalctl > /dev/null 2>&1 && [ -z "$root" ] && journalctl -u kestrel-device -n 10 --no-pager >&2
  exit 1
fi
echo "kestrel-device is running: $exec_line"
