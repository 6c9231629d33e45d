# The stage runner of the GPU session scripts (sweep_session_h200.sh, baseline_depth_session.sh), sourced by them:
#   stage NAME COMMAND...   runs COMMAND unless NAME is in $SKIP, prints "### stage NAME took Ns, exit RC", adds
#                           "NAME": seconds to $STAGES and NAME to $FAILED when it fails; a failure never stops the caller.
STAGES="" FAILED=""
stage() {
  local name=$1 t=$SECONDS rc=0
  shift
  case " ${SKIP:-} " in *" $name "*) echo "### stage $name skipped (SKIP)"; return 0 ;; esac
  echo "### stage $name: $*"
  "$@" || rc=$?
  STAGES="$STAGES\"$name\": $((SECONDS - t)), "
  [ "$rc" = 0 ] || FAILED="$FAILED $name"
  echo "### stage $name took $((SECONDS - t))s, exit $rc (session at $((SECONDS))s)"
}
