"""Proof (issue 27): fastai's text application under DDP, preempted and resumed bit for bit, under the real `torchrun`.

Each run is `tests/scripts/text_train.py` on 2 CPU ranks, as a user writes it: `language_model_learner(dls_lm, AWD_LSTM,
pretrained=False)` fit 2 epochs, `save_encoder('enc')`, `text_classifier_learner` (same vocabulary), `load_encoder('enc')`,
fit 2 epochs, `export()`; fastai's loaders with 2 DataLoader workers per rank, `CheckpointCallback` on each fit (stock
fastai cannot even start the language model here: its loader split across ranks fails in `fa_collate`, see
`nbs/64_patches.text.ipynb`). Uninterrupted once; then `SIGTERM` is sent to `torchrun`'s own pid once rank 0 has logged a
chosen step (every rank waits there for the signal, so the checkpoint is always that of the next step: no sleep, no
race), the run exits 75 on every rank, and the same command runs on. The final weights of every rank must equal the
uninterrupted run's, bit for bit.

- `test_resume_at_epoch_end`: the language model stopped at the last batch of its first epoch (its hidden state is
  reset as the next epoch begins, so the checkpoint holds everything it needs), then the classifier stopped inside its
  first epoch (its `SentenceEncoder` starts every batch from zeros); `export` → `load_learner` → `predict` in a fresh
  Python without ddpsafe gives the uninterrupted run's prediction.
- `test_resume_inside_epoch`: the language model stopped at the 3rd batch of its second epoch. AWD_LSTM starts each
  batch from the hidden state the previous one left; the resume is exact only once that state is a part of the
  checkpoint (`ddpsafe.patches.text.HiddenState`, each rank's own), put back right before the resumed batch. Until the
  checkpoint registry holds that part, this test fails on its last assertion (every weight tensor differs).

    python -m pytest tests/test_text.py -s        # 7 launches, each of them mostly imports"""
from __future__ import annotations
import os, json, signal
from pathlib import Path
import pytest, torch
from ddpsafe.testing import wait_until, WaitTimeout, run_without
from ddpsafe.callback.preempt import REQUEUE_EXIT_CODE
from ddpsafe.storage.manifest import newest_complete, read_manifest
from conftest import Launch, torchrun_cmd, needs_torchrun, report, env

SCRIPT = Path(__file__).parent/'scripts'/'text_train.py'
FITS = ('lm', 'clas')
pytestmark = needs_torchrun

def command(run:Path, *extra) -> list:
    "`text_train.py` on 2 ranks under `torchrun`"
    return torchrun_cmd() + [str(SCRIPT), str(run), '--marks', str(run/'marks'), '--out', str(run/'w'), *map(str, extra)]

def finished(l:Launch, timeout:float=240) -> Launch:
    "`l`, after it ended with exit code 0 on every rank"
    code = l.wait(timeout)
    assert code == 0 and [r and r['code'] for r in l.results()] == [0, 0], f'{l.name}: exit {code}\n{l.output()[-4000:]}'
    return l

def final(run:Path, fit:str) -> list: return [torch.load(f'{run}/w/{fit}.rank{r}', weights_only=True) for r in range(2)]

def differ(a:dict, b:dict) -> str|None:
    "`None` if the weights `a` and `b` are bit-identical, else how many tensors differ and by how much at most"
    assert a.keys() == b.keys()
    d = {k: (a[k].float()-b[k].float()).abs().max().item() for k in a if not torch.equal(a[k], b[k])}
    return f'{len(d)} of {len(a)} tensors differ, by up to {max(d.values()):.3g} ({max(d, key=d.get)})' if d else None

@pytest.fixture(scope='module')
def whole(tools, tmp_path_factory) -> dict:
    "The uninterrupted run: its folder, each rank's batches per epoch of each fit"
    run = tmp_path_factory.mktemp('text')/'whole'
    l = finished(Launch(command(run), run, tools, 'whole'))
    report(text='uninterrupted', seconds=l.seconds)
    return dict(run=run, batches=l.results()[0]['batches'])

