"""Proof (issue 33): `CheckpointCallback` with the loaders a PyTorch user hands to fastai, `DataLoaders(train, valid)`.

Each run is `tests/scripts/launcher_train.py --loader KIND` (3 epochs of 4 batches of 8 per rank, a `Dropout(0.2)` before
the `Linear`, two DataLoader workers per rank where the loader has workers), started the way `tests/test_launchers.py`
starts it (`Launch`): uninterrupted once; then again, with `SIGTERM` sent to the launched process (the script itself, or
`torchrun`) once rank 0 has logged step 5, which stops the run inside epoch 1 with exit code 75; then the same command to
the end. The final weights must equal the uninterrupted run's, bit for bit, on every rank.

- torch's `DataLoader(shuffle=True)`, one process: ddpsafe replays the epoch's draws; no note.
- torchdata's `StatefulDataLoader(shuffle=True)`, one process: it resumes by itself; no note.
- `TensorBatches`, an iterable ddpsafe knows nothing about, one process: the replay, and rank 0's note about it, once per run.
- torch's `DataLoader(shuffle=True)` under `torchrun --nproc_per_node 2`, where fastai's `distrib_ctx` turns it into a
  `DistributedDL` over a fastai `DataLoader`.

And: a run with torch's `DataLoader(persistent_workers=True)` exits (its workers ignore the stop signals), and a
`StatefulDataLoader`'s mid-epoch state goes through a `weights_only=True` load.

    python -m pytest tests/test_own_loaders.py -s        # about 80 s on 2 cores"""
from __future__ import annotations
import io, os, sys, signal
from pathlib import Path
import pytest, torch
from ddpsafe.testing import wait_until, WaitTimeout
from ddpsafe.callback.preempt import REQUEUE_EXIT_CODE
from ddpsafe.storage.manifest import newest_complete, read_manifest
from conftest import Launch, torchrun_cmd, needs_torchrun, report, ROOT
SCRIPT = ROOT/'tests'/'scripts'/'launcher_train.py'

N_EPOCH, SIGNAL_AFTER = 3, 5
ITEMS = {1: 40, 2: 84}     # 30 training items: 4 batches of 8; 63, split by fastai's DistributedDL: 4 batches of 8 per rank
NOTE = 'ddpsafe: the training loader TensorBatches keeps no state that ddpsafe can save'

def command(loader:str, n:int, run:Path, *extra) -> list:
    "`launcher_train.py` with `loader` on `n` ranks (`torchrun` for 2)"
    args = [str(SCRIPT), str(run), str(N_EPOCH), '--loader', loader, '--items', str(ITEMS[n]), '--workers', '2',
            '--dropout', '0.2', '--marks', str(run/'marks'), '--out', str(run/'w'), *map(str, extra)]
    return (torchrun_cmd() if n == 2 else [sys.executable]) + args

def final_weights(run:Path, n:int) -> list: return [torch.load(f'{run}/w.rank{r}', weights_only=True) for r in range(n)]
def same(a:dict, b:dict) -> bool: return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

def finished(l:Launch, timeout:float=120) -> Launch:
    "`l`, after it ended with exit code 0 on every rank"
    code = l.wait(timeout)
    assert code == 0 and [r and r['code'] for r in l.results()] == [0]*l.n, f'{l.name}: exit {code}\n{l.output()[-4000:]}'
    return l

