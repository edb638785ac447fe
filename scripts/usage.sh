# Sourced by the long-running scripts with their arguments: --help prints
# the calling script's header comment (and exits).
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  exit 0
fi

# For a script whose settings are environment variables alone: an argument
# is refused rather than taken for a run.
no_arguments() {
  (( $# == 0 )) && return
  echo "$(basename "$0"): takes no arguments ($1); settings are environment variables, see --help" >&2
  exit 2
}
