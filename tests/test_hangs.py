"""No hang without a name (issue 31): a DataLoader worker stuck before its loop is started again with the same seeds, and
a rank that waits on itself (its DataLoader, a lock in a callback) is named on rank 0 and exits by itself.

CPython 3.8-3.11 before their September 2024 releases (this machine's 3.11.7 among them) can deadlock a forked child in
its after-fork step while gloo's work thread holds the interpreter's thread-list lock (gh-112275). The stand-in here is
`launcher_train.py --hang-first-fork 1`: rank 1's first forked worker never returns from a fork handler, so it never
reaches torch's worker loop, as the deadlocked child does not. The job runs under the real `torchrun` on 2 CPU ranks
with fastai `DataLoaders` and 2 workers per rank; each launch is bounded, and a launch that does not end fails the test
with the ranks that did not report a result. `test_named_before_a_slow_close` makes the launcher's SIGTERM reach rank 0
while its fit closes (torchrun's `--monitor-interval 3`, a close 10 s long): the failure must be said before the close."""
from __future__ import annotations
import os, sys, json, time, subprocess
from pathlib import Path
import pytest, torch
from conftest import run_job, left_behind

ROOT = Path(__file__).resolve().parents[1]
SCRIPT, TORCHRUN = ROOT/'tests'/'scripts'/'launcher_train.py', Path(sys.executable).parent/'torchrun'
LIMIT = 240

def launch(run:Path, *extra) -> str:
    "torchrun with `launcher_train.py` for 2 epochs: its output; fails naming the ranks without a RESULT past `LIMIT` seconds"
    cmd = [str(TORCHRUN), '--nproc_per_node', '2', str(SCRIPT), str(run), '2', '--marks', str(run/'marks'), '--out', str(run/'w'),
           '--slow', '0', *map(str, extra)]
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', 'DDPSAFE_TIMEOUT': '60'}
    try: p = subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT, env=env, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        marks = {r: (run/'marks'/f'rank{r}.log') for r in (0, 1)}
        missing = [r for r, f in marks.items() if not f.exists() or 'RESULT' not in f.read_text()]
        pytest.fail(f'torchrun did not end within {LIMIT}s: ranks {missing} reported no result\n{(e.stdout or b"")[-3000:]}')
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    return p.stdout + p.stderr

def test_stuck_worker_started_again(tmp_path):
    "Rank 1's first worker never starts: it is killed and started again once, with a warning; the weights are a plain run's"
    plain = launch(tmp_path/'plain')
    out = launch(tmp_path/'stuck', '--hang-first-fork', 1, '--worker-start-seconds', 3)
    assert 'HANG in a forked worker' in out, out[-3000:]
    warned = [l for l in out.splitlines() if 'did not reach its loop within 3s of the fork' in l]
    assert len(warned) == 1 and 'rank 1' in warned[0], out[-3000:]
    assert 'HANG in a forked worker' not in plain, plain[-3000:]   # nothing hangs on purpose there; a worker it started again anyway
    # (slow to start on a loaded machine, or gh-112275 itself: a CI run saw it) must still give the same weights, checked here:
    for r in (0, 1):
        a, b = torch.load(tmp_path/f'plain/w.rank{r}'), torch.load(tmp_path/f'stuck/w.rank{r}')
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f'rank {r}: weights differ from the plain run'

# ---------------------------------------------------------------------------------------------------------------
# A rank that waits on itself is named, writes its stacks and exits by itself (tests/scripts/failing_train.py)

STUCK = {'DDPSAFE_TIMEOUT': '20'}

def check_named(code, out, left, *expected):
    "The job failed, rank 0 named rank 1 and where it waits, rank 1 wrote its stacks and exited by itself, nothing is left"
    assert code not in (0, None), out[-4000:]
    for e in ('training failed on rank 0: rank 1 has waited', 'ddpsafe: rank 1 has waited', 'Its Python stacks, then exit 1',
              'most recent call first', *expected):
        assert e in out, f'{e!r} not in the output:\n{out[-5000:]}'
    assert 'SIGKILL' not in out and 'exitcode  : -9' not in out, out[-3000:]
    assert left == [], f'processes left behind: {left}'

def same_weights(a:Path, b:Path):
    for r in (0, 1):
        x, y = torch.load(f'{a}.rank{r}'), torch.load(f'{b}.rank{r}')
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), f'rank {r}: the weights differ'

def test_item_that_never_comes(tmp_path):
    "A dataset item blocks forever on rank 1 in epoch 1: named within DDPSAFE_TIMEOUT plus seconds; the rerun resumes exactly"
    code, secs, out, left = run_job(tmp_path/'run', 'block', ranks=2, env=STUCK)
    check_named(code, out, left, 'for its DataLoader (worker pid ', 'has not answered), at step ')
    assert secs < 60, f'{secs:.0f}s'   # DDPSAFE_TIMEOUT=20 plus start-up and one beat: 35 s here; the default would be 30 minutes
    v = subprocess.run([str(Path(sys.executable).parent/'ddpsafe-verify'), str(tmp_path/'run'/'checkpoints')], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    code, _, out, _ = run_job(tmp_path/'run', 'none', '--out', tmp_path/'resumed', ranks=2)
    assert code == 0 and 'ddpsafe: resumed from ' in out, out[-3000:]
    code, _, out, _ = run_job(tmp_path/'plain', 'none', '--out', tmp_path/'plain-w', ranks=2)
    assert code == 0, out[-3000:]
    same_weights(tmp_path/'resumed', tmp_path/'plain-w')

def test_callback_waiting_on_a_lock(tmp_path):
    "Rank 1's main thread blocks on a lock in a callback at step 9: named the same way"
    code, secs, out, left = run_job(tmp_path/'run', 'lock', ranks=2, env=STUCK)
    check_named(code, out, left, 'in callback Boom.after_batch (failing_train.py:', 'at step 9')

def test_named_before_a_slow_close(tmp_path):
    """The same, with rank 0's fit 10 s slow to close after the signals have their handlers back, and torchrun looking at
    its workers every 3 s: its SIGTERM comes while rank 0 closes and ends it there, so the failure must be said before"""
    code, secs, out, _ = run_job(tmp_path/'run', 'lock', '--slow-close', 10, ranks=2, env=STUCK, torchrun_args=('--monitor-interval', '3'))
    deadline = time.monotonic() + 10      # a rank ended by SIGTERM leaves its loader's workers to torch's watchdog: 5 s
    while left_behind(tmp_path/'run') and time.monotonic() < deadline: time.sleep(0.5)
    check_named(code, out, left_behind(tmp_path/'run'), 'in callback Boom.after_batch (failing_train.py:', 'at step 9')
    assert secs < 60 and 'exitcode  : -15' in out, f'{secs:.0f}s: rank 0 was not ended by the SIGTERM during its close\n{out[-2000:]}'
