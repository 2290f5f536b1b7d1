#!/usr/bin/env bash
# tests/common/mpiexec_checked.sh, the multi-rank tests' launcher, against a stand-in launcher: Open MPI 4's
# finalize/exit race report (exit 1, a rank "with PID 0" "exiting improperly") becomes exit 0; exit 1 with a real PID,
# exit 1 for a rank's non-zero exit code, exit 2 and exit 0 pass through with their output; SIGTERM from `timeout`
# reaches the launcher.
#   usage: mpiexec_checked_test.sh PATH/TO/mpiexec_checked.sh
set -euo pipefail
wrapper=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/launcher" <<'SH'
#!/usr/bin/env bash
case "$1" in
  race) echo "rank output"
        printf -- '---\nmpirun has exited due to process rank 1 with PID 0 on\nnode n1 exiting improperly. There are\n' >&2
        exit 1 ;;
  real_pid) printf 'mpirun has exited due to process rank 1 with PID 4321 on\nnode n1 exiting improperly.\n' >&2; exit 1 ;;
  rank_failed) echo "Primary job  terminated normally, but 1 process returned a non-zero exit code." >&2; exit 1 ;;
  two) exit 2 ;;
  ok) echo "all ranks done"; exit 0 ;;
  term) trap 'echo "launcher got SIGTERM" >&2; exit 143' TERM; while true; do sleep 0.1; done ;;
esac
SH
chmod +x "$tmp/launcher"
export PENSTOCK_MPIEXEC_REAL="$tmp/launcher"
check() {  # check CASE WANT_RC STDOUT_WANT STDERR_WANT
  local rc=0
  "$wrapper" "$1" >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [ "$rc" -ne "$2" ] || { [ -n "$3" ] && ! grep -q -- "$3" "$tmp/out"; } ||
     { [ -n "$4" ] && ! grep -q -- "$4" "$tmp/err"; }; then
    echo "FAIL: $1: exit $rc (want $2); stdout: $(cat "$tmp/out"); stderr: $(cat "$tmp/err")"
    exit 1
  fi
  echo "ok: $1 -> exit $rc"
}
check race 0 "rank output" "finalize/exit race report"
check real_pid 1 "" "PID 4321"
check rank_failed 1 "" "non-zero exit code"
check two 2 "" ""
check ok 0 "all ranks done" ""
rc=0
timeout 1 "$wrapper" term >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ "$rc" -ne 124 ] || ! grep -q "launcher got SIGTERM" "$tmp/err"; then
  echo "FAIL: timeout: exit $rc (want 124), stderr: $(cat "$tmp/err")"; exit 1
fi
echo "ok: timeout's SIGTERM reached the launcher, exit 124"