def stop_and_resume(tools, tmp_path, loader:str, n:int=1) -> tuple:
    "Run uninterrupted; run, SIGTERM after step 5, check the stop; run to the end; check the weights. The three `Launch`es"
    whole = finished(Launch(command(loader, n, tmp_path/'whole'), tmp_path/'whole', tools, 'whole', n=n))
    run = tmp_path/'run'
    l = Launch(command(loader, n, run, '--slow', 0.2), run, tools, 'preempted', n=n)
    try: wait_until(lambda: f'STEP {SIGNAL_AFTER}' in l.marks(0) or l.proc.poll() is not None, 120, f'STEP {SIGNAL_AFTER}', rank=0, every=0.02)
    except WaitTimeout: l.kill(); pytest.fail(f'{loader}: rank 0 never logged step {SIGNAL_AFTER}\n{l.output()[-4000:]}')
    os.kill(l.proc.pid, signal.SIGTERM)          # the process launched: the script itself, or torchrun, which passes it on
    code = l.wait(120)
    res = l.results()
    assert [r and r['code'] for r in res] == [REQUEUE_EXIT_CODE]*n, f'rank exit codes {res}, launcher exit {code}\n{l.output()[-4000:]}'
    if n == 1: assert code == REQUEUE_EXIT_CODE, code
    man = read_manifest(newest_complete(run/'checkpoints'))
    assert man['reason'] == 'signal' and man['epoch'] == 1 and not man['epoch_done'], man      # inside epoch 1 (steps 5-8)
    again = finished(Launch(command(loader, n, run), run, tools, 'resumed', n=n))
    assert f'at epoch 1, after training batch {man["iter"]} of 4 (step {man["step"]})' in again.output(), again.output()[-3000:]
    report(loader=loader, ranks=n, stopped_at=man['step'], seconds=[whole.seconds, l.seconds, again.seconds])
    assert all(same(a, b) for a, b in zip(final_weights(run, n), final_weights(tmp_path/'whole', n))), \
        f'{loader} on {n} rank(s): the resumed run ends with other weights than the uninterrupted one'
    return whole, l, again

@pytest.mark.slow   # in CI by the how-to page nbs/33_own_dataloader (killed mid-epoch, resumed bit for bit)
@pytest.mark.timeout(240)
def test_stateful_dataloader_resumes_by_itself(tools, tmp_path):
    "torchdata's `StatefulDataLoader`, 2 workers: its own state is in the checkpoint; ddpsafe draws no batch twice"
    for l in stop_and_resume(tools, tmp_path, 'stateful'): assert 'ddpsafe: the training loader' not in l.output()

@pytest.mark.slow   # in CI by the how-to page nbs/33_own_dataloader (killed mid-epoch, resumed bit for bit)
@pytest.mark.timeout(240)
def test_torch_dataloader(tools, tmp_path):
    "torch's `DataLoader(shuffle=True)`, 2 workers: the epoch's order and the workers' seed come from the generator restored as the epoch began"
    for l in stop_and_resume(tools, tmp_path, 'torch'): assert 'ddpsafe: the training loader' not in l.output()

@pytest.mark.timeout(240)
def test_unknown_iterable(tools, tmp_path):
    "An iterable of batches ddpsafe knows nothing about: it trains, rank 0 says once per run what a resume does, and the replay is exact"
    for l in stop_and_resume(tools, tmp_path, 'batches'): assert l.output().count(NOTE) == 1, l.output()[-3000:]

@needs_torchrun
@pytest.mark.timeout(300)
def test_torch_dataloader_two_ranks(tools, tmp_path):
    "torch's `DataLoader(shuffle=True)` under `torchrun` on 2 ranks: fastai's `DistributedDL` path"
    for l in stop_and_resume(tools, tmp_path, 'torch', n=2): assert 'ddpsafe: the training loader' not in l.output()

@pytest.mark.timeout(120)
def test_persistent_workers_let_the_process_exit(tools, tmp_path):
    "torch's `DataLoader(persistent_workers=True)`: its workers, started with the stop signals blocked, end with the fit, not never"
    finished(Launch(command('torch', 1, tmp_path, '--persistent-workers'), tmp_path, tools, 'persistent', n=1), 60)

def test_stateful_state_loads_safely():
    "A `StatefulDataLoader`'s mid-epoch state, with workers, through `torch.save` and a `weights_only=True` load with fastai's safe globals"
    from torchdata.stateful_dataloader import StatefulDataLoader
    from ddpsafe.patches.learner import fastai_safe_globals
    from ddpsafe.callback.checkpoint import loader_state, set_loader_state
    items = torch.utils.data.TensorDataset(torch.arange(24.))
    def loader(): return StatefulDataLoader(items, batch_size=4, shuffle=True, num_workers=2)
    dl = loader(); it = iter(dl); next(it); next(it)
    f = io.BytesIO(); torch.save(loader_state(dl), f); f.seek(0)
    with torch.serialization.safe_globals(fastai_safe_globals()): s = torch.load(f, weights_only=True)
    rest = [b[0].tolist() for b in it]
    again = loader()
    assert set_loader_state(again, s) and [b[0].tolist() for b in again] == rest
