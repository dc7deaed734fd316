#!/usr/bin/env bash
# One-command deployment of the device runtime: picks the build for the board's
# architecture, fills in packaging/kestrel-device.service and installs both with the
# token (and the tracker's certificate) over ssh, then starts the service; or writes all
# of it with an install.sh into a folder for boards reached some other way. The board
# half is packaging/install.sh. docs/deployment.md has the walk-through.
#   scripts/deploy-board.sh pi@rpi4-a --tracker 192.168.1.10:9190 --key rpi4 --token-file /etc/kestrel/token
#   scripts/deploy-board.sh pi@rpi4-a --uninstall
#   scripts/deploy-board.sh --to out/ --arch armv7 --tracker 192.168.1.10:9190 --key rpi3
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

usage() {
  cat <<'EOF'
usage: scripts/deploy-board.sh [user@]board --tracker HOST:PORT --key KEY [options]
       scripts/deploy-board.sh [user@]board --uninstall [--purge] [options]
       scripts/deploy-board.sh --to DIR --tracker HOST:PORT --key KEY --arch ARCH [options]

Installs the Kestrel device runtime on a board over ssh and starts it under systemd:
  /usr/local/bin/kestrel-device                 the build for the board's `uname -m`
  /etc/kestrel/token                            --token-file, mode 600, owned by the unit's user
  /etc/kestrel/tracker.pem                      --tls-ca, mode 644
  /etc/systemd/system/kestrel-device.service    packaging/kestrel-device.service, filled in
then `systemctl daemon-reload` and `systemctl enable --now kestrel-device` (a restart
when it already ran), and checks the service stays up. Running it again updates the
binary and the settings.

what to run:
  [user@]board          the board, as ssh knows it (a name from ~/.ssh/config works)
  --to DIR              instead of a board: write the binary, the filled-in unit, the
                        token/CA files and install.sh into DIR, for boards without ssh
                        or without systemd; on the board run `sudo sh install.sh` in
                        the copied folder (without systemd it prints the command that
                        starts the runtime). Needs --arch or --binary
  --tracker HOST:PORT   the tracker the board connects to (required); use a numeric
                        address for the static build, which cannot resolve names
  --key KEY             the pool the board joins, e.g. rpi4 (required)
  --name NAME           the board's name in the pool (default: its host name, %H)
  --token-file FILE     the token, a file on this host; installed as /etc/kestrel/token
  --tls-ca PEM          the tracker's certificate (or its CA), a file on this host;
                        installed as /etc/kestrel/tracker.pem
  --device-option ARG   one more argument for kestrel-device (repeatable), e.g.
                        --device-option --no-tls, or --device-option --cpus --device-option 2,3
  --user USER           the unit's User= (default: kestrel, created as a system user
                        when missing; root works too)

which binary:
  --arch ARCH           aarch64, armv7, riscv64 or x86_64; default: the board's `uname -m`
                        (aarch64/arm64, armv7l/armv7*/armv8l, riscv64, x86_64) asked over ssh
  --static              aarch64 only: the fully static build (any C library, old glibc)
  --binary FILE         this kestrel-device instead of the cross build; its ELF header
                        must match the board's architecture
  --build               build the missing cross build (scripts/build-device.sh TRIPLE);
                        without it a missing build is an error that names the command
  The builds are those of scripts/build-device.sh: build-device-aarch64-linux-gnu/,
  build-device-aarch64-linux-gnu-static/, build-device-armv7a-linux-gnueabihf/,
  build-device-riscv64-linux-gnu/ and build-device-native/ (x86_64, on an x86_64 host).

removing it:
  --uninstall           stop and disable the service, remove the binary and the unit
  --purge               with --uninstall: remove /etc/kestrel (token, certificate) and
                        /var/cache/kestrel too (the user stays)

