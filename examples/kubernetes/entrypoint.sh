#!/usr/bin/env bash
# Container entrypoint for a Kubernetes Job: run the launcher once, then exit with what the checkpoints folder says,
# so that the Job's podFailurePolicy can tell a preemption (75) from a failure.
#
#   entrypoint.sh CKPT_DIR LAUNCHER [ARGS...]
#   entrypoint.sh /workspace/checkpoints torchrun --nproc_per_node 8 train.py
#
# The kubelet sends SIGTERM to the container's PID 1, this script: it passes the signal on to the launcher (torchrun
# forwards it to every rank), waits for the checkpoint, and exits with
#   0   ddpsafe-status 0: training finished
#   75  ddpsafe-status 75: preempted, the checkpoint is saved -> podFailurePolicy `Ignore`, a new pod resumes
#   otherwise the launcher's exit code (1 if it was 0): a real failure, counted against backoffLimit
# As PID 1 the script would ignore SIGTERM without the trap: keep it.
set -u
ckpt=$1; shift
pid= signalled=0
forward() { signalled=1; [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; }
trap forward TERM INT USR1

"$@" &
pid=$!
while :; do
    signalled=0
    wait "$pid"; code=$?
    [ "$signalled" = 1 ] || break
done
ddpsafe-status "$ckpt"; status=$?
echo "entrypoint.sh: launcher exit $code, ddpsafe-status $status" >&2
case $status in
    0|75) exit "$status" ;;
    *)    [ "$code" -ne 0 ] && exit "$code"; exit 1 ;;
esac
