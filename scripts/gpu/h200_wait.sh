#!/usr/bin/env bash
# Follow a training session that runs in the background on the GPU machine across several calls:
#   setsid nohup bash -c 'bash scripts/gpu/train_heads_h200.sh; echo $? > /tmp/pipeline.rc' > /tmp/pipeline.log 2>&1 &
#   bash scripts/gpu/h200_wait.sh 560     # in this call and the next ones, until it reports done
# Prints new "###" and progress lines every 20 s for up to SECONDS, then the log's tail; once the
# session is done, copies its outputs (/tmp/pipeline_out) into $OUT.
LIMIT=${1:-560}
OUT=${OUT:?set OUT}
t0=$SECONDS
while [ $((SECONDS - t0)) -lt "$LIMIT" ] && ! [ -f /tmp/pipeline.rc ]; do sleep 20
  echo "--- $((SECONDS - t0)) s: $(grep -c . /tmp/pipeline.log 2>/dev/null) log lines; $(grep '###' /tmp/pipeline.log | tail -1)"
done
grep -v "^\s*$" /tmp/pipeline.log | grep -v "Warning\|warn" | tail -40
if ! [ -f /tmp/pipeline.rc ]; then  # still running: the logs so far (done: they are in the archive)
  cp /tmp/pipeline.log "$OUT/pipeline.log" 2>/dev/null
  for f in /tmp/peagle_train/train-*.log; do  # one per run, named after RUNS (e.g. train-peagle-4l.log)
    [ -f "$f" ] && tail -c 200000 "$f" > "$OUT/$(basename "$f")"
  done
else
  echo "pipeline finished with exit $(cat /tmp/pipeline.rc)"
  cp /tmp/pipeline_out/* "$OUT/" 2>/dev/null
  ls -la "$OUT"
fi
