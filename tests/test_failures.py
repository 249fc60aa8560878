"""An error on one rank ends the job promptly, named on rank 0, with no process left behind (issue 32).

Each case runs `tests/scripts/failing_train.py` as a user runs a script: in one process, or on 2 CPU ranks under the
real `torchrun`, with fastai's or torch's DataLoader and 2 worker processes per rank, `CheckpointCallback` attached (so
the workers start with the stop signals blocked). The checks: the job ends (a run still going after 90 seconds is
killed and fails the test, naming the ranks and workers still alive: `conftest.run_job`), the output names the error (on rank 0 under DDP:
the failing rank and its error's type and message), and no rank or DataLoader worker process is left in the process table.
Before the fix a worker error never ended: the interpreter's exit waited for workers that could not receive `SIGTERM`."""
from __future__ import annotations
import pytest

from conftest import run_job

def check_ended(code, output, left, *expected):
    assert code not in (0, None), output[-4000:]
    for e in expected: assert e in output, f'{e!r} not in the output:\n{output[-4000:]}'
    assert left == [], f'processes left behind: {left}\n{output[-3000:]}'

@pytest.mark.parametrize('loader', ['fastai', 'torch'])
def test_worker_error_one_process(tmp_path, loader):
    "No DDP: a corrupt sample in a worker ends the script with the error, as stock fastai does"
    code, secs, out, left = run_job(tmp_path/'run', 'worker', '--loader', loader, '--fail-rank', '0')
    check_ended(code, out, left, 'ValueError: corrupt sample')

@pytest.mark.parametrize('loader', ['fastai', 'torch'])
def test_worker_error_on_rank1(tmp_path, loader):
    "A corrupt sample in a worker of rank 1: rank 0 names rank 1 and its error"
    code, secs, out, left = run_job(tmp_path/'run', 'worker', '--loader', loader, ranks=2)
    check_ended(code, out, left, '[rank1]: ValueError: corrupt sample', 'training failed on rank 0: rank 1 failed with ValueError: corrupt sample')
    named = [l for l in out.splitlines() if 'rank 1 failed with ValueError' in l]
    assert any('ddpsafe.dist.ranks.PeerFailed: training failed on rank 0' in l for l in named), out[-4000:]   # a class of its own, a DistTimeout (in ddpsafe.dist.ranks since issue 58)
    assert not any('Connection closed' in l or 'gloo' in l for l in named), named                     # gloo's words left out

def test_callback_error_during_async_save(tmp_path):
    "A user's callback raises on rank 1 while rank 0's background write is in flight"
    code, secs, out, left = run_job(tmp_path/'run', 'callback', ranks=2)
    check_ended(code, out, left, 'writing a checkpoint in the background',
                'rank 1 failed with ValueError: Exception occured in `Boom` when calling event `after_batch`: bad callback at step 9')

def test_language_model_collate_error(tmp_path):
    "fastai's language model under DDP: the stock `fa_collate` failure on one rank ends the job, named on rank 0"
    code, secs, out, left = run_job(tmp_path/'run', 'lm', ranks=2)
    assert 'Error when trying to collate the data into batches with fa_collate' in out, out[-4000:]
    check_ended(code, out, left, 'training failed on rank 0: rank 1 failed with RuntimeError: Error when trying to collate')
