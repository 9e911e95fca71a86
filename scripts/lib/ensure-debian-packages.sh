# Sourced by bash scripts (scripts/install-deps.sh, packaging/build-packages.sh).
#
#   ensure_debian_packages MESSAGE PACKAGE...
#
# Installs those of PACKAGE that dpkg does not list as installed (apt-get, --no-install-recommends,
# through sudo unless root), after printing "MESSAGE: <the missing ones>". Nothing when none is.
ensure_debian_packages() {
  local message=$1 p
  shift
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "$message: ${missing[*]}"
  local sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
