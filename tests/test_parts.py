"""Proof (the registry of parts): every piece of state a run carries comes back on resume, on every rank.

    python -m pytest tests/test_parts.py -s       # about 1 min on a quiet 2-core machine

1. Callbacks of the user's own with `state_dict()`/`load_state_dict()`, whose state changes at every step: `Steps` (the
   same on every rank) and `Tally` (a running sum and average of each rank's own losses: different on each rank). A run
   on 2 real ranks is sent SIGTERM on rank 1 in the middle of an epoch, saves, returns, and a new run resumes it. Their
   states at the end equal the uninterrupted run's on every rank, and so do the weights, with synchronous, asynchronous
   and sharded (FSDP2) saves. The checkpoint keeps `steps` once and `tally` per rank.
2. The mixed-precision loss scaler: a CPU `GradScaler` whose scale grows and backs off (skipping steps) during the run.
   After a resume its state (scale, growth tracker) and the weights equal the uninterrupted run's. The same resume
   without the scaler part (taken out of the registry) ends with other weights: the part is what makes it exact.
3. A checkpoint written before the parts had names (no `parts` in `state.pt`, no `user.pt`) still resumes, and rank 0
   names the parts it lacks. A new-format checkpoint that lacks a part the run has is refused on every rank, naming the
   part, unless `accept_changes='parts'`.

Every multi-rank run goes through `ddpsafe.testing.run_ranks`: a rank that hangs becomes `RanksFailed` naming it."""
from __future__ import annotations
import os, io, signal, shutil, tempfile, contextlib
from pathlib import Path
import pytest, torch
from torch.distributed.tensor import DTensor
from fastcore.foundation import L
from fastai.callback.core import Callback
from fastai.callback.fp16 import MixedPrecision
from fastai.callback.progress import ProgressCallback
import fastai.callback.schedule                      # fit_one_cycle
import fastai.distributed                            # distrib_ctx
from ddpsafe.all import *
import ddpsafe.state.parts as parts_mod
from ddpsafe.dist.collectives import rank
from ddpsafe.files.safe import safe_load
from ddpsafe.files.codec import torch_writer
from ddpsafe.patches.learner import fastai_safe_globals
from ddpsafe.storage.manifest import newest_complete, read_manifest, write_checkpoint, checkpoints
from ddpsafe.testing import run_ranks, synth_learner
from conftest import same_tree

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-parts-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)

def quiet(learn):
    "`learn` without the progress bars and the printed table"
    learn.remove_cbs([cb for cb in learn.cbs if isinstance(cb, ProgressCallback)])
    learn.logger = lambda *a, **k: None
    return learn

class Kill(Callback):
    "Send SIGTERM to this process at step `at` on rank `on`: a preemption in the middle of an epoch"
    order = CheckpointCallback.order - 1
    def __init__(self, at:int, on:int=1): self.at,self.on = at,on
    def after_batch(self):
        if self.training and self.train_iter == self.at and rank() == self.on: os.kill(os.getpid(), signal.SIGTERM)

class Steps(Callback):
    "Optimizer steps seen, and the last learning rate: the same on every rank"
    def before_fit(self): self.n, self.lr = 0, torch.zeros(())
    def after_step(self): self.n += 1; self.lr = torch.tensor(self.opt.hypers[-1]['lr'])
    def state_dict(self): return dict(n=self.n, lr=self.lr.clone())
    def load_state_dict(self, d): self.n, self.lr = d['n'], d['lr'].clone()

class Tally(Callback):
    "A running sum and average of this rank's own losses: different on each rank"
    def before_fit(self): self.total, self.ema = torch.zeros((), dtype=torch.float64), torch.zeros(())
    def after_batch(self):
        if not self.training: return
        loss = self.learn.loss.detach().float()
        self.total += loss.double(); self.ema = 0.9*self.ema + 0.1*loss
    def state_dict(self): return dict(total=self.total.clone(), ema=self.ema.clone())
    def load_state_dict(self, d): self.total, self.ema = d['total'].clone(), d['ema'].clone()

def mlp_learner(folder):
    learn = quiet(synth_learner(n=128, path=folder, seed=0))   # 12 training batches of 8: 6 per rank and epoch
    learn.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    return learn

