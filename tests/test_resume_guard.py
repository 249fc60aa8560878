"""Issue 12: no silent wrong resume. Each case that used to resume quietly into another run than the one asked for now
fails on every rank with both sides named, or behaves as documented; on 2 real ranks (gloo), callbacks on the `Learner`."""
from __future__ import annotations
import io, pickle, contextlib
from pathlib import Path
import pytest, torch
from fastai.callback.core import Callback
from fastai.callback.progress import ProgressCallback
from fastai.callback.training import GradientAccumulation
from fastai.optimizer import SGD
import fastai.callback.schedule, fastai.distributed
from ddpsafe.callback.checkpoint import CheckpointCallback
from ddpsafe.dist.collectives import rank
from ddpsafe.storage.manifest import checkpoints, read_manifest, MANIFEST, file_digest
from ddpsafe.testing import run_ranks, synth_learner

class StopAt(Callback):
    "Create the stop switch after training batch `at` (rank 0)"
    order = CheckpointCallback.order - 1
    def __init__(self, at): self.at = at
    def after_batch(self):
        if self.training and self.train_iter == self.at and rank() == 0: (Path(self.learn.path)/'checkpoints'/'stop-now').touch()

def train(folder, how='fit_one_cycle', n_epoch=2, opt_func=None, extra=(), accept=(), out=False):
    "One rank: a learner with the callbacks on it, trained inside `distrib_ctx`; what it printed, its weights"
    kw = dict(opt_func=opt_func) if opt_func else {}
    learn = synth_learner(path=folder, cbs=[CheckpointCallback(accept_changes=accept, exit_code=None), *extra], **kw)
    learn.remove_cb(ProgressCallback)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), learn.distrib_ctx(): getattr(learn, how)(n_epoch, 1e-2)
    return buf.getvalue(), learn.model.weight.detach().clone(), learn.train_iter

def run2(*args, **kwargs): return run_ranks(train, n=2, args=args, kwargs=kwargs, timeout=150)

def errors(folder, *args, **kwargs):
    "The exception each rank raised"
    return [o for o in run_ranks(train, n=2, args=(folder, *args), kwargs=kwargs, timeout=150, raises=False)]

@pytest.mark.timeout(300)
def test_other_optimizer_is_refused_on_every_rank(tmp_path):
    run2(tmp_path, extra=[StopAt(2)])
    errs = errors(tmp_path, opt_func=SGD)
    assert all(type(e).__name__ == 'CheckpointMismatch' for e in errs), errs
    msg = str(errs[0])
    assert str(errs[1]) == msg and 'optimizer: Adam' in msg and 'SGD' in msg and "accept_changes=('optimizer',)" in msg, msg
    outs = run2(tmp_path, opt_func=SGD, accept='optimizer')          # stated on purpose: weights kept, SGD starts afresh
    assert 'with the changes you accepted: optimizer: Adam' in outs[0][0] and outs[1][0] == ''

@pytest.mark.timeout(300)
def test_other_schedule_is_refused_on_every_rank(tmp_path):
    run2(tmp_path, extra=[StopAt(2)])
    errs = errors(tmp_path, n_epoch=3)
    assert all(type(e).__name__ == 'CheckpointMismatch' for e in errs), errs
    assert 'fit_one_cycle of 2 epochs' in str(errs[0]) and 'fit_one_cycle of 3 epochs' in str(errs[1])

@pytest.mark.timeout(300)
def test_finished_run_again_loads_its_weights(tmp_path):
    (_, w, _), _ = run2(tmp_path, how='fit')
    (out0, w0, it0), (out1, w1, _) = run2(tmp_path, how='fit')
    assert torch.equal(w0, w) and torch.equal(w1, w), 'the rerun over a finished run does not hold the trained weights'
    assert 'this fit already finished in' in out0 and 'nothing left to train' in out0 and out1 == '', (out0, out1)
    (out0, w0, it0), _ = run2(tmp_path, how='fit', n_epoch=3)       # a plain fit asking for more goes on
    assert 'resumed from' in out0 and 'the end of epoch 1' in out0 and not torch.equal(w0, w), out0

@pytest.mark.timeout(300)
def test_accumulation_waits_for_the_optimizer_step(tmp_path):
    "A stop inside an accumulation window is taken at its optimizer step; the resumed run is bit-identical"
    acc = lambda: GradientAccumulation(n_acc=16)        # 2 batches of 8 per step; 3 batches per rank per epoch
    (_, whole, _), _ = run2(tmp_path/'whole', how='fit', extra=[acc()])
    (_, _, stopped_at), _ = run2(tmp_path/'run', how='fit', extra=[acc(), StopAt(2)])
    assert stopped_at == 4, f'stopped after batch {stopped_at}: not at an optimizer step'     # asked at 3 (one step late), taken at 4
    assert [p.name for p in checkpoints(tmp_path/'run'/'checkpoints')] == ['step-00000002']
    (out, w, _), _ = run2(tmp_path/'run', how='fit', extra=[acc()])
    assert 'after training batch 1 of 3' in out, out                   # the message counts training batches
    assert torch.equal(w, whole), 'resumed run differs from the uninterrupted one'

class Evil:
    def __reduce__(self): return (print, ('pwned',))

@pytest.mark.timeout(300)
def test_unpicklable_state_names_the_file_and_what_to_do(tmp_path):
    run2(tmp_path, extra=[StopAt(2)])
    ck = checkpoints(tmp_path/'checkpoints')[-1]
    torch.save({'x': Evil()}, ck/'state.pt')
    m = read_manifest(ck)                                              # a forged file that still matches its manifest
    m['files']['state.pt'] = dict(size=(ck/'state.pt').stat().st_size, xxh3=file_digest(ck/'state.pt'))
    import json; (ck/MANIFEST).write_text(json.dumps(m))
    errs = errors(tmp_path)
    assert all(type(e).__name__ == 'UnsafePickleError' for e in errs), errs
    msg = str(errs[0])
    assert str(ck/'state.pt') in msg and 'ddpsafe-verify' in msg and 'unsafe_pickle' not in msg, msg

@pytest.mark.timeout(300)
def test_read_only_folder_fails_alike_on_every_rank(tmpfs):
    "Issue 13: a checkpoint folder that holds checkpoints but can no longer be written: the same clear error on every rank"
    import subprocess
    tmpfs = tmpfs('64m')
    run2(tmpfs, extra=[StopAt(2)])
    before = {p.name: sorted(f.name for f in p.iterdir()) for p in checkpoints(tmpfs/'checkpoints')}
    subprocess.run(['mount', '-o', 'remount,ro', str(tmpfs)], check=True)
    errs = errors(tmpfs)
    assert all(isinstance(e, OSError) for e in errs), errs
    assert str(errs[0]) == str(errs[1]) and str(tmpfs/'checkpoints') in str(errs[0]) and 'read-only' in str(errs[0]).lower(), errs
    assert {p.name: sorted(f.name for f in p.iterdir()) for p in checkpoints(tmpfs/'checkpoints')} == before
