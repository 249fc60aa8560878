"""Issue 12: every fastai entry point with ddpsafe's callbacks on the `Learner`, as fastai's docs give them.

Each entry point runs on a fresh learner (same seed) with the callbacks in `Learner(cbs=...)`, for each set of callbacks
(none, `SaveModelCallback`, `CheckpointCallback`, both, `CheckpointCallback(async_save=True)`), in one process and on
2 ranks (fits inside `distrib_ctx`, the rest after it, as scripts do). Every cell must give what the same learner gives
without callbacks (the same numbers, or the same error where stock fastai itself fails, as `show_results` does on data
that cannot show itself), and leave the signal handlers as it found them. Then `export` -> `load_learner` in a fresh
process that has no checkpoint folder (without ddpsafe: tests/test_export.py)."""
from __future__ import annotations
import os, sys, signal, shutil, tempfile, subprocess, textwrap
from pathlib import Path
import pytest, torch
from fastai.learner import Learner
from fastai.callback.tracker import SaveModelCallback
from fastai.callback.progress import ProgressCallback
import fastai.callback.schedule, fastai.distributed
from ddpsafe.callback.checkpoint import CheckpointCallback
from ddpsafe.dist.collectives import world, barrier
from ddpsafe.testing import run_ranks, synth_learner

CB_SETS = {'none': lambda: [], 'savemodel': lambda: [SaveModelCallback()], 'checkpoint': lambda: [CheckpointCallback(every_steps=2)],
           'both': lambda: [SaveModelCallback(), CheckpointCallback(every_steps=2)],
           'async': lambda: [CheckpointCallback(every_steps=2, async_save=True)]}

def _ddp(learn):
    "`distrib_ctx` on several ranks, nothing in one process"
    import contextlib
    return learn.distrib_ctx() if world() > 1 else contextlib.nullcontext()

def _weights(learn): return torch.cat([p.detach().flatten() for p in learn.model.parameters()]).tolist()

def _fit(learn, *calls):
    with _ddp(learn):
        for name, args in calls: getattr(learn, name)(*args)
    return dict(weights=_weights(learn), losses=[float(o) for o in learn.recorder.losses])

ENTRIES = {
    'validate':        lambda l: [float(o) for o in l.validate()],
    'get_preds':       lambda l: l.get_preds()[0].tolist(),
    'get_preds_dec':   lambda l: l.get_preds(with_decoded=True)[2].tolist(),
    'get_preds_order': lambda l: l.get_preds(reorder=False)[0].tolist(),
    'get_preds_test':  lambda l: l.get_preds(dl=l.dls.test_dl([l.dls.valid_ds.items[i] for i in range(5)]))[0].tolist(),
    'predict':         lambda l: [o.tolist() for o in l.predict(l.dls.valid_ds.items[0])],
    'show_results':    lambda l: l.show_results(),
    'lr_find':         lambda l: (round(float(l.lr_find(num_it=12, show_plot=False).valley), 12), _weights(l)),
    'fit':             lambda l: _fit(l, ('fit', (2, 1e-2))),
    'fit_twice':       lambda l: _fit(l, ('fit', (1, 1e-2)), ('fit', (1, 1e-2))),
    'fit_then_cycle':  lambda l: _fit(l, ('fit', (1, 1e-2)), ('fit_one_cycle', (1, 1e-2))),
    'fine_tune':       lambda l: _fit(l, ('fine_tune', (1, 1e-2))),
}

def _handlers(): return [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)]

def matrix(folder) -> dict:
    "{(cb_set, entry): (result or error type, handlers unchanged)} on this rank"
    out = {}
    for cb_name, cbs in CB_SETS.items():
        for entry, call in ENTRIES.items():
            learn = synth_learner(path=Path(folder)/cb_name/entry, cbs=cbs())
            learn.remove_cb(ProgressCallback)
            before = _handlers()
            try: res = call(learn)
            except Exception as e: res = f'raised {type(e).__name__}'
            out[cb_name, entry] = (res, _handlers() == before)
            barrier()
    return out

def check(results:dict):
    "Every cell equals the no-callback cell of its entry point, and left the handlers alone"
    bad = []
    for (cb_name, entry), (res, handlers_ok) in results.items():
        want = results['none', entry][0]
        if res != want: bad.append(f'{cb_name} x {entry}: {str(res)[:120]} != stock {str(want)[:120]}')
        if not handlers_ok: bad.append(f'{cb_name} x {entry}: signal handlers left changed')
    assert not bad, '\n'.join(bad)
    errors = {e for (c, e), (r, _) in results.items() if isinstance(r, str)}
    assert errors == {'show_results'}, f'entry points that failed even without callbacks: {errors}'

@pytest.mark.timeout(300)
def test_entry_points_one_process(tmp_path):
    check(run_ranks(matrix, n=1, args=(tmp_path,), init=False, timeout=280)[0])

@pytest.mark.timeout(600)
def test_entry_points_two_ranks(tmp_path):
    r0, r1 = run_ranks(matrix, n=2, args=(tmp_path,), timeout=580)
    check(r0); check(r1)
    assert {k: v[0] for k, v in r0.items()} == {k: v[0] for k, v in r1.items()}, 'the ranks disagree'

def export(folder, cb_name):
    "Train with the callbacks on the learner, then export it (rank 0 writes, atomically)"
    learn = synth_learner(path=folder, cbs=CB_SETS[cb_name]())
    learn.remove_cb(ProgressCallback)
    with _ddp(learn): learn.fit(1, 1e-2)
    learn.export()
    x = torch.stack([x for x, _ in learn.dls.valid_ds.items])
    with torch.no_grad(): return learn.model(x).tolist()       # what the trained model predicts, in order


LOAD = '''
import sys, json, signal
from fastai.learner import load_learner
from fastai.callback.progress import ProgressCallback
from ddpsafe.testing import synth_dls
learn = load_learner('export.pkl')
learn.remove_cb(ProgressCallback)
before = signal.getsignal(signal.SIGTERM)
dls = synth_dls(seed=0)
preds = learn.get_preds(dl=learn.dls.test_dl([dls.valid_ds.items[i] for i in range(len(dls.valid_ds))]))[0]
print(json.dumps(dict(preds=preds.tolist(), cbs=[type(c).__name__ for c in learn.cbs],
                      handler_same=signal.getsignal(signal.SIGTERM) is before)))
'''

@pytest.mark.timeout(300)
@pytest.mark.parametrize('cb_name', ['both', 'async'])
def test_export_then_load_learner_elsewhere(tmp_path, cb_name):
    "The exported learner loads in a fresh process, in another folder, with no checkpoint folder, and predicts the same"
    import json
    train = tmp_path/'train'
    preds = run_ranks(export, n=2, args=(train, cb_name), timeout=280)[0]
    there = tmp_path/'elsewhere'; there.mkdir()
    shutil.copy(train/'export.pkl', there/'export.pkl'); shutil.rmtree(train)
    out = subprocess.run([sys.executable, '-c', LOAD], cwd=there, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert 'CheckpointCallback' not in res['cbs'] and res['handler_same'], res     # ddpsafe's callbacks stay out of the file (issue 34)
    assert ('SaveModelCallback' in res['cbs']) == (cb_name == 'both'), res
    assert torch.allclose(torch.tensor(res['preds']), torch.tensor(preds)), 'the loaded learner predicts otherwise'
    assert not (there/'checkpoints').exists()