how to reach the board:
  --ssh-option OPT      an ssh option, passed as `-o OPT` (repeatable), e.g.
                        --ssh-option Port=2222 --ssh-option IdentityFile=~/.ssh/board
  $KESTREL_DEPLOY_SSH   the ssh command (default: ssh), split on spaces, e.g.
                        KESTREL_DEPLOY_SSH='ssh -p 2222 -i key'. Files travel as a tar
                        stream through it: the board needs sh, tar and mktemp (busybox
                        has them), not scp or rsync
  Root on the board: install.sh runs directly when the ssh user is root (or can write
  --prefix), otherwise through sudo, which asks for the password when this runs on a
  terminal (ssh -t) and needs passwordless sudo otherwise.

for tests and images:
  --prefix DIR          install under DIR on the board instead of / (a chroot, an image,
                        a test's fake root); the unit keeps the board's own paths, no
                        user is created and systemctl runs only with --systemctl
  --systemctl CMD       the systemctl to run on the board (default: systemctl, when the
                        board runs systemd); the tests give a fake that records its calls
  --no-start            install the files only; start nothing
  --help                this text

Exit status: 0 done; 1 the board refused or failed (the message says where); 2 a bad
option or a missing file here.
EOF
}

die() {
  echo "deploy-board: $1" >&2
  exit "${2:-1}"
}
usage_error() { die "$1" 2; }

target=""
to=""
tracker=""
key=""
name=""
token_file=""
tls_ca=""
device_options=()
user="kestrel"
arch=""
static=no
binary=""
build=no
uninstall=no
purge=no
ssh_options=()
prefix="/"
systemctl_cmd=""
no_start=no

need_value() { [ "$2" -ge 2 ] || usage_error "$1 needs a value (--help lists the options)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --to) need_value "$1" $#; to="$2"; shift ;;
    --tracker) need_value "$1" $#; tracker="$2"; shift ;;
    --key) need_value "$1" $#; key="$2"; shift ;;
    --name) need_value "$1" $#; name="$2"; shift ;;
    --token-file) need_value "$1" $#; token_file="$2"; shift ;;
    --tls-ca) need_value "$1" $#; tls_ca="$2"; shift ;;
    --device-option) need_value "$1" $#; device_options+=("$2"); shift ;;
    --user) need_value "$1" $#; user="$2"; shift ;;
    --arch) need_value "$1" $#; arch="$2"; shift ;;
    --static) static=yes ;;
    --binary) need_value "$1" $#; binary="$2"; shift ;;
    --build) build=yes ;;
    --uninstall) uninstall=yes ;;
    --purge) purge=yes ;;
    --ssh-option) need_value "$1" $#; ssh_options+=("$2"); shift ;;
    --prefix) need_value "$1" $#; prefix="$2"; shift ;;
    --systemctl) need_value "$1" $#; systemctl_cmd="$2"; shift ;;
    --no-start) no_start=yes ;;
    --help | -h) usage; exit 0 ;;
    -*) usage_error "unknown option '$1' (--help lists them)" ;;
    *)
      [ -z "$target" ] || usage_error "two boards given ('$target' and '$1'): deploy one at a time"
      target="$1" ;;
  esac
  shift
done

# --- what was asked ---------------------------------------------------------------------

if [ -n "$to" ] && [ -n "$target" ]; then usage_error "give a board or --to DIR, not both"; fi
if [ -z "$to" ] && [ -z "$target" ]; then usage_error "no board: give [user@]board, or --to DIR (--help)"; fi
[ "$purge" = no ] || [ "$uninstall" = yes ] || usage_error "--purge goes with --uninstall"
if [ "$uninstall" = yes ] && [ -n "$to" ]; then
  usage_error "--uninstall works over ssh; with a --to folder run 'sudo sh install.sh --uninstall' on the board"
fi
if [ -n "$to" ] && { [ "$prefix" != / ] || [ -n "$systemctl_cmd" ] || [ "$no_start" = yes ]; }; then
  usage_error "--prefix, --systemctl and --no-start act on the board: with --to, give them to install.sh there"
