#!/usr/bin/env bash
# One line per stage of a long make target (`make demo`): the command's whole output goes
# to a log file, the terminal gets the stage's name and how long it took. On failure the
# log's path and its last lines are printed and the command's exit code is kept, so
# nothing is hidden where it matters. pip and npm print hundreds of lines that nobody
# reads on success; that is why they go to the log.
#
#   scripts/stage.sh [-o FILE] "Installing the dev venv" make -s .venv/.installed
#
#   -o FILE   the command's stdout goes to FILE instead of the log (a value the caller
#             reads, e.g. the engine venv's path); its stderr still goes to the log.
#
# On a terminal a spinner and the elapsed seconds redraw the line while the command
# runs; elsewhere (CI, a pipe) the line is written once, when the stage ends.
# Environment: MOL_STAGE_LOG_DIR (default .mol/logs), MOL_STAGE_TAIL (default 40).
set -uo pipefail

usage() {
  echo "usage: scripts/stage.sh [-o FILE] LABEL COMMAND [ARG...]" >&2
  exit 2
}

stdout_file=""
if [[ ${1:-} == "-o" ]]; then
  [[ $# -ge 2 ]] || usage
  stdout_file=$2
  shift 2
fi
[[ $# -ge 2 ]] || usage
label=$1
shift

log_dir=${MOL_STAGE_LOG_DIR:-.mol/logs}
tail_lines=${MOL_STAGE_TAIL:-40}
# The log is named after the label without its parenthesised notes: "vLLM CPU engine venv
# (first time ~3 min)" writes vllm-cpu-engine-venv.log.
slug=$(printf '%s' "$label" | sed 's/([^)]*)//g' | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' \
  | sed 's/^-*//; s/-*$//')
mkdir -p "$log_dir" || { echo "stage: cannot create the log folder $log_dir" >&2; exit 1; }
log="$log_dir/${slug:-stage}.log"
{ printf '# %s\n# $' "$label"; printf ' %q' "$@"; printf '\n'; } > "$log"

started=$SECONDS
spinner=""
if [[ -t 1 ]]; then
  (
    frames='|/-\'
    i=0
    while :; do
      printf '\r%s %s  %ds ' "${frames:i++%4:1}" "$label" $((SECONDS - started))
      sleep 0.2
    done
  ) &
  spinner=$!
  trap 'kill "$spinner" 2>/dev/null' EXIT
fi

if [[ -n $stdout_file ]]; then
  "$@" >"$stdout_file" 2>>"$log"
else
  "$@" >>"$log" 2>&1
fi
code=$?
elapsed=$((SECONDS - started))

if [[ -n $spinner ]]; then
  kill "$spinner" 2>/dev/null
  wait "$spinner" 2>/dev/null
  printf '\r\033[K'
fi

if [[ $code -eq 0 ]]; then
  echo "ok    $label (${elapsed}s)"
  exit 0
fi
{
  echo "FAIL  $label (exit $code after ${elapsed}s); full log: $log"
  echo "----- last $tail_lines lines of $log -----"
  tail -n "$tail_lines" "$log"
  echo "----- end of $log -----"
} >&2
exit "$code"
