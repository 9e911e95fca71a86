# Sourced by bash scripts (scripts/install-deps.sh, packaging/build-packages.sh).
#
#   ensure_debian_packages MESSAGE PACKAGE...
#
# Installs those of PACKAGE that dpkg does not list as installed (apt-get, --no-install-recommends,
# through sudo unless root), after printing "MESSAGE: <the missing ones>". Nothing when none is.
# Callers running at once (the package tests build two trees in parallel) take turns on a lock
# instead of failing on apt's, and apt waits for a lock held by anyone else.

missing_debian_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
  done
}

ensure_debian_packages() {
  local message=$1
  shift
  local missing
  missing=$(missing_debian_packages "$@")
  [[ -n $missing ]] || return 0
  local lock_fd
  exec {lock_fd}>>"${TMPDIR:-/tmp}/vmkeeper-apt.lock"
  flock "$lock_fd"
  # Another caller may have installed them while this one waited.
  mapfile -t missing < <(missing_debian_packages "$@")
  if ((${#missing[@]})); then
    echo "$message: ${missing[*]}"
    local sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    local wait_for_apt=(-o DPkg::Lock::Timeout=600)
    "${sudo_cmd[@]}" apt-get "${wait_for_apt[@]}" update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get "${wait_for_apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  exec {lock_fd}>&-
}
