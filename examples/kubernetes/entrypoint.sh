#!/usr/bin/env bash
# Container entrypoint for a Kubernetes Job: run the launcher once, then exit with what the checkpoints folder says,
# so that the Job's podFailurePolicy can tell a preemption (75) and a stop switch (3) from a failure.
#
#   entrypoint.sh CKPT_DIR LAUNCHER [ARGS...]
#   entrypoint.sh /workspace/checkpoints torchrun --nproc_per_node 8 train.py
#
# CKPT_DIR is the folder CheckpointCallback writes to. The kubelet sends SIGTERM to the container's PID 1, this script:
# it passes the signal on to the launcher (torchrun forwards it to every rank), waits for the checkpoint, and exits with
#   0   ddpsafe-status 0: training finished -> the Job completes
#   75  ddpsafe-status 75: preempted, the checkpoint is saved -> podFailurePolicy `Ignore`, a new pod resumes
#   3   ddpsafe-status 3: the user asked to stop (touch CKPT_DIR/stop-now) -> podFailurePolicy `FailJob`, no new pod
#   otherwise the launcher's exit code (1 if it was 0): a real failure, or no checkpoint at all; counted against backoffLimit
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
    0)  echo "entrypoint.sh: finished" >&2; exit 0 ;;
    75) echo "entrypoint.sh: preempted; checkpoint saved, the next pod resumes" >&2; exit 75 ;;
    3)  echo "entrypoint.sh: stopped: the user asked the run to stop (stop switch); the Job ends here" >&2; exit 3 ;;
    2)  echo "entrypoint.sh: no complete checkpoint in $ckpt (launcher exit $code): nothing to resume from." \
             "Is $ckpt the folder CheckpointCallback writes to?" >&2 ;;
    *)  echo "entrypoint.sh: the run failed after its last checkpoint (launcher exit $code)" >&2 ;;
esac
[ "$code" -ne 0 ] && exit "$code"; exit 1
