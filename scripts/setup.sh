#!/usr/bin/env bash
# `make setup`: a .venv with the ROS 2 Kilted wheels, the Python dependencies, the interface packages built
# into it and retarget installed editable. Idempotent: each step is skipped while the inputs it depends on
# (requirements.txt, interface sources, setup.py) are unchanged, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3.11}
PY=$VENV/bin/python
STAMPS=$VENV/.retarget-stamps
BUILD=$ROOT/build/interfaces

say() { printf '[setup] %s\n' "$*"; }
# pip's warnings about this machine's unreachable local mirrors are noise; keep real errors.
quiet_pip() { "$PY" -m pip "$@" 2>&1 | grep -v -e "is ignored: it is neither a file nor a directory" || true; return "${PIPESTATUS[0]}"; }
digest() { cat "$@" | sha256sum | cut -c1-16; }
stamp_ok() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
stamp_set() { mkdir -p "$STAMPS"; echo "$2" > "$STAMPS/$1"; }

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "[setup] error: $PYTHON not found. Install Python 3.11 (Debian/Ubuntu: apt-get install python3.11 python3.11-venv) or run 'make setup PYTHON=/path/to/python3.11'." >&2
  exit 1
fi
if [ ! -x "$PY" ]; then
  say "creating $VENV with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$VENV"
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "[setup] error: $VENV is not Python 3.11 (the ROS 2 Kilted wheels need 3.11); remove it and rerun." >&2
  exit 1
fi

# 1. Python dependencies (ranges pinned in requirements.txt only).
req=$(digest requirements.txt)
if ! stamp_ok requirements "$req"; then
  # uv resolves and installs the same versions as pip (compared package by package) in seconds instead of 37 s
  # (docs/dependencies.md); pip takes over where uv cannot be installed or fails (e.g. an index only pip.conf knows).
  tools=("pip>=24" "setuptools>=70,<81" "wheel>=0.42")
  uv_pin=$(grep -E '^uv[<>=!~ ]' requirements.txt | cut -d'#' -f1 | tr -d ' ')
  say "installing Python dependencies and ROS 2 Kilted wheels (seconds with uv, about a minute with pip)"
  if quiet_pip install -q "$uv_pin" && "$VENV/bin/uv" pip install -q --python "$PY" "${tools[@]}" -r requirements.txt
  then :
  else
    say "uv did not install the dependencies; pip installs them"
    quiet_pip install -q --upgrade "${tools[@]}"
    quiet_pip install -q -r requirements.txt
  fi
  # The wheels' CMake exports carry their build machine's include paths; point them at this interpreter.
  pyinc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  npinc=$("$PY" -c 'import numpy; print(numpy.get_include())')
  find "$VENV/share" -name '*__rosidl_generator_pyExport*.cmake' -print0 2>/dev/null |
    xargs -0 -r sed -i -E \
      -e "s#/opt/python/cp311-cp311/include/python3\.11#${pyinc}#g" \
      -e "s#/opt/python/cp311-cp311/lib/python3\.11/site-packages/numpy/_core/include#${npinc}#g" \
      -e "s#/[^;\"]*/site-packages/numpy/_core/include#${npinc}#g"
  stamp_set requirements "$req"
fi

# 2. Interface packages, built with CMake into the venv prefix: the C and Python type supports rclpy loads
#    (interfaces/python_only.cmake).
build_interface() {  # $1 = package folder under interfaces/
  local pkg=$1 src=$ROOT/interfaces/$1 key
  key=$(cd "$src" && find . -type f | sort | xargs cat "$ROOT/interfaces/python_only.cmake" | sha256sum | cut -c1-16)
  key=$key-$(cat "$STAMPS/requirements")
  if stamp_ok "iface-$pkg" "$key"; then return 0; fi
  say "building interface package $pkg (about 10 s, side by side with the others)"
  rm -rf "$BUILD/$pkg"; mkdir -p "$BUILD/$pkg"
  (
    export AMENT_PREFIX_PATH=$VENV CMAKE_PREFIX_PATH=$VENV
    cmake -S "$src" -B "$BUILD/$pkg" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
      -DCMAKE_PREFIX_PATH="$VENV" -DCMAKE_INSTALL_PREFIX="$VENV" -DPython3_EXECUTABLE="$PY" \
      -DRETARGET_INTERFACES_PYTHON_ONLY="$ROOT/interfaces/python_only.cmake" \
      > "$BUILD/$pkg.log" 2>&1 &&
    cmake --build "$BUILD/$pkg" -j 2 >> "$BUILD/$pkg.log" 2>&1 &&
    cmake --install "$BUILD/$pkg" >> "$BUILD/$pkg.log" 2>&1
  ) || { echo "[setup] error: building $pkg failed; the last lines of $BUILD/$pkg.log:" >&2; tail -25 "$BUILD/$pkg.log" >&2; exit 1; }
  stamp_set "iface-$pkg" "$key"
}
if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing cmake and g++ from Debian packages"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ make >/dev/null
  else
    echo "[setup] error: cmake and g++ are needed to build the interface packages (sudo apt-get install cmake g++)" >&2
    exit 1
  fi
fi
# control_msgs: the distro's where there is one; otherwise (or if we built it before) our compatibility copy.
packages=(retarget_interfaces)
if [ -f "$STAMPS/iface-control_msgs" ] || ! "$PY" -c 'import control_msgs.action' >/dev/null 2>&1; then
  packages+=(control_msgs)
fi
if [ -f "$STAMPS/iface-tf2_msgs" ] || ! "$PY" -c 'import tf2_msgs.msg' >/dev/null 2>&1; then
  packages+=(tf2_msgs)
fi
# No package depends on another: they build side by side (19 s against 28 s one after another), each into its own
# folder and log; any failure stops the set-up after all have ended.
builds=()
for pkg in "${packages[@]}"; do build_interface "$pkg" & builds+=($!); done
failed=0
for pid in "${builds[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || exit 1

# 3. retarget itself, editable.
own=$(digest setup.py setup.cfg package.xml)
if ! stamp_ok editable "$own" || ! "$PY" -c 'import retarget' >/dev/null 2>&1; then
  say "installing retarget (editable)"
  quiet_pip install -q --no-deps --no-build-isolation -e .
  stamp_set editable "$own"
fi

# 4. Headless Chromium for the report page's browser test (tests/report/test_page.py skips without it).
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing chromium from Debian packages (the report page's browser test)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
      || say "warning: chromium could not be installed; the page's browser test will skip"
  else
    say "chromium not found (sudo apt-get install chromium): the report page's browser test will skip"
  fi
fi

"$PY" -c 'import rclpy, control_msgs.action, retarget_interfaces.action, retarget' \
  || { echo "[setup] error: the environment is incomplete (see above)" >&2; exit 1; }
say "ready: $VENV (activate with 'source .venv/bin/activate')"
