#!/usr/bin/env bash
# scripts/deploy-board.sh against an emulated board: a real sshd of our own on a free
# loopback port (its own host key, authorized_keys and client key, in a temporary
# folder; `sshd -D -e -f CONFIG`, StrictModes and PAM off, so root is not needed), the
# board's files under a fake root (--prefix) and a fake systemctl (--systemctl) that
# records its calls and, for `enable --now`, starts the unit's ExecStart line in the
# fake root. The runtime it starts must register with a real tracker (token, TLS and
# --tls-ca), a second deploy must restart it with its new settings, --uninstall (and
# --purge) must leave nothing behind, and a bad tracker address, a missing binary, a
# binary of another architecture and an unreachable board must fail with a clear
# message. Also --to DIR and its install.sh.
#   tests/deploy/deploy_board_test.sh SOURCE_DIR KESTREL_BIN KESTREL_DEVICE_BIN
# Exits 77 (skipped) without openssh-server (scripts/setup.sh installs it); $KESTREL_SSHD
# names another sshd.
set -euo pipefail
src=$(realpath "$1")
kestrel=$(realpath "$2")
device=$(realpath "$3")
deploy="$src/scripts/deploy-board.sh"

sshd="${KESTREL_SSHD:-$(command -v sshd || echo /usr/sbin/sshd)}"
for tool in "$sshd" ssh ssh-keygen; do
  if ! command -v "$tool" > /dev/null; then
    echo "no $tool (the openssh-server and openssh-client packages; scripts/setup.sh installs them): skipped"
    exit 77
  fi
done
if [ "$(uname -m)" != x86_64 ]; then
  echo "the emulated board is this machine and the test deploys as x86_64; this is $(uname -m): skipped"
  exit 77
fi
# As root, sshd separates privileges into an empty directory it insists on.
if [ "$(id -u)" = 0 ] && [ ! -d /run/sshd ]; then
  if ! mkdir -m 755 /run/sshd 2> /dev/null; then
    echo "sshd as root needs /run/sshd and it cannot be made: skipped"
    exit 77
  fi
fi

dir=$(mktemp -d)
pids=()
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  local pid
  # start_sshd and start_tracker run in $(...) subshells: their pids reach here through
  # $dir/pids, not the array (each run left an sshd and a tracker behind before).
  if [ -f "$dir/pids" ]; then
    while read -r pid; do kill "$pid" 2> /dev/null || true; done < "$dir/pids"
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  # A runtime the fake systemctl started and the test did not uninstall.
  if [ -f "$dir/board/run/kestrel-device.pid" ]; then kill "$(cat "$dir/board/run/kestrel-device.pid")" 2> /dev/null || true; fi
  wait 2> /dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
