#!/usr/bin/env bash
# Run a ddpsafe training job until it finishes, starting it again each time it was preempted.
#
#   examples/requeue.sh CKPT_DIR LAUNCHER [ARGS...]
#   examples/requeue.sh checkpoints torchrun --nproc_per_node 8 train.py
#   examples/requeue.sh checkpoints accelerate launch --multi_gpu --num_processes 8 train.py
#
# CKPT_DIR is the folder CheckpointCallback writes to. The decision comes from it (`ddpsafe-status CKPT_DIR`), not from
# the launcher's exit code: torchrun and accelerate exit 1 both after a crash and after ddpsafe saved and stopped on a
# signal, and 0 both at the end and after the stop switch.
#   status 0   finished         -> exit 0
#   status 75  preempted        -> run the same command again (it resumes from the checkpoint)
#   status 3   stopped          -> the user asked to stop (touch CKPT_DIR/stop-now): exit 3, not started again
#   status 2   no checkpoint    -> nothing to resume from: exit with the launcher's code (1 if it was 0)
#   status 1   unfinished       -> crashed after a checkpoint: exit with the launcher's code (1 if it was 0)
# A SIGTERM, SIGINT or SIGUSR1 sent to this script itself (the scheduler stopping the whole job) is passed on to the
# launcher as SIGTERM; the script then waits for the checkpoint and exits 75 instead of starting again.
# MAX_RUNS (default 100) bounds the number of runs.
set -u
ckpt=$1; shift
max_runs=${MAX_RUNS:-100}
pid= stopping=0 signalled=0
forward() { stopping=1; signalled=1; [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; }
trap forward TERM INT USR1
failed() { [ "$code" -ne 0 ] && exit "$code"; exit 1; }

for ((run = 1; run <= max_runs; run++)); do
    "$@" &
    pid=$!
    while :; do                   # a trap interrupts `wait`: wait again until the launcher itself has ended
        signalled=0
        wait "$pid"; code=$?
        [ "$signalled" = 1 ] || break
    done
    pid=
    ddpsafe-status "$ckpt"; status=$?
    echo "requeue.sh: run $run: launcher exit $code, ddpsafe-status $status" >&2
    case $status in
        0)  echo "requeue.sh: finished" >&2; exit 0 ;;
        75) [ "$stopping" = 1 ] && exit 75
            echo "requeue.sh: preempted; checkpoint saved, starting again" >&2 ;;
        3)  echo "requeue.sh: stopped: the user asked the run to stop (stop switch); not starting it again" >&2; exit 3 ;;
        2)  echo "requeue.sh: no complete checkpoint in $ckpt after run $run (launcher exit $code): nothing to resume from," \
                 "not starting again. Is $ckpt the folder CheckpointCallback writes to?" >&2
            failed ;;
        *)  echo "requeue.sh: the run failed after its last checkpoint (launcher exit $code); not starting again" >&2
            failed ;;
    esac
done
echo "requeue.sh: still preempted after $max_runs runs" >&2
exit 75
