#!/usr/bin/env bash
# Follow a job (a training or benchmark session) that runs in the background on the GPU machine across several calls:
#   setsid nohup bash -c 'bash scripts/gpu/train_heads_h200.sh; echo $? > /tmp/pipeline.rc' > /tmp/pipeline.log 2>&1 &
#   bash scripts/gpu/h200_wait.sh 560     # in this call and the next ones, until it reports done
# Prints new "###" and progress lines every 20 s for up to SECONDS, then the log's tail; once the
# session is done, copies its outputs (/tmp/pipeline_out) into $OUT, small files first, up to
# FETCH_BYTES (56 MiB) a call: a call brings back about 64 MiB, and two 32k-vocabulary heads alone make six
# 15 MiB parts. What did not fit is listed; the next call fetches it with
#   bash scripts/gpu/h200_wait.sh 0       # (within 30 s, while the machine is warm) until nothing is left
# FETCH_HEADS="NAME ..." (heads of $SHIP/heads, default /tmp/peagle_train/ship/heads) fetches those heads alone,
# each as head-NAME.tar.part-N (reassemble: cat head-NAME.tar.part-* | tar -x), instead of heads.tgz, which holds
# every run's head: three runs' heads make about 12 parts, four calls, where one head (a one-layer EAGLE-3, 47 MiB)
# takes one. Decide from results.json and the eval logs, which come first in any case.
# PIPE_ROOT (default /tmp) moves pipeline.rc, pipeline.log, pipeline_out/ and pipeline_fetched (for tests).
# Exits 3 at once when neither pipeline.log nor pipeline.rc exists (no pipeline here: a fresh machine).
LIMIT=${1:-560}
OUT=${OUT:?set OUT}
FETCH_BYTES=${FETCH_BYTES:-$((56 * 1024 * 1024))}
R=${PIPE_ROOT:-/tmp}
t0=$SECONDS
# No log and no exit status: nothing was started on this machine, or the machine was released and a fresh
# one answered this call (a gap over 30 s between calls). Waiting would spend the whole LIMIT of device time
# on nothing, since no exit status ever appears there, so say so at once.
if ! [ -f $R/pipeline.log ] && ! [ -f $R/pipeline.rc ]; then
  echo "h200_wait.sh: no pipeline on this machine ($R/pipeline.log and $R/pipeline.rc are missing): it was never" \
       "started here, or the machine was released between calls and this is a fresh one (start it again)" >&2
  exit 3
fi
while [ $((SECONDS - t0)) -lt "$LIMIT" ] && ! [ -f $R/pipeline.rc ]; do sleep 20
  echo "--- $((SECONDS - t0)) s: $(grep -c . $R/pipeline.log 2>/dev/null) log lines; $(grep '###' $R/pipeline.log | tail -1)"
done
grep -v "^\s*$" $R/pipeline.log | grep -v "Warning\|warn" | tail -40
if ! [ -f $R/pipeline.rc ]; then  # still running: the logs so far (done: they are in the archive)
  cp $R/pipeline.log "$OUT/pipeline.log" 2>/dev/null
  for f in /tmp/peagle_train/train-*.log; do  # one per run, named after RUNS (e.g. train-peagle-4l.log)
    [ -f "$f" ] && tail -c 200000 "$f" > "$OUT/$(basename "$f")"
  done
  exit 0
fi
echo "pipeline finished with exit $(cat $R/pipeline.rc)"
# what earlier calls brought back of this pipeline (a list older than its exit status is another run's)
[ "$R/pipeline_fetched" -nt "$R/pipeline.rc" ] || : > "$R/pipeline_fetched"
budget=$FETCH_BYTES left=()
SHIP=${SHIP:-/tmp/peagle_train/ship}
parts='^heads\.tgz\.part-'
if [ -n "${FETCH_HEADS:-}" ]; then
  parts='^head-.*\.tar\.part-'
  for h in $FETCH_HEADS; do  # every name first, so a bad one packs nothing
    if ! [ -f "$SHIP/heads/$h/config.json" ]; then
      echo "h200_wait.sh: FETCH_HEADS names '$h', which is no head in $SHIP/heads (there: $(ls "$SHIP/heads" 2>/dev/null | tr '\n' ' '))" >&2
      exit 2
    fi
  done
  for h in $FETCH_HEADS; do  # packed once, in a scratch folder moved into place whole, so a cut call leaves no parts
    ls $R/pipeline_out/head-$h.tar.part-* > /dev/null 2>&1 && continue
    rm -rf "$R/pipeline_out/.pack" && mkdir -p "$R/pipeline_out/.pack"
    tar -C "$SHIP/heads" -cf - "$h" | split -b 15m -d -a 1 - "$R/pipeline_out/.pack/head-$h.tar.part-" \
      && mv "$R/pipeline_out/.pack"/head-$h.tar.part-* "$R/pipeline_out/" && rmdir "$R/pipeline_out/.pack"
  done
fi
# a folder (e.g. the GPU suite's, written beside the session) travels as one FOLDER.tgz: a call brings back files only
for d in $R/pipeline_out/*/; do
  [ -d "$d" ] || continue
  n=$(basename "$d")
  [ -f "$R/pipeline_out/$n.tgz" ] || tar -C $R/pipeline_out -czf "$R/pipeline_out/$n.tgz" "$n"
done
# small files first (results, logs), then the heads' parts in order (with FETCH_HEADS: those heads', never heads.tgz)
for f in $(ls -Sr $R/pipeline_out/ 2>/dev/null | grep -v '^heads\.tgz\.part-\|^head-.*\.tar\.part-') \
         $(ls $R/pipeline_out/ 2>/dev/null | grep "$parts" | sort); do
  grep -qxF "$f" $R/pipeline_fetched && continue
  [ -d "$R/pipeline_out/$f" ] && continue  # fetched as $f.tgz
  size=$(stat -c %s "$R/pipeline_out/$f")
  if [ "$size" -gt "$budget" ]; then left+=("$f"); continue; fi
  cp "$R/pipeline_out/$f" "$OUT/" && echo "$f" >> $R/pipeline_fetched && budget=$((budget - size))
done
ls -la "$OUT"
if [ "${#left[@]}" -gt 0 ]; then
  echo "not fetched yet (${#left[@]}): ${left[*]}; run '${FETCH_HEADS:+FETCH_HEADS=\"$FETCH_HEADS\" }bash scripts/gpu/h200_wait.sh 0'" \
       "in the next call, within 30 s"
else
  echo "every output fetched${FETCH_HEADS:+ (of the heads, only those of FETCH_HEADS: heads.tgz.part-* stay behind)}"
fi
