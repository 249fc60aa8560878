"""Proof (issue 34): an exported learner needs only fastai.

A learner trains with ddpsafe's `CheckpointCallback` given to `Learner(cbs=...)`, to `learn.add_cb`, or to one
`fit(cbs=...)`, in one process, and on 2 ranks under `distrib_ctx` (rank 0 writes), beside a `SaveModelCallback`; then
`learn.export()`. Each file is loaded with `load_learner` and asked to `predict` in a Python that cannot import ddpsafe
(`ddpsafe.testing.run_without`: `python -I`, with an import hook that refuses the package as if it were not installed),
and must predict what the trained learner predicted. The same check on fastai's own `export` fails: the proof can fail.
Last, the learner in memory trains on after `export`: a run stopped after it resumes to the uninterrupted run's weights,
bit for bit.

    python -m pytest tests/test_export.py"""
from __future__ import annotations
import json
from pathlib import Path
import pytest, torch
from fastai.callback.core import Callback
from fastai.callback.tracker import SaveModelCallback
import fastai.distributed     # distrib_ctx, and fastai's progress bar (`no_bar`)
from ddpsafe.callback.checkpoint import CheckpointCallback
from ddpsafe.patches.learner import fastai_stock, pickled_modules, load_learner, _pickle_of
from ddpsafe.storage.manifest import newest_complete, read_manifest
from ddpsafe.testing import run_ranks, run_without, synth_learner

X = [0.1, -0.2, 0.3, 0.5]     # the input every learner here predicts from
HOWS = ('Learner', 'add_cb', 'fit')

def predict(learn) -> float:
    "What `learn` predicts for `X`"
    with learn.no_bar(): return learn.predict((torch.tensor(X), torch.zeros(1)))[2].item()

def trained(folder, how:str, epochs:int=1):
    "A learner trained with a `SaveModelCallback`, and a `CheckpointCallback` given to `how`"
    cb = CheckpointCallback()
    learn = synth_learner(path=folder, cbs=[SaveModelCallback()] + ([cb] if how == 'Learner' else []))
    if how == 'add_cb': learn.add_cb(cb)
    with learn.no_bar(), learn.no_logging(): learn.fit(epochs, cbs=cb if how == 'fit' else None)
    return learn

def ddp_export(folder):
    "Train on 2 ranks in `distrib_ctx`, export after it as scripts do (rank 0 writes); what the trained model predicts"
    cb = CheckpointCallback()
    learn = synth_learner(path=folder, cbs=[SaveModelCallback(), cb])
    with learn.distrib_ctx(), learn.no_bar(), learn.no_logging(): learn.fit(2)
    learn.export()
    return predict(learn), learn.cbs.index(cb)

LOAD = f'''
import json, warnings, torch; warnings.simplefilter('ignore')
try:
    import ddpsafe
    raise SystemExit('ddpsafe is importable here: this is no test')
except ModuleNotFoundError: pass
from fastai.learner import load_learner
out = {{}}
for f in json.load(open('files.json')):
    learn = load_learner(f)
    out[f] = dict(pred=learn.predict((torch.tensor({X}), torch.zeros(1)))[2].item(), cbs=[type(c).__name__ for c in learn.cbs])
print(json.dumps(out))
'''

def load_without_ddpsafe(files:list, folder) -> dict:
    "{file: its prediction and callbacks}, loaded where ddpsafe cannot be imported"
    (Path(folder)/'files.json').write_text(json.dumps([str(f) for f in files]))
    out = run_without(LOAD, cwd=folder)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])