def stopped(tools, run:Path, name:str, fit:str, step:int, *extra) -> dict:
    "Run until rank 0 logs `step` of `fit`, send SIGTERM to torchrun, check the stop; the checkpoint's manifest"
    l = Launch(command(run, '--signal-at', f'{fit}:{step}', *extra), run, tools, name)
    try: wait_until(lambda: f'STEP {fit} {step}' in l.marks(0) or l.proc.poll() is not None, 240, f'STEP {fit} {step}', rank=0, every=0.02)
    except WaitTimeout: l.kill(); pytest.fail(f'{name}: rank 0 never logged step {step} of {fit}\n{l.output()[-4000:]}')
    os.kill(l.proc.pid, signal.SIGTERM)              # torchrun's own pid: it passes the signal on to its ranks
    code = l.wait(120)
    res = l.results()
    assert [r and r['code'] for r in res] == [REQUEUE_EXIT_CODE]*2, f'{name}: rank exit codes {res}, torchrun exit {code}\n{l.output()[-4000:]}'
    man = read_manifest(newest_complete(run/f'{fit}_checkpoints'))
    assert man['reason'] == 'signal' and man['step'] == step + 1, man        # the step after the signal: agreed a step late
    report(text=name, fit=fit, stopped_at=man['step'], epoch=man['epoch'], iter=man['iter'], seconds=l.seconds)
    return man

def predict_fresh(export:Path) -> torch.Tensor:
    "The exported classifier's prediction, in a fresh Python where ddpsafe cannot be imported"
    code = f"import sys, runpy; sys.argv = ['text_train.py', '.', '--predict', {str(export)!r}]; runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    p = run_without(code, cwd=export.parent, timeout=120)
    line = next((l for l in p.stdout.splitlines() if l.startswith('PREDICTED ')), None)
    assert p.returncode == 0 and line, p.stdout[-2000:] + p.stderr[-4000:]
    return torch.tensor(json.loads(line[len('PREDICTED '):])['probs'])

@pytest.mark.timeout(600)
def test_resume_at_epoch_end(tools, whole, tmp_path):
    "The language model stopped at the last batch of an epoch, the classifier inside one; both resume bit for bit"
    run, n = tmp_path/'run', whole['batches']
    man = stopped(tools, run, 'lm-stopped', 'lm', n['lm'] - 1)
    assert man['epoch'] == 0 and man['iter'] == n['lm'] and not man['epoch_done'], man
    man = stopped(tools, run, 'clas-stopped', 'clas', 2)
    assert man['epoch'] == 0 and man['iter'] == 3 and not man['epoch_done'], man
    again = finished(Launch(command(run), run, tools, 'resumed'))
    report(text='resumed to the end', seconds=again.seconds)
    for fit in FITS:
        for r, (a, b) in enumerate(zip(final(run, fit), final(whole['run'], fit))):
            assert not (d := differ(a, b)), f'{fit}, rank {r}: the resumed run ends with other weights than the uninterrupted one: {d}'
    probs = torch.load(whole['run']/'w'/'predict.pt', weights_only=True)
    assert torch.equal(predict_fresh(run/'export.pkl'), probs), 'the exported classifier predicts otherwise in a fresh process'

@pytest.mark.timeout(600)
def test_resume_inside_epoch(tools, whole, tmp_path):
    "The language model stopped at the 3rd batch of its 2nd epoch: the resume needs AWD_LSTM's hidden state"
    run, n = tmp_path/'run', whole['batches']
    man = stopped(tools, run, 'lm-stopped-inside', 'lm', n['lm'] + 2, '--lm-only')
    assert man['epoch'] == 1 and man['iter'] == 3 and not man['epoch_done'], man
    again = finished(Launch(command(run, '--lm-only'), run, tools, 'resumed-inside'))
    report(text='resumed to the end', seconds=again.seconds)
    for r, (a, b) in enumerate(zip(final(run, 'lm'), final(whole['run'], 'lm'))):
        assert not (d := differ(a, b)), (f'lm, rank {r}: resumed inside an epoch, the language model ends with other weights than the '
                                         f'uninterrupted one ({d}); is ddpsafe.patches.text.HiddenState a part of the checkpoint?')
