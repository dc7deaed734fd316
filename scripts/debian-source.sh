# Sourced by the scripts that build libraries from Debian's own source packages
# (scripts/build-riscv64-deps.sh, scripts/build-mbedtls.sh, scripts/build-capnp.sh). Needs
# scripts/apt-retry.sh sourced first (APT_TRIES, APT_DELAY, apt_update, apt_install).
# unpacked_source and cmake_install_triple read the calling script's `work` (its scratch
# folder), `src`, `jobs` and `compiler_of`.
#
# `debian_source WORK PACKAGE...` fetches the source packages with `apt-get source` into
# WORK/src (unpacked, Debian's patches applied: one folder per package), from the mirrors
# apt already uses, through a private apt state under WORK/apt: deb-src entries made from
# the system's deb entries; the system's apt configuration is not changed. Retried when
# the mirror hiccups (the n-th retry waits n times APT_DELAY seconds); returns non-zero
# when every try failed.
debian_source() {
  local work="$1" f try
  shift
  mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/sources.list.d" "$work/src"
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && sed 's/^Types:.*/Types: deb-src/' "$f" > "$work/apt/sources.list.d/$(basename "$f")"
  done
  if [ -f /etc/apt/sources.list ]; then
    sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list > "$work/apt/sources.list.d/list.list"
  fi
  local apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/apt/sources.list.d"
                  -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
                  -o APT::Sandbox::User=root)
  for try in $(seq 1 "$APT_TRIES"); do
    if apt-get "${apt_opts[@]}" -qq update && (cd "$work/src" && apt-get "${apt_opts[@]}" -qq source "$@"); then
      return 0
    fi
    echo "debian-source: fetching the source packages $* failed (try $try of $APT_TRIES)" >&2
    # A half-unpacked folder from the failed try would be taken for the package.
    rm -rf "${work:?}/src" && mkdir -p "$work/src"
    [ "$try" -lt "$APT_TRIES" ] && sleep $((try * APT_DELAY))
  done
  echo "debian-source: could not fetch the sources of $*" >&2
  return 1
}

# `pending_triples NAME BASE STAMPFILE TRIPLE...` leaves in the array `todo` the triples
# whose prefix BASE/NAME-TRIPLE lacks a STAMPFILE holding `stamp_of TRIPLE` (the calling
# script's function; its `compiler_of TRIPLE` names the compiler, which must be installed).
# Returns non-zero, saying so, when a compiler is missing.
pending_triples() {
  local name="$1" base="$2" stampfile="$3" triple stamp cc
  shift 3
  todo=()
  for triple in "$@"; do
    cc=$(compiler_of "$triple") || return 1  # an unknown triple, named by compiler_of
    stamp=$(stamp_of "$triple")
    if [ -f "$base/$name-$triple/$stampfile" ] && [ "$(cat "$base/$name-$triple/$stampfile")" = "$stamp" ]; then
      echo "build-$name: present in $base/$name-$triple"
    else
      command -v "${cc%% *}" > /dev/null || { echo "build-$name: ${cc%% *} not found: run scripts/setup-cross.sh" >&2; return 1; }
      todo+=("$triple")
    fi
  done
}

# `install_build_tools [COMMAND:PACKAGE...]` installs what a source build needs beyond the
# compilers when it is missing (scripts/setup.sh and setup-cross.sh install it; a build
# started on its own may come here without them): dpkg-source, cmake, ninja, and each
# COMMAND given from its PACKAGE.
install_build_tools() {
  local missing=() pair
  command -v dpkg-source > /dev/null || missing+=(dpkg-dev)
  command -v cmake > /dev/null || missing+=(cmake)
  command -v ninja > /dev/null || missing+=(ninja-build)
  for pair in "$@"; do
    command -v "${pair%%:*}" > /dev/null || missing+=("${pair#*:}")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    apt_update
    apt_install "${missing[@]}" || return 1
  fi
}

# `build_step NAME LOG LABEL COMMAND...` runs COMMAND with its output appended to LOG,
# saying "build-NAME: LABEL"; when it fails, shows the log's end and exits.
build_step() {
  local name="$1" log="$2" label="$3"
  shift 3
  echo "build-$name: $label"
  "$@" >> "$log" 2>&1 || { tail -30 "$log" >&2; echo "build-$name: $label failed" >&2; exit 1; }
}

# `unpacked_source NAME PACKAGE VERSION FILE` prints the folder of PACKAGE's source that
# debian_source unpacked under $work/src, after checking that it holds FILE; says so on
# stderr when the mirror gave another version than VERSION (apt-cache's candidate, which
# the build then does not match). Returns non-zero, saying why, without such a folder.
unpacked_source() {
  local name="$1" package="$2" version="$3" file="$4" src fetched
  src=$(echo "$work"/src/"$package"-*/)
  [ -f "$src/$file" ] || { echo "build-$name: no $package source in $work/src" >&2; return 1; }
  fetched=$(cd "$work/src" && ls "$package"_*.dsc | sed "s/^${package}_\(.*\)\.dsc\$/\1/")
  if [ -n "$version" ] && [ "$fetched" != "$version" ]; then
    echo "build-$name: the mirror gave $package $fetched, apt-cache says $version: building $fetched" >&2
  fi
  echo "$src"
}

# `cmake_install_triple NAME TRIPLE PREFIX LANG FLAGS [TOOLCHAIN_LINE...] -- [CMAKE_ARG...]`
# configures, builds and installs the CMake project in $src for TRIPLE into PREFIX (made
# afresh), with Ninja in $work/build-TRIPLE and $jobs jobs, each step through build_step
# (logged to $work/build.log). Its toolchain file names the triple's compiler for LANG (C
# or CXX; `compiler_of TRIPLE`, whose extra flags are appended to FLAGS), position
# independent code, Linux as the system of a cross build, and each TOOLCHAIN_LINE.
cmake_install_triple() {
  local name="$1" triple="$2" prefix="$3" lang="$4" flags="$5" cc extra="" toolchain
  shift 5
  cc=$(compiler_of "$triple")
  [ "$cc" = "${cc%% *}" ] || extra=" ${cc#* }"
  toolchain="$work/toolchain-$triple.cmake"
  {
    echo "set(CMAKE_${lang}_COMPILER ${cc%% *})"
    echo "set(CMAKE_POSITION_INDEPENDENT_CODE ON)"
    [ "$triple" = native ] || echo "set(CMAKE_SYSTEM_NAME Linux)"
    while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
      echo "$1"
      shift
    done
  } > "$toolchain"
  [ "$#" -eq 0 ] || shift  # the --
  rm -rf "$prefix"
  mkdir -p "$prefix"
  build_step "$name" "$work/build.log" "$triple: configure" cmake -S "$src" -B "$work/build-$triple" -G Ninja \
    -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=None "-DCMAKE_${lang}_FLAGS=$flags$extra" \
    -DCMAKE_INSTALL_PREFIX="$prefix" "$@"
  build_step "$name" "$work/build.log" "$triple: build" cmake --build "$work/build-$triple" -j "$jobs"
  build_step "$name" "$work/build.log" "$triple: install" cmake --install "$work/build-$triple"
}