@pytest.mark.timeout(300)
def test_export_loads_without_ddpsafe(tmp_path):
    preds, files = {}, {}
    for how in HOWS:
        learn = trained(tmp_path/how, how)
        before = list(learn.cbs)
        files[how] = learn.export()
        assert len(learn.cbs) == len(before) and all(a is b for a, b in zip(before, learn.cbs)), f'{how}: the callbacks changed'
        preds[how] = predict(learn)
    (p0, at0), (p1, at1) = run_ranks(ddp_export, n=2, args=(tmp_path/'ddp',), timeout=240)
    assert p0 == p1 and at0 == at1, 'the ranks disagree'
    preds['ddp'], files['ddp'] = p0, tmp_path/'ddp'/'export.pkl'
    for how, f in files.items():
        left = _pickle_of(f).count(b'ddpsafe')
        assert left == 0, f'{how}: {f} names ddpsafe {left} times; modules: {sorted(m for m in pickled_modules(f) if "ddpsafe" in m)}'
    loaded = load_without_ddpsafe(list(files.values()), tmp_path)
    for how, f in files.items():
        got = loaded[str(f)]
        assert got['pred'] == pytest.approx(preds[how], rel=1e-6), f'{how}: loaded without ddpsafe, it predicts otherwise'
        assert 'SaveModelCallback' in got['cbs'] and 'CheckpointCallback' not in got['cbs'], (how, got['cbs'])

@pytest.mark.timeout(300)
def test_stock_export_fails_without_ddpsafe(tmp_path):
    "fastai's own export keeps the `CheckpointCallback`: where ddpsafe is missing, `load_learner` fails; where it is, it loads"
    learn = trained(tmp_path, 'Learner')
    fastai_stock['Learner.export'](learn)
    f = tmp_path/'export.pkl'
    assert b'ddpsafe' in _pickle_of(f) and 'ddpsafe.callback.checkpoint' in pickled_modules(f)
    (tmp_path/'files.json').write_text(json.dumps([str(f)]))
    out = run_without(LOAD, cwd=tmp_path)
    assert out.returncode != 0, 'the stock export loaded without ddpsafe: this test could not tell the difference'
    assert "UnboundLocalError: cannot access local variable 'res' where it is not associated with a value" in out.stderr, out.stderr[-3000:]
    old = load_learner(f)      # ddpsafe installed: a file exported by an older ddpsafe loads as before
    assert 'CheckpointCallback' in [type(c).__name__ for c in old.cbs]
    assert predict(old) == pytest.approx(predict(learn), rel=1e-6)


class Touch(Callback):
    "Create the stop switch at step `at` of this fit"
    order = CheckpointCallback.order - 1
    def __init__(self, at): self.at = at
    def after_batch(self):
        if self.training and self.train_iter == self.at: (Path(self.learn.path)/'checkpoints'/'stop-now').touch()

def run(folder, export=False, stop_at=None) -> torch.Tensor:
    "fit 1 epoch, `export` or not, fit 2 more (stopped after step `stop_at` of that fit); the final weights"
    learn = synth_learner(path=folder, cbs=CheckpointCallback(every_epoch=1))
    with learn.no_bar(), learn.no_logging():
        learn.fit(1)
        if export: learn.export()
        learn.fit(2, cbs=Touch(stop_at) if stop_at is not None else None)
    return torch.cat([p.detach().flatten() for p in learn.model.parameters()])

@pytest.mark.timeout(300)
def test_export_then_train_and_resume(tmp_path):
    "After `export`, training goes on unchanged, and the checkpoints it writes resume bit for bit"
    whole = run(tmp_path/'whole')
    assert torch.equal(run(tmp_path/'exported', export=True), whole), 'training after export differs'
    stopped = run(tmp_path/'stopped', export=True, stop_at=3)
    assert not torch.equal(stopped, whole)
    ck = newest_complete(tmp_path/'stopped'/'checkpoints')
    man = read_manifest(ck)
    assert man['fit'] == 1 and man['reason'] == 'switch', man                   # written by the fit after the export
    resumed = run(tmp_path/'stopped')                                           # a fresh learner, as a restarted script
    assert torch.equal(resumed, whole), 'the resumed run differs from the uninterrupted one'
