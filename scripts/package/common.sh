# Sourced by scripts/package/*.sh: what the artifacts that carry libaccel share.

# stage_components PREFIX COMPONENT...: `cmake --install --strip` of those components of the build into PREFIX.
stage_components() {
  local prefix=$1 c
  shift
  for c in "$@"; do
    cmake --install "$ACCEL_BUILD" --component "$c" --prefix "$prefix" --strip >/dev/null
  done
}

# copy_libaccel PREFIX DIR: copies the staged libaccel into DIR under its soname (libaccel.so.<ABI>), the name
# the modules beside it ask for; prints that name.
copy_libaccel() {
  local prefix=$1 dir=$2 real soname
  real=$(readlink -f "$(ls "$prefix"/lib*/libaccel.so.*.*.* | head -n1)")
  soname=$(readelf -d "$real" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
  [ -n "$soname" ] || { echo "package: $real has no SONAME" >&2; return 1; }
  cp "$real" "$dir/$soname"
  echo "$soname"
}