fi
case "$prefix" in /*) ;; *) usage_error "--prefix wants an absolute path on the board, not '$prefix'" ;; esac

# Values that go into the unit's ExecStart line: no spaces, quotes or systemd specifiers.
safe_word='^[A-Za-z0-9][A-Za-z0-9._-]*$'
if [ "$uninstall" = no ]; then
  [ -n "$tracker" ] || usage_error "no --tracker HOST:PORT (the tracker the board connects to)"
  [ -n "$key" ] || usage_error "no --key KEY (the pool the board joins, e.g. rpi4)"
  if [[ ! "$tracker" =~ ^([A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})$ ]] ||
    [ "${BASH_REMATCH[2]}" -lt 1 ] || [ "${BASH_REMATCH[2]}" -gt 65535 ]; then
    usage_error "--tracker '$tracker' is not HOST:PORT (a host name or address, a port from 1 to 65535), e.g. 192.168.1.10:9190"
  fi
  [[ "$key" =~ $safe_word ]] || usage_error "--key '$key' may hold only letters, digits, '.', '_' and '-'"
  [ -z "$name" ] || [[ "$name" =~ $safe_word ]] ||
    usage_error "--name '$name' may hold only letters, digits, '.', '_' and '-'"
  [[ "$user" =~ ^[a-z_][a-z0-9_-]*$ ]] || usage_error "--user '$user' is not a user name"
  for opt in "${device_options[@]}"; do
    [[ "$opt" =~ ^[A-Za-z0-9._,:=/+-]+$ ]] ||
      usage_error "--device-option '$opt' may hold only letters, digits and . _ , : = / + -"
  done
  if [ -n "$token_file" ]; then
    { [ -f "$token_file" ] && [ -r "$token_file" ]; } || usage_error "--token-file '$token_file': no such readable file here"
    [ -s "$token_file" ] || usage_error "--token-file '$token_file' is empty"
  fi
  if [ -n "$tls_ca" ]; then
    { [ -f "$tls_ca" ] && [ -r "$tls_ca" ]; } || usage_error "--tls-ca '$tls_ca': no such readable file here"
    grep -q -- "-----BEGIN CERTIFICATE-----" "$tls_ca" || usage_error "--tls-ca '$tls_ca' holds no PEM certificate"
  fi
fi
if [ -n "$arch" ]; then
  case "$arch" in aarch64 | armv7 | riscv64 | x86_64) ;; *) usage_error "--arch '$arch': aarch64, armv7, riscv64 or x86_64" ;; esac
fi
[ "$static" = no ] || [ -z "$arch" ] || [ "$arch" = aarch64 ] || usage_error "--static is for aarch64 only (Android phones)"

# --- the ssh side -------------------------------------------------------------------------

read -r -a ssh_cmd <<< "${KESTREL_DEPLOY_SSH:-ssh}"
[ ${#ssh_cmd[@]} -gt 0 ] || ssh_cmd=(ssh)
# ssh keeps the first value of each option: the user's come first, the defaults after.
for opt in "${ssh_options[@]}"; do ssh_cmd+=(-o "$opt"); done
ssh_cmd+=(-o ConnectTimeout=15)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Single quotes for the board's sh.
shell_quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# remote [-t] COMMAND: runs COMMAND on the board, returning its status. ssh's own failure
# (255: no route, refused, no key) is reported here with what ssh said; callers (often in
# a subshell) then end with `|| unreachable_or die ...`.
remote() {
  local extra=()
  if [ "$1" = -t ]; then extra=(-t); shift; fi
  local rc=0
  # Through sh -c, whatever the login shell of the board's user (fish, csh).
  "${ssh_cmd[@]}" "${extra[@]}" "$target" "sh -c $(shell_quote "$1")" 2> "$work/ssh.err" || rc=$?
  if [ "$rc" -eq 255 ]; then
    echo "deploy-board: cannot reach $target over ssh: $(grep -v '^Warning: Permanently added' "$work/ssh.err" |
      tail -2 | paste -sd ' ')" >&2
    return 255
  fi
  grep -v '^Warning: Permanently added' "$work/ssh.err" >&2 || true
  return "$rc"
}
# After a failed remote: exit at once when the board was unreachable (already said),
# else die with the message given.
unreachable_or() {
  local rc=$?
  [ "$rc" -ne 255 ] || exit 1
  shift
  die "$@"
}

# --- which binary ---------------------------------------------------------------------

# The ELF e_machine of FILE as our arch name ("" when not ELF or another machine).
elf_arch() {
  local magic machine
  magic=$(od -An -tx1 -N4 "$1" 2> /dev/null | tr -d ' \n')
  [ "$magic" = 7f454c46 ] || { echo ""; return; }
  machine=$(od -An -tu2 -j18 -N2 --endian=little "$1" | tr -d ' ')
  case "$machine" in
    183) echo aarch64 ;;
    40) echo armv7 ;;
    243) echo riscv64 ;;
    62) echo x86_64 ;;
    *) echo "machine-$machine" ;;
  esac
}

pick_binary() {
  local triple variant="" dir
  case "$arch" in
    aarch64) triple=aarch64-linux-gnu ;;
    armv7) triple=armv7a-linux-gnueabihf ;;
    riscv64) triple=riscv64-linux-gnu ;;
    x86_64)
      [ "$(uname -m)" = x86_64 ] ||
        die "no x86_64 build on this $(uname -m) host: build one on an x86_64 machine and pass --binary" 2
      triple=native ;;
  esac
  [ "$static" = no ] || variant="--static"
  dir="$root/build-device-$triple${variant:+-static}"
  binary="$dir/kestrel-device"
  if [ ! -f "$binary" ]; then
    local cmd="scripts/build-device.sh $triple${variant:+ $variant}"
    if [ "$build" = no ]; then
      die "no $arch runtime at ${binary#"$root"/}: build it with '$cmd' (scripts/setup-cross.sh first, once), or pass --build" 2
    fi
    echo "deploy-board: building it: $cmd"
    "$root/scripts/build-device.sh" "$triple" ${variant:+"$variant"} || die "'$cmd' failed" 2
    [ -f "$binary" ] || die "'$cmd' built no ${binary#"$root"/} (is KESTREL_DEVICE_BUILD_DIR set? then pass --binary)" 2
  fi
}

if [ "$uninstall" = no ]; then
  if [ -n "$binary" ]; then
    [ -f "$binary" ] || usage_error "--binary '$binary': no such file"
    if [ -z "$arch" ] && [ -n "$to" ]; then arch=$(elf_arch "$binary"); fi
  fi
  if [ -z "$arch" ]; then
    [ -n "$target" ] || usage_error "--to needs --arch (aarch64, armv7, riscv64 or x86_64) or --binary"
    machine=$(remote "uname -m" < /dev/null) || unreachable_or die "'uname -m' failed on $target"
    case "$machine" in
      aarch64 | arm64) arch=aarch64 ;;
      armv7* | armv8l) arch=armv7 ;;
      riscv64) arch=riscv64 ;;
      x86_64 | amd64) arch=x86_64 ;;
      armv6* | armv5*) die "$target is $machine (a Raspberry Pi Zero or 1?): Kestrel builds for ARMv7 and newer only" ;;
      *) die "$target is '$machine': Kestrel builds for aarch64, armv7, riscv64 and x86_64" ;;
    esac
    echo "deploy-board: $target is $machine"
  fi
  [ "$static" = no ] || [ "$arch" = aarch64 ] || usage_error "--static is for aarch64 only, and $target is $arch"
  [ -n "$binary" ] || pick_binary
  have=$(elf_arch "$binary")
  [ -n "$have" ] || die "$binary is not an ELF executable" 2
  [ "$have" = "$arch" ] || die "$binary is a $have binary, but the board is $arch" 2
fi

# --- the bundle: what install.sh installs -----------------------------------------------

bundle="${to:-$work/bundle}"
mkdir -p "$bundle"
cp "$root/packaging/install.sh" "$bundle/install.sh"
chmod 755 "$bundle/install.sh"
if [ "$uninstall" = no ]; then
  cp "$binary" "$bundle/kestrel-device"
  chmod 755 "$bundle/kestrel-device"
  token_arg=""
  tls_arg=""
  extra_args=""
  rm -f "$bundle/token" "$bundle/tracker.pem"
  if [ -n "$token_file" ]; then
    (umask 077 && cp "$token_file" "$bundle/token")
    chmod 600 "$bundle/token"
    token_arg=" --token-file /etc/kestrel/token"
  fi
  if [ -n "$tls_ca" ]; then
    cp "$tls_ca" "$bundle/tracker.pem"
    tls_arg=" --tls-ca /etc/kestrel/tracker.pem"
  fi
  for opt in "${device_options[@]}"; do extra_args+=" $opt"; done
  # The template's own header comment gives way to one saying where this came from.
  {
    echo "# Written by scripts/deploy-board.sh from packaging/kestrel-device.service"
    sed -e '1,/^\[Unit\]/{/^#/d}' "$root/packaging/kestrel-device.service"
  } | sed -e "s|@BINDIR@|/usr/local/bin|g" -e "s|@TRACKER@|$tracker|g" -e "s|@KEY@|$key|g" \
    -e "s|@NAME@|${name:-%H}|g" -e "s|@TOKEN_FILE_ARG@|$token_arg|g" -e "s|@TLS_CA_ARG@|$tls_arg|g" \
    -e "s|@EXTRA_ARGS@|$extra_args|g" -e "s|@USER@|$user|g" > "$bundle/kestrel-device.service"
  if grep -q '@[A-Z_]*@' "$bundle/kestrel-device.service"; then
    die "bug: a placeholder left in $bundle/kestrel-device.service: $(grep -o '@[A-Z_]*@' "$bundle/kestrel-device.service" | head -1)"
  fi
fi

if [ -n "$to" ]; then
  echo "deploy-board: wrote $to for $arch: copy the folder to the board and run 'sudo sh install.sh' in it"
  exit 0
fi

# --- over ssh: copy, install, clean up ---------------------------------------------------

installer_args=(--prefix "$prefix")
[ -z "$systemctl_cmd" ] || installer_args+=(--systemctl "$systemctl_cmd")
[ "$no_start" = no ] || installer_args+=(--no-start)
[ "$uninstall" = no ] || installer_args+=(--uninstall)
[ "$purge" = no ] || installer_args+=(--purge)
quoted_args=""
for a in "${installer_args[@]}"; do quoted_args+=" $(shell_quote "$a")"; done

# shellcheck disable=SC2016  # $d is the board's
remote_dir=$(tar -C "$bundle" -cf - . | remote \
  'd=$(mktemp -d /tmp/kestrel-deploy.XXXXXX) && tar -xf - -C "$d" && echo "$d"') ||
  unreachable_or die "could not copy the files to $target (does it have tar and mktemp, and room in /tmp?)"
[[ "$remote_dir" == /tmp/kestrel-deploy.* ]] || die "could not copy the files to $target: got '$remote_dir'"
qdir=$(shell_quote "$remote_dir")
qprefix=$(shell_quote "$prefix")
run_installer="cd $qdir && if [ \"\$(id -u)\" = 0 ] || [ -w $qprefix ]; then sh ./install.sh$quoted_args;"
run_installer+=" else sudo sh ./install.sh$quoted_args; fi; rc=\$?; rm -rf $qdir; exit \$rc"
tty=()
if [ -t 0 ] && [ -t 1 ]; then tty=(-t); fi  # so that sudo can ask for the password
remote "${tty[@]}" "$run_installer" || unreachable_or die "the install on $target failed (its messages above)"
if [ "$uninstall" = yes ]; then
  echo "deploy-board: kestrel-device removed from $target"
else
  echo "deploy-board: kestrel-device ($arch) installed on $target; check it with: kestrel query --tracker $tracker${token_file:+ --token-file $token_file}${tls_ca:+ --tls-ca $tls_ca}"
fi
