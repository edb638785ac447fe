# Sourced by the scripts whose settings are all environment variables, with
# their arguments: --help prints the calling script's header comment, and
# any other argument is refused rather than taken for a run.
if (( $# > 0 )); then
  if [[ "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
    exit 0
  fi
  echo "$(basename "$0"): takes no arguments ($1); settings are environment variables, see --help" >&2
  exit 2
fi