def plain_weights(learn) -> dict:
    "The model's weights as plain tensors (a sharded model's gathered); collective for a sharded model"
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in learn.model.state_dict().items()}

def user_fit(folder, mode:str, kill_at:int|None=None):
    "Two epochs of `fit_one_cycle` with `Steps` and `Tally`, saved `mode`ly: (their states, the weights)"
    learn, steps, tally = mlp_learner(folder), Steps(), Tally()
    cbs = [CheckpointCallback(every_epoch=1, async_save=mode == 'async', exit_code=None, poll_seconds=0), steps, tally]
    if kill_at: cbs.append(Kill(kill_at))
    with (learn.fsdp_ctx(min_params=0) if mode == 'sharded' else learn.distrib_ctx()):
        learn.fit_one_cycle(2, 1e-2, cbs=cbs)
        weights = plain_weights(learn)
    return steps.state_dict(), tally.state_dict(), weights, learn.train_iter

@pytest.mark.timeout(300)
@pytest.mark.parametrize('mode', ['sync', 'async', 'sharded'])
def test_user_state_resumes_on_every_rank(folder, mode):
    whole = run_ranks(user_fit, args=(folder/'whole', mode), timeout=120)
    stopped = run_ranks(user_fit, args=(folder/'run', mode, 3), timeout=120)
    assert [n for *_, n in stopped] == [4, 4], f'both ranks stop at the step after the signal: {[n for *_, n in stopped]}'
    ck = newest_complete(folder/'run'/'checkpoints')
    man = read_manifest(ck)
    assert (man['reason'], man['epoch_done']) == ('signal', False), f'{ck}: {man}'     # in the middle of the epoch
    user = safe_load(ck/'user.pt')
    assert set(user['steps']) == {'one'} and set(user['tally']) == {'each'} and len(user['tally']['each']) == 2, user
    resumed = run_ranks(user_fit, args=(folder/'run', mode), timeout=120)
    for r, (w, s) in enumerate(zip(whole, resumed)):
        assert s[3] == w[3] == 12, f'rank {r}: {s[3]} steps after the resume, {w[3]} in the whole run'
        for i, name in enumerate(('Steps', 'Tally', 'the weights')):
            assert same_tree(s[i], w[i]), f'rank {r}: {name} after the resume {s[i]} differ from the uninterrupted run {w[i]}'
    assert not same_tree(whole[0][1], whole[1][1]), 'the two ranks should have tallied different losses'

# ---------------------------------------------------------------------------------------------------------------
# 2. The loss scaler

class CPUMixedPrecision(MixedPrecision):
    "fastai's `MixedPrecision` on the CPU: bfloat16 autocast and a CPU `GradScaler` (fastai's own asks for CUDA)"
    def before_fit(self):
        self.autocast, self.learn.scaler, self.scales = torch.autocast('cpu', dtype=torch.bfloat16), torch.amp.GradScaler('cpu', **self.kwargs), L()

def scaled_fit(folder, kill_at:int|None=None, without_scaler:bool=False):
    "Two epochs with a loss scaler that starts near fp32's top, so it backs off (skipping steps) and grows again: (weights, scales)"
    if without_scaler: parts_mod.PART_MAKERS.remove(parts_mod.scaler_part)      # this forked rank only
    learn = mlp_learner(folder)
    mp = CPUMixedPrecision(init_scale=2.**126, growth_interval=3)
    cbs = [CheckpointCallback(every_epoch=1, exit_code=None, poll_seconds=0, accept_changes='parts' if without_scaler else ()), mp]
    cbs += [Kill(kill_at)] if kill_at else []
    scales = []
    class Watch(Callback):
        def after_step(self): scales.append(self.learn.scaler.get_scale())
    with learn.distrib_ctx(): learn.fit_one_cycle(2, 1e-2, cbs=cbs + [Watch()])
    return plain_weights(learn), scales

def scaler_states(folder, kill_at=None, without_scaler=False):
    "`scaled_fit`, with the scaler's state as the fit ends (fastai's `after_fit` drops `learn.scaler`)"
    captured = {}
    orig = MixedPrecision.after_fit
    def keep(self): captured['state'] = self.learn.scaler.state_dict(); orig(self)
    MixedPrecision.after_fit = keep
    w, scales = scaled_fit(folder, kill_at, without_scaler)
    return captured['state'], w, scales

