#!/usr/bin/env bash
# A GPU session's stages in the background, over several device calls (a call lasts 10 minutes at
# most, and a machine stays warm only 30 s after one):
#   bash scripts/gpu_session.sh SECONDS [PLAN]
# The first call on a machine copies the tree to $GPU_SESSION_TREE (/tmp/tree) and starts PLAN's
# stages there, one after another, under setsid, so they go on between calls. Every call waits up to
# SECONDS for the last stage to end, prints the progress, and packs $GPU_SESSION_DIR (/tmp/gpurun:
# each stage's results, console and the progress) into $OUT/gpurun.tgz. Call again at once while
# stages remain.
# PLAN (default scripts/gpu_plans/h200.txt): a stage a line, "NAME ARGS...", with ARGS as
# scripts/gpu_run.sh takes them; "only-on TEXT" runs the lines after it only on a card whose name
# contains TEXT ("only-on" alone: on every card again); "#" starts a comment (a line is evaluated
# as shell words: the plan is the course's own file). The exit status says only whether the
# packing worked; each stage's is in the progress.
set -uo pipefail
runs=${GPU_SESSION_DIR:-/tmp/gpurun}
tree=${GPU_SESSION_TREE:-/tmp/tree}

run_plan() {  # in the copy of the tree, under setsid
  local card line name words only=""
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  echo "card: ${card:-none}  commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')  start: $(date -u +%T)" >> "$runs/progress"
  while read -r line || [ -n "$line" ]; do  # a last line without its newline too
    line=${line%%#*}
    eval "words=( $line )"  # the plan is the course's own file: quoted arguments stay whole
    [ ${#words[@]} -eq 0 ] && continue
    if [ "${words[0]}" = only-on ]; then only=${words[*]:1}; continue; fi
    name=${words[0]}
    if [ -n "$only" ] && [[ $card != *"$only"* ]]; then
      echo "$(date -u +%T) skip $name (not on ${card:-a GPU})" >> "$runs/progress"; continue
    fi
    echo "$(date -u +%T) start $name" >> "$runs/progress"
    local t0=$SECONDS
    OUT="$runs/$name" timeout 1800 bash scripts/gpu_run.sh "${words[@]:1}" > "$runs/$name.console" 2>&1 < /dev/null
    local rc=$?
    echo "$(date -u +%T) end $name rc=$rc $((SECONDS - t0)) s" >> "$runs/progress"
  done < "$1"
  echo "$(date -u +%T) all done" >> "$runs/progress"
  touch "$runs/done"
}

if [ "${1:-}" = --run ]; then
  run_plan "$2"
  exit 0
fi
wait_s=${1:?"usage: gpu_session.sh SECONDS [PLAN]"}
plan=${2:-scripts/gpu_plans/h200.txt}
: "${OUT:?set OUT, the folder whose files come back}"
if [ ! -e "$runs/progress" ]; then
  [ -f "$plan" ] || { echo "no plan $plan" >&2; exit 2; }
  mkdir -p "$runs" && rm -rf "$tree" && mkdir -p "$tree" && cp -a . "$tree/"
  (cd "$tree" && GPU_SESSION_DIR="$runs" setsid bash scripts/gpu_session.sh --run "$plan" > "$runs/session.log" 2>&1 < /dev/null &)
  sleep 1
fi
end=$((SECONDS + wait_s))
while [ $SECONDS -lt "$end" ] && [ ! -e "$runs/done" ]; do sleep 5; done
cat "$runs/progress"
# Stages may still be writing: a file that changes while tar reads it is packed as it was then.
tar --warning=no-file-changed -C "$(dirname "$runs")" -czf "$OUT/gpurun.tgz" "$(basename "$runs")"
[ $? -le 1 ] || exit 1  # tar's 1: some file changed as it was read; a stage's own status is in the progress
