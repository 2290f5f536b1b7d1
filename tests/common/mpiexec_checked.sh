#!/usr/bin/env bash
# The multi-rank tests' launcher: runs "${PENSTOCK_MPIEXEC_REAL:-mpirun}" with this script's arguments, passes its
# output and exit status through, and forwards SIGTERM / SIGINT to it (so `timeout` still stops the job). One
# exception: Open MPI 4's runtime can report a rank that did call MPI_Finalize as "exiting improperly" naming PID 0
# (the daemon saw the exit before it recorded the finalize) and exit 1 (open-mpi/ompi#7833, #12607; not fixed on v4;
# seen under `ctest -j2` with two jobs launching at once). That report, and only that one with exit status 1, becomes
# exit 0 with a note on stderr. A rank that fails or exits improperly for real gives another status or message (a
# non-zero exit code, a signal, its real PID), which pass through; the tests still check every rank's output.
#   usage: PENSTOCK_MPIEXEC_REAL=/usr/bin/mpirun mpiexec_checked.sh --oversubscribe -np 2 BINARY ARGS...
set -u
real=${PENSTOCK_MPIEXEC_REAL:-mpirun}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
"$real" "$@" 2>"$err" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
rc=0
wait "$child" || rc=$?
while kill -0 "$child" 2>/dev/null; do  # woken by a forwarded signal: wait for the launcher itself
  rc=0
  wait "$child" || rc=$?
done
cat "$err" >&2
if [ "$rc" -eq 1 ] && grep -Eq 'process rank [0-9]+ with PID 0 on' "$err" && grep -q 'exiting improperly' "$err"; then
  echo "mpiexec_checked: exit status 1 is Open MPI 4's finalize/exit race report (PID 0, 'exiting improperly'):" \
       "treated as 0" >&2
  exit 0
fi
exit "$rc"