@pytest.mark.timeout(300)
def test_scaler_resumes(folder):
    whole = run_ranks(scaler_states, args=(folder/'whole',), timeout=120)
    scales = whole[0][2]
    assert len(set(scales)) > 1 and min(scales) < 2.**126, f'the scale should have moved: {scales}'
    run_ranks(scaler_states, args=(folder/'run', 3), timeout=120)
    assert 'scaler' in safe_load(newest_complete(folder/'run'/'checkpoints')/'state.pt')
    shutil.copytree(folder/'run', folder/'run2')
    resumed = run_ranks(scaler_states, args=(folder/'run',), timeout=120)
    for r, (w, s) in enumerate(zip(whole, resumed)):
        assert s[0] == w[0], f'rank {r}: scaler after the resume {s[0]}, uninterrupted {w[0]}'
        assert same_tree(s[1], w[1]), f'rank {r}: weights after the resume differ from the uninterrupted run'
    blind = run_ranks(scaler_states, args=(folder/'run2', None, True), timeout=120)   # the checkpoint holds it: accepted, not loaded
    assert not same_tree(blind[0][1], whole[0][1]), 'without the scaler part the resumed run should differ: the test could not fail'

# ---------------------------------------------------------------------------------------------------------------
# 3. Checkpoints that hold other parts than the run

def to_old_format(ck:Path):
    "Rewrite checkpoint `ck` as ddpsafe wrote it before the parts had names: no `parts` in `state.pt`, no `user.pt`"
    man = read_manifest(ck)
    with torch.serialization.safe_globals(fastai_safe_globals()):
        files = {n: (safe_load(ck/n) if n.endswith('.pt') else (ck/n).read_bytes()) for n in man['files'] if n != 'user.pt'}
    del files['state.pt']['parts']
    meta = {k: v for k, v in man.items() if k not in ('format', 'step', 'time', 'files', 'parts')}   # old manifests named no parts
    shutil.rmtree(ck)
    write_checkpoint(ck.parent, man['step'], {n: torch_writer(v) if n.endswith('.pt') else v for n, v in files.items()}, meta)

def resumed_output(folder, **kwargs):
    "What rank 0 prints resuming `folder` with `Steps` and `Tally`, or the error each rank raised"
    learn = mlp_learner(folder)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), learn.distrib_ctx():
            learn.fit_one_cycle(2, 1e-2, cbs=[CheckpointCallback(every_epoch=1, exit_code=None, poll_seconds=0, **kwargs), Steps(), Tally()])
    except Exception as e: return f'{type(e).__name__}: {e}'
    return out.getvalue()

def stopped_without_tally(folder):
    "A run stopped by SIGTERM on rank 1, with `Steps` only"
    learn = mlp_learner(folder)
    with learn.distrib_ctx(): learn.fit_one_cycle(2, 1e-2, cbs=[CheckpointCallback(every_epoch=1, exit_code=None, poll_seconds=0), Steps(), Kill(3)])

@pytest.mark.timeout(300)
def test_other_parts(folder):
    run_ranks(user_fit, args=(folder/'old', 'sync', 3), timeout=120)
    to_old_format(newest_complete(folder/'old'/'checkpoints'))
    outs = run_ranks(resumed_output, args=(folder/'old',), timeout=120)
    assert "was written before ddpsafe named the parts it saves: it lacks steps, tally. steps, tally start from this run's own state" in outs[0], outs[0]
    assert 'resumed from' in outs[0] and 'was written before' not in outs[1], outs

    run_ranks(stopped_without_tally, args=(folder/'new',), timeout=120)
    errs = run_ranks(resumed_output, args=(folder/'new',), timeout=120)
    for r, e in enumerate(errs):
        assert e.startswith('CheckpointMismatch') and 'holds other parts of the training state than this run: it lacks tally' in e, f'rank {r}: {e}'
    outs = run_ranks(resumed_output, args=(folder/'new',), kwargs=dict(accept_changes='parts'), timeout=120)
    assert 'holds other parts than this run, as you accepted: it lacks tally. tally starts from this run\'s own state' in outs[0], outs[0]