status=0
fail() {
  echo "FAIL: $*"
  status=1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- the board: sshd -------------------------------------------------------------------
me=$(id -un)
ssh-keygen -q -t ed25519 -N "" -f "$dir/host_key"
ssh-keygen -q -t ed25519 -N "" -f "$dir/client_key"
cp "$dir/client_key.pub" "$dir/authorized_keys"
start_sshd() {
  local _ port
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    cat > "$dir/sshd_config" << EOF
Port $port
ListenAddress 127.0.0.1
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
PidFile $dir/sshd.pid
AllowUsers $me
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
EOF
    "$sshd" -t -f "$dir/sshd_config" || { echo "sshd refuses its configuration: skipped"; exit 77; }
    "$sshd" -D -e -f "$dir/sshd_config" > "$dir/sshd.log" 2>&1 &
    pids+=($!)
    echo "$!" >> "$dir/pids"
    sleep 0.3
    if kill -0 "${pids[-1]}" 2> /dev/null; then
      echo "$port"
      return 0
    fi
  done
  echo "cannot start sshd: $(tail -3 "$dir/sshd.log")" >&2
  return 1
}
ssh_port=$(start_sshd)
ssh_base="ssh -F /dev/null -i $dir/client_key -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=$dir/known_hosts -o LogLevel=ERROR"
export KESTREL_DEPLOY_SSH="$ssh_base -p $ssh_port"
board="$me@127.0.0.1"
for _ in $(seq 1 50); do
  # shellcheck disable=SC2086
  $KESTREL_DEPLOY_SSH "$board" true 2> "$dir/ssh-probe.err" && break
  sleep 0.2
done
# shellcheck disable=SC2086
$KESTREL_DEPLOY_SSH "$board" true 2> /dev/null || {
  echo "FAIL: cannot log in to our own sshd: $(cat "$dir/ssh-probe.err") / $(tail -3 "$dir/sshd.log")"
  exit 1
}

# The fake root and a systemctl that acts on it: the unit's absolute paths are taken
# inside the fake root, as a chroot would.
root="$dir/board"
mkdir -p "$root" "$dir/bin"
cat > "$dir/bin/systemctl" << EOF
#!/usr/bin/env bash
set -euo pipefail
root='$root'
echo "\$*" >> '$dir/systemctl.log'
unit="\$root/etc/systemd/system/kestrel-device.service"
wants="\$root/etc/systemd/system/multi-user.target.wants/kestrel-device.service"
pidf="\$root/run/kestrel-device.pid"
running() { [ -f "\$pidf" ] && kill -0 "\$(cat "\$pidf")" 2> /dev/null; }
stop() {
  if running; then
    kill "\$(cat "\$pidf")"
    for i in \$(seq 1 50); do running || break; sleep 0.1; done
  fi
  rm -f "\$pidf"
}
start() {
  local argv i
  read -r -a argv <<< "\$(sed -n 's/^ExecStart=//p' "\$unit")"
  for i in "\${!argv[@]}"; do
    case "\${argv[\$i]}" in /*) argv[\$i]="\$root\${argv[\$i]}" ;; esac
    argv[\$i]="\${argv[\$i]//%H/\$(hostname)}"
  done
  mkdir -p "\$root/run"
  setsid "\${argv[@]}" >> "\$root/run/kestrel-device.log" 2>&1 < /dev/null &
  echo \$! > "\$pidf"
}
enable() { mkdir -p "\$(dirname "\$wants")"; ln -sf /etc/systemd/system/kestrel-device.service "\$wants"; }
case "\$*" in
  daemon-reload) ;;
  "enable --now kestrel-device") enable; start ;;
  "enable kestrel-device") enable ;;
  "restart kestrel-device") stop; start ;;
  "disable --now kestrel-device") rm -f "\$wants"; stop ;;
  "is-active --quiet kestrel-device") running ;;
  *) echo "fake systemctl: unexpected '\$*'" >&2; exit 1 ;;
esac
EOF
chmod 755 "$dir/bin/systemctl"

# --- the tracker --------------------------------------------------------------------------
cd "$dir"
echo "deploy-board-test-secret-0123456789" > token && chmod 600 token
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=kestrel-tracker \
  -keyout tracker.key -out tracker.pem 2> /dev/null
start_tracker() {
  local _ port
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    "$kestrel" tracker --host 127.0.0.1 --port "$port" --token-file token --tls-cert tracker.pem \
      --tls-key tracker.key > tracker.log 2>&1 &
    pids+=($!)
    echo "$!" >> "$dir/pids"
    sleep 0.5
    if kill -0 "${pids[-1]}" 2> /dev/null; then
      echo "$port"
      return 0
    fi
  done
  echo "cannot start a tracker: $(cat tracker.log)" >&2
  return 1
}
port=$(start_tracker)
# The names of the devices in the pool, one a line.
names() {
  "$kestrel" query --tracker "127.0.0.1:$port" --token-file token --tls-ca tracker.pem 2> /dev/null |
    awk '$1 == "DEVICE" { n++; next } n == 1 && NF > 0 { print $1 }'
}
wait_registered() {
  local _
  for _ in $(seq 1 75); do
    if names | grep -qxF -- "$1"; then return 0; fi
    sleep 0.2
  done
  return 1
}
wait_gone() {
  local _
  for _ in $(seq 1 75); do
    if ! names | grep -qxF -- "$1"; then return 0; fi
    sleep 0.2
  done
  return 1
}
mode_of() { stat -c %a "$1" 2> /dev/null || echo missing; }

# --- deploy --------------------------------------------------------------------------------
deploy_args=(--tracker "127.0.0.1:$port" --key deploytest --token-file token --tls-ca tracker.pem
  --binary "$device" --prefix "$root" --systemctl "$dir/bin/systemctl")
if ! "$deploy" "$board" "${deploy_args[@]}" --name ssh-board > deploy1.log 2>&1; then
  fail "the deploy failed: $(cat deploy1.log)"
fi
grep -q "127.0.0.1 is x86_64" deploy1.log || fail "the board's architecture was not asked over ssh: $(cat deploy1.log)"
[ "$(mode_of "$root/usr/local/bin/kestrel-device")" = 755 ] ||
  fail "the binary's mode: $(mode_of "$root/usr/local/bin/kestrel-device"), not 755"
cmp -s "$device" "$root/usr/local/bin/kestrel-device" || fail "the installed binary is not the one given"
[ "$(mode_of "$root/etc/kestrel/token")" = 600 ] || fail "the token's mode: $(mode_of "$root/etc/kestrel/token"), not 600"
cmp -s token "$root/etc/kestrel/token" || fail "the installed token differs"
[ "$(mode_of "$root/etc/kestrel/tracker.pem")" = 644 ] || fail "the certificate's mode: $(mode_of "$root/etc/kestrel/tracker.pem")"
unit="$root/etc/systemd/system/kestrel-device.service"
[ "$(mode_of "$unit")" = 644 ] || fail "the unit's mode: $(mode_of "$unit"), not 644"
want="ExecStart=/usr/local/bin/kestrel-device --tracker 127.0.0.1:$port --key deploytest --name ssh-board --token-file /etc/kestrel/token --tls-ca /etc/kestrel/tracker.pem"
grep -qxF "$want" "$unit" || fail "the unit's ExecStart is not '$want': $(grep ExecStart "$unit")"
for line in Restart=always RestartPreventExitStatus=3 User=kestrel WantedBy=multi-user.target; do
  grep -qxF "$line" "$unit" || fail "the unit lacks $line"
done
if grep -q '@[A-Z_]*@' "$unit"; then fail "a placeholder left in the unit: $(grep '@[A-Z_]*@' "$unit")"; fi
if command -v systemd-analyze > /dev/null; then
  # The unit as systemd reads it, its ExecStart pointed into the fake root (verify
  # insists that the command exists); any warning counts, as verify exits 0 on them.
  mkdir -p verify
  sed "s|^ExecStart=/usr/local/bin/|ExecStart=$root/usr/local/bin/|" "$unit" > verify/kestrel-device.service
  if ! systemd-analyze verify --man=no verify/kestrel-device.service > verify.log 2>&1 || [ -s verify.log ]; then
    fail "systemd-analyze verify: $(cat verify.log)"
  fi
else
  echo "no systemd-analyze: the unit's syntax is not checked"
fi
{ grep -qx "daemon-reload" systemctl.log && grep -qx "enable --now kestrel-device" systemctl.log; } ||
  fail "systemctl was not asked to daemon-reload and enable --now: $(cat systemctl.log)"
[ -L "$root/etc/systemd/system/multi-user.target.wants/kestrel-device.service" ] || fail "the unit was not enabled"
wait_registered ssh-board ||
  fail "the deployed runtime did not register: $(tail -5 "$root/run/kestrel-device.log" 2> /dev/null) / $(cat deploy1.log)"
left=$(find /tmp -maxdepth 1 -name 'kestrel-deploy.*' -newer token)
[ -z "$left" ] || fail "the board's temporary folder was left behind: $left"

# A second deploy with another name: the running service restarts with the new unit.
first_pid=$(cat "$root/run/kestrel-device.pid" 2> /dev/null || echo none)
: > systemctl.log
if ! "$deploy" "$board" "${deploy_args[@]}" --arch x86_64 --name ssh-board-2 > deploy2.log 2>&1; then
  fail "the second deploy failed: $(cat deploy2.log)"
fi
grep -qx "restart kestrel-device" systemctl.log || fail "the second deploy did not restart the service: $(cat systemctl.log)"
[ "$(cat "$root/run/kestrel-device.pid" 2> /dev/null)" != "$first_pid" ] || fail "the runtime was not restarted"
wait_registered ssh-board-2 || fail "the redeployed runtime did not register as ssh-board-2: $(tail -5 "$root/run/kestrel-device.log")"
wait_gone ssh-board || fail "the first runtime is still registered"

# --- uninstall -----------------------------------------------------------------------------
if ! "$deploy" "$board" --uninstall --prefix "$root" --systemctl "$dir/bin/systemctl" > uninstall.log 2>&1; then
  fail "--uninstall failed: $(cat uninstall.log)"
fi
for f in usr/local/bin/kestrel-device etc/systemd/system/kestrel-device.service \
  etc/systemd/system/multi-user.target.wants/kestrel-device.service; do
  [ ! -e "$root/$f" ] || fail "--uninstall left /$f"
done
[ -f "$root/etc/kestrel/token" ] || fail "--uninstall without --purge removed the token"
grep -qx "disable --now kestrel-device" systemctl.log || fail "--uninstall did not disable --now: $(cat systemctl.log)"
wait_gone ssh-board-2 || fail "the uninstalled runtime is still registered"
"$deploy" "$board" --uninstall --purge --prefix "$root" --systemctl "$dir/bin/systemctl" > purge.log 2>&1 ||
  fail "--uninstall --purge failed: $(cat purge.log)"
[ ! -e "$root/etc/kestrel" ] || fail "--purge left /etc/kestrel"

# --- clear errors ------------------------------------------------------------------------------
# expect_error NAME PATTERN ARGS...: the deploy fails, and says PATTERN.
expect_error() {
  local what="$1" pattern="$2" rc=0
  shift 2
  "$deploy" "$@" > error.log 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    fail "$what: the deploy succeeded"
  elif ! grep -q -- "$pattern" error.log; then
    fail "$what: the message does not say '$pattern': $(cat error.log)"
  else
    echo "$what: exit $rc, $(head -1 error.log)"
  fi
}
expect_error "a tracker without a port" "is not HOST:PORT" "$board" "${deploy_args[@]}" --tracker 127.0.0.1
expect_error "a tracker with port 0" "is not HOST:PORT" "$board" "${deploy_args[@]}" --tracker "127.0.0.1:0"
expect_error "a missing binary" "no such file" "$board" "${deploy_args[@]}" --binary "$dir/no-such-kestrel-device"
expect_error "a binary for another board" "is a x86_64 binary, but the board is aarch64" \
  "$board" "${deploy_args[@]}" --arch aarch64
expect_error "a missing token file" "no such readable file" "$board" "${deploy_args[@]}" --token-file "$dir/nope"
closed=$(free_port)
KESTREL_DEPLOY_SSH="$ssh_base -p $closed" expect_error "an unreachable board" "cannot reach $board over ssh" \
  "$board" "${deploy_args[@]}"
KESTREL_DEPLOY_SSH="$ssh_base -p $closed" expect_error "an unreachable board, its architecture given" \
  "cannot reach $board over ssh" "$board" "${deploy_args[@]}" --arch x86_64
[ ! -e "$root/usr/local/bin/kestrel-device" ] || fail "a failed deploy installed the binary"

# --- --to DIR and its install.sh ----------------------------------------------------------------
"$deploy" --to out --binary "$device" --tracker "127.0.0.1:$port" --key deploytest --token-file token \
  --device-option --log-level --device-option debug > to.log 2>&1 || fail "--to failed: $(cat to.log)"
for f in kestrel-device kestrel-device.service install.sh token; do [ -f "out/$f" ] || fail "--to did not write $f"; done
[ "$(mode_of out/token)" = 600 ] || fail "--to wrote the token with mode $(mode_of out/token)"
grep -q -- "--name %H --token-file /etc/kestrel/token --log-level debug$" out/kestrel-device.service ||
  fail "--to's unit: $(grep ExecStart out/kestrel-device.service)"
mkdir -p root2
sh out/install.sh --prefix "$dir/root2" > install2.log 2>&1 || fail "install.sh --prefix failed: $(cat install2.log)"
grep -q "not started" install2.log || fail "install.sh under a prefix without --systemctl: $(cat install2.log)"
{ [ "$(mode_of root2/etc/kestrel/token)" = 600 ] && [ -x root2/usr/local/bin/kestrel-device ]; } ||
  fail "install.sh --prefix did not install the files"
sh out/install.sh --prefix "$dir/root2" --uninstall --purge > uninstall2.log 2>&1 || fail "install.sh --uninstall: $(cat uninstall2.log)"
[ -z "$(find root2 -type f)" ] || fail "install.sh --uninstall --purge left: $(find root2 -type f)"

echo "--- what the first deploy said:"
cat deploy1.log
[ "$status" -eq 0 ] && echo "deploy-board.sh over ssh: installed with the right modes and settings, registered, redeployed, uninstalled; the errors are clear"
exit $status
