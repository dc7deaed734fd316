#!/usr/bin/env bash
# Fails if a command-line file in tools/ reaches below the libraries it should wire
# together: only the tracker and query commands (the tracker's own front ends) and
# kestrel-device's main (the runtime's peer) may include rpc/ headers; every other
# command talks to host/, tuner/ and ops/.
set -euo pipefail
tools_dir="$1"
allowed='^(cmd_tracker\.cpp|cmd_query\.cpp|kestrel_device_main\.cpp)$'
status=0
for file in "$tools_dir"/*.h "$tools_dir"/*.cpp; do
  name=$(basename "$file")
  if [[ "$name" =~ $allowed ]]; then continue; fi
  if grep -n '#include "kestrel/rpc/' "$file"; then
    echo "FAIL: tools/$name includes an rpc/ header (only the tracker and query commands may)"
    status=1
  fi
done
[ $status -eq 0 ] && echo "tools/: no command below host/ and tuner/ except tracker, query and kestrel-device"
exit $status
