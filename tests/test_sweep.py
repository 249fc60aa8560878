"""Proof (issue 8, the sweep): fastai's callbacks under DDP, as shipped and with ddpsafe, on real forked ranks.

Each test runs fastai's own methods first (put back inside the forked ranks only, with `as_shipped`), then ddpsafe's,
with a metric that differs per rank (a `ValueMetric`, which fastai does not gather). One check judges both arms: it
names what went wrong (a hang, ranks that disagree) or returns `None`. The test reports both measured outcomes (printed,
and appended as a JSON line to `$DDPSAFE_RACE_REPORT` when set), then asserts that the check fails fastai as shipped
and passes ddpsafe, so a check that cannot tell the two apart fails the test.
A hang is caught by `run_ranks`' timeout (`RanksFailed.missing`), or named by ddpsafe's heartbeats (the ranks found waiting apart), which run in every forked rank, fastai's arm too; `pytest.mark.timeout` is the backstop.

    python -m pytest tests/test_sweep.py -s
"""
from __future__ import annotations
import re, shutil, tempfile, warnings
from contextlib import contextmanager
from pathlib import Path
import pytest, torch
import torch.distributed.tensor, torch._dynamo  # DDP imports these on first use: once here, not in every forked rank
from fastcore.xtras import join_path_file
from fastai.learner import Learner, ValueMetric
from fastai.torch_core import get_model, distrib_barrier
from fastai.callback.core import Callback, GatherPredsCallback, CancelFitException
from fastai.callback.tracker import (TrackerCallback, EarlyStoppingCallback, ReduceLROnPlateau, SaveModelCallback,
                                     TerminateOnNaNCallback)
from fastai.callback.schedule import LRFinder
from fastai.callback.progress import CSVLogger
import fastai.distributed                            # distrib_ctx
import ddpsafe.callback.trackers
from ddpsafe.dist.collectives import rank, barrier, agree
from ddpsafe.patches.learner import fastai_stock
from ddpsafe.testing import synth_learner
from ddpsafe.testing import run_ranks, RanksFailed

HANG = 12   # seconds: a run that should hang is declared hung after this; a healthy one takes 2-5 s

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-sweep-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)

# ---------------------------------------------------------------------------------------------------------------
# fastai as shipped, inside a forked rank

def fastai_save(self, file, **kwargs):
    "fastai 2.8.12's `Learner.save`, calling fastai's own `save_model` (the module name now points at ddpsafe's)"
    file = join_path_file(file, self.path/self.model_dir, ext='.pth')
    fastai_stock['save_model'](file, self.model, getattr(self, 'opt', None), **kwargs)
    return file

def fastai_load(self, file, device=None, **kwargs):
    "fastai 2.8.12's `Learner.load`, calling fastai's own `load_model`"
    if device is None and hasattr(self.dls, 'device'): device = self.dls.device
    if self.opt is None: self.create_opt()
    file = join_path_file(file, self.path/self.model_dir, ext='.pth')
    distrib_barrier()
    fastai_stock['load_model'](file, self.model, self.opt, device=device, **kwargs)
    return self

CLASSES = {c.__name__: c for c in (TrackerCallback, SaveModelCallback, TerminateOnNaNCallback, LRFinder,
                                   GatherPredsCallback, CSVLogger, Learner)}
STOCK = {**fastai_stock, 'Learner.save': fastai_save, 'Learner.load': fastai_load}

def _put(cls, name, f):
    if f is not None: setattr(cls, name, f)
    elif name in cls.__dict__: delattr(cls, name)

@contextmanager
def as_shipped(*names):
    "fastai's own `Class.method`s instead of ddpsafe's, inside the block"
    saved = {n: CLASSES[n.split('.')[0]].__dict__.get(n.split('.')[1]) for n in names}
    for n in names: _put(CLASSES[n.split('.')[0]], n.split('.')[1], STOCK[n])
    try: yield
    finally:
        for n,f in saved.items(): _put(CLASSES[n.split('.')[0]], n.split('.')[1], f)

def test_as_shipped():
    ours = TrackerCallback.after_epoch
    with as_shipped('TrackerCallback.after_epoch', 'CSVLogger.after_epoch'):
        assert TrackerCallback.after_epoch is fastai_stock['TrackerCallback.after_epoch'] is not ours
        assert 'after_epoch' not in CSVLogger.__dict__
    assert TrackerCallback.after_epoch is ours and 'after_epoch' in CSVLogger.__dict__

# ---------------------------------------------------------------------------------------------------------------
# helpers run inside the ranks

def rank_metric(learn, values, name='rank_loss'):
    "Give `learn` a metric worth `values[rank][epoch]`: not gathered, so it differs per rank"
    learn.metrics = ValueMetric(lambda: values[rank()][learn.epoch], metric_name=name)
    return learn

class Watch(Callback):
    "Per epoch: the model's weights, the learning rate, and whether `tracker` saw a new best"
    order = 70
    def __init__(self, tracker=None): self.tracker = tracker
    def before_fit(self): self.weights,self.lrs,self.bests = [],[],[]
    def before_epoch(self): print(f'rank {rank()} epoch {self.epoch}', flush=True)
    def after_epoch(self):
        self.weights.append(torch.cat([p.detach().flatten().clone() for p in get_model(self.model).parameters()]))
        self.lrs.append(self.opt.hypers[-1]['lr'])
        if self.tracker is not None and self.tracker.new_best: self.bests.append(self.epoch)

def epochs_started(e:RanksFailed) -> list:
    "The last epoch each rank started, from what it printed"
    return [max(map(int, re.findall(r'epoch (\d+)', o or '')), default=None) for o in e.outputs]

def params(learn): return torch.cat([p.detach().flatten() for p in get_model(learn.model).parameters()])

def attempt(f, *args, timeout:float) -> tuple:
    "Run `f(*args)` on 2 ranks: (every rank's result, None), or (None, the `RanksFailed`)"
    try: return run_ranks(f, 2, args=args, timeout=timeout), None
    except RanksFailed as e: return None, e

def failed(err:RanksFailed) -> str:
    "A failed attempt in a few words: the ranks that hung, or the first error"
    return f'hang: rank(s) {err.missing} never finished' if err.missing else 'error: ' + str(err).splitlines()[0][:200]

# ---------------------------------------------------------------------------------------------------------------
# EarlyStoppingCallback: rank 0's metric stops improving at epoch 2, rank 1's at epoch 5

STOP = [[1., .9, .95, .8, .7, .6], [1., .9, .85, .8, .75, .95]]

def early_stop(folder, stock):
    learn = rank_metric(synth_learner(path=folder), STOP)
    with as_shipped(*(['TrackerCallback.after_epoch'] if stock else [])), learn.distrib_ctx():
        learn.fit(6, cbs=[EarlyStoppingCallback(monitor='rank_loss'), Watch()])
    print(f'rank {rank()} left fit after epoch {learn.epoch}', flush=True)
    barrier()      # what every rank does next together, such as saving the final model
    return learn.epoch

def hung_or_apart(err) -> bool:
    "Did fastai as shipped wait for a rank that was elsewhere: a hang, or, with ddpsafe's heartbeats on, the ranks named apart?"
    said = str(err) + ''.join(getattr(err, 'outputs', None) or [])
    return err is not None and (bool(err.missing) or 'the ranks wait in different places' in said)

def stopped_together(res, err) -> str|None:
    "`None` if both ranks left fit after epoch 2, rank 0's decision; else what happened"
    if err is not None: return failed(err)
    return None if res == [2, 2] else f'ranks left fit after epochs {res}'

@pytest.mark.timeout(120)
def test_early_stopping(folder, report_race):
    stock, stock_err = attempt(early_stop, folder/'stock', True, timeout=HANG)
    ours, ours_err = attempt(early_stop, folder/'ddpsafe', False, timeout=60)
    started = epochs_started(stock_err) if stock_err else stock
    report_race('EarlyStoppingCallback on a per-rank metric', [stopped_together(stock, stock_err)], [stopped_together(ours, ours_err)],
                stock_last_epoch_per_rank=started, ddpsafe_stopped_after=ours)
    assert hung_or_apart(stock_err), f'fastai as shipped should wait for a rank that stopped: {stock}'
    assert started[0] == 2 and started[1] > 2          # rank 0 stopped after epoch 2, rank 1 went on
    assert stopped_together(ours, ours_err) is None, stopped_together(ours, ours_err)

# ---------------------------------------------------------------------------------------------------------------
# ReduceLROnPlateau: the metric stalls at different epochs on each rank

PLATEAU = [[1., .9, .95, .97], [1., .9, .85, .96]]

def plateau(folder):
    res = {}
    for arm in ('stock', 'ddpsafe'):
        learn = rank_metric(synth_learner(path=Path(folder)/arm), PLATEAU)
        watch = Watch()
        with as_shipped(*(['TrackerCallback.after_epoch'] if arm == 'stock' else [])), learn.distrib_ctx():
            learn.fit(4, cbs=[ReduceLROnPlateau(monitor='rank_loss'), watch])
        res[arm] = watch.lrs, params(learn)
    return res

@pytest.mark.timeout(120)
def test_reduce_lr_on_plateau(folder, report_race):
    r0, r1 = run_ranks(plateau, 2, args=(folder,), timeout=60)
    (slr0, sw0), (slr1, sw1) = r0['stock'], r1['stock']
    drift = (sw0 - sw1).abs().max().item()
    (lr0, w0), (lr1, w1) = r0['ddpsafe'], r1['ddpsafe']
    def in_step(a, b, wa, wb): return None if a == b and torch.equal(wa, wb) else f'learning rates {a} vs {b}, weights apart by {(wa-wb).abs().max().item():.2g}'
    report_race('ReduceLROnPlateau on a per-rank metric', [in_step(slr0, slr1, sw0, sw1)], [in_step(lr0, lr1, w0, w1)],
                stock_lrs=[slr0, slr1], stock_max_weight_diff=drift, ddpsafe_lrs=lr0,
                ddpsafe_max_weight_diff=(w0 - w1).abs().max().item())
    assert slr0 != slr1 and drift > 0
    assert lr0 == lr1 == slr0       # every rank follows rank 0
    assert torch.equal(w0, w1)      # bit for bit

# ---------------------------------------------------------------------------------------------------------------
# lr_find, then fit

def find_then_fit(folder, stock):
    learn = synth_learner(path=folder)
    before = params(learn).clone()
    names = ['LRFinder.before_fit', 'LRFinder.after_batch', 'LRFinder.after_fit'] if stock else []
    with as_shipped(*names), learn.distrib_ctx():
        suggestion = learn.lr_find(num_it=20, show_plot=False).valley
        after, n_batches = params(learn).clone(), len(learn.recorder.lrs)
        learn.fit(1)
    left = sorted(p.name for p in (Path(folder)/'models').iterdir())
    return torch.equal(after, before), after, suggestion, params(learn), left, n_batches

def lr_find_right(res, err) -> str|None:
    "`None` if lr_find ran `num_it` batches, restored the weights and cleaned up on both ranks, in step; else what did not"
    if err is not None: return failed(err)
    wrong = [what for what, ok in [
        ('weights not restored', [r[0] for r in res] == [True, True]),
        ('ranks restored different weights', torch.equal(res[0][1], res[1][1])),
        ('different suggestions', res[0][2] == res[1][2]),
        ('the fit after it ran out of step', torch.equal(res[0][3], res[1][3])),
        ('temporary folder left', res[0][4] == res[1][4] == []),
        (f'{[r[5] for r in res]} batches, not 20', res[0][5] == res[1][5] == 20)] if not ok]   # as shipped: 12 on 2 ranks
    return '; '.join(wrong) or None

@pytest.mark.timeout(120)
def test_lr_find(folder, report_race):
    stock, stock_err = attempt(find_then_fit, folder/'stock', True, timeout=HANG)
    res, err = attempt(find_then_fit, folder/'ddpsafe', False, timeout=60)
    report_race('lr_find under DDP', [lr_find_right(stock, stock_err)], [lr_find_right(res, err)],
                stock_missing=stock_err and stock_err.missing, ddpsafe_suggestions=res and [r[2] for r in res],
                ddpsafe_batches=res and [r[5] for r in res])
    # as shipped, rank 0 removes the temporary file as it loads it, so rank 1 may find none and skip the load: rank 0 then waited
    # for it, or (a load on one rank alone now reads alone) the ranks go on with different weights, out of step
    assert hung_or_apart(stock_err) or lr_find_right(stock, stock_err) is not None, 'fastai as shipped ran lr_find right under DDP'
    assert lr_find_right(res, err) is None, lr_find_right(res, err)

# ---------------------------------------------------------------------------------------------------------------
# GatherPredsCallback(save_preds=..., save_targs=...) and CSVLogger: who writes, and what ends in the files

N_EPOCH = 2

def files(folder):
    res = {}
    for arm in ('stock', 'ddpsafe'):
        d = Path(folder)/arm
        n = dict(torch_save=0, csv_opens=0)
        save, path_open = torch.save, Path.open
        def counted_save(*args, **kwargs): n['torch_save'] += 1; return save(*args, **kwargs)
        def counted_open(self, mode='r', *args, **kwargs):
            if self.name == 'history.csv' and mode[0] in 'wa': n['csv_opens'] += 1
            return path_open(self, mode, *args, **kwargs)
        names = ['GatherPredsCallback.after_batch', 'CSVLogger.before_fit', 'CSVLogger._write_line',
                 'CSVLogger.after_epoch', 'CSVLogger.after_fit'] if arm == 'stock' else []
        learn = rank_metric(synth_learner(n=96, bs=4, path=d, cbs=CSVLogger()),
                            [[10.*r + e for e in range(N_EPOCH)] for r in range(8)])
        torch.save, Path.open = counted_save, counted_open
        try:
            with as_shipped(*names), learn.distrib_ctx():
                learn.fit(N_EPOCH)
                preds, targs = learn.get_preds(save_preds=d, save_targs=d/'t')
        finally: torch.save, Path.open = save, path_open
        try:
            got_p = torch.cat([torch.load(d/str(i)) for i in range(len(list(d.glob('[0-9]*'))))])
            got_t = torch.cat([torch.load(d/'t'/str(i)) for i in range(len(list((d/'t').glob('[0-9]*'))))])
            complete = torch.equal(got_p, preds) and torch.equal(got_t, targs)
        except Exception as e: complete = f'{type(e).__name__}: {e}'
        try:
            log = learn.csv_logger.read_log()
            csv = dict(csv_rank_loss=log['rank_loss'].tolist(), csv_header=list(log.columns))
        except Exception as e: csv = dict(csv_rank_loss=f'read_log: {type(e).__name__}', csv_header=None)
        res[arm] = dict(n, preds_complete=complete, csv_lines=len((d/'history.csv').read_text().splitlines()), **csv)
    return res

@pytest.mark.timeout(120)
@pytest.mark.parametrize('ranks', [2, 4])
def test_files_written_once(folder, report_race, ranks):
    for d in ('stock', 'ddpsafe'): (folder/d/'t').mkdir(parents=True)
    res = run_ranks(files, ranks, args=(folder,), timeout=90)
    stock, ours = [r['stock'] for r in res], [r['ddpsafe'] for r in res]
    n_files = ours[0]['torch_save']
    def wrote(o): return f'{o["torch_save"]} torch.save, {o["csv_opens"]} opens of the log' if o['torch_save'] or o['csv_opens'] else None
    report_race(f'GatherPredsCallback(save_preds, save_targs) + CSVLogger on {ranks} ranks (writes by ranks other than 0)',
                [wrote(s) for s in stock[1:]], [wrote(o) for o in ours[1:]],
                stock_torch_saves=[s['torch_save'] for s in stock], stock_csv_opens=[s['csv_opens'] for s in stock],
                stock_csv_rank_loss=stock[0]['csv_rank_loss'],
                ddpsafe_torch_saves=[o['torch_save'] for o in ours], ddpsafe_csv_opens=[o['csv_opens'] for o in ours])
    assert all(wrote(s) for s in stock[1:]), 'as shipped, every rank writes'
    assert n_files > 0 and [o['torch_save'] for o in ours] == [n_files] + [0]*(ranks-1)   # rank 0 wrote each file once
    assert [o['csv_opens'] for o in ours] == [1] + [0]*(ranks-1)                           # only rank 0 opened the log
    for o in ours:
        assert o['preds_complete'] is True
        assert o['csv_lines'] == 1 + N_EPOCH                                               # header + one line an epoch
        assert o['csv_header'] == ['epoch', 'train_loss', 'valid_loss', 'rank_loss', 'time']
        assert o['csv_rank_loss'] == [0., 1.]                                              # rank 0's lines, read on every rank

# ---------------------------------------------------------------------------------------------------------------
# SaveModelCallback: the best epoch is 1 on rank 0, 3 on rank 1

BEST = [[1., .5, .7, .6], [1., .9, .8, .4]]

def best_model(folder):
    res = {}
    for arm in ('stock', 'ddpsafe'):
        names = ['TrackerCallback.after_epoch', 'SaveModelCallback.after_fit', 'Learner.save', 'Learner.load'] if arm == 'stock' else []
        learn = rank_metric(synth_learner(path=Path(folder)/arm), BEST)
        cb = SaveModelCallback(monitor='rank_loss')
        watch = Watch(cb)
        with as_shipped(*names), learn.distrib_ctx(): learn.fit(4, cbs=[cb, watch])
        final = params(learn)
        res[arm] = dict(new_bests=watch.bests, best=cb.best, ends_with_epoch=[i for i,w in enumerate(watch.weights) if torch.equal(w, final)])
    return res

@pytest.mark.timeout(120)
def test_save_model_callback(folder, report_race):
    res = run_ranks(best_model, 2, args=(folder,), timeout=60)
    stock, ours = [r['stock'] for r in res], [r['ddpsafe'] for r in res]
    def one_best(r): return (None if r[0]['new_bests'] == r[1]['new_bests'] and r[0]['ends_with_epoch'] == r[1]['ends_with_epoch']
                             else f'best epochs {[o["new_bests"][-1] for o in r]}, end with the weights of epochs {[o["ends_with_epoch"] for o in r]}')
    report_race('SaveModelCallback on a per-rank metric', [one_best(stock)], [one_best(ours)],
                stock_best_epochs=[s['new_bests'][-1] for s in stock], stock_best=[s['best'] for s in stock],
                stock_ends_with_epoch=[s['ends_with_epoch'] for s in stock],
                ddpsafe_best_epochs=[o['new_bests'][-1] for o in ours], ddpsafe_ends_with_epoch=[o['ends_with_epoch'] for o in ours])
    assert one_best(stock) is not None and one_best(ours) is None
    assert [s['new_bests'][-1] for s in stock] == [1, 3]     # as shipped, each rank picks its own best epoch
    for o in ours:
        assert o['new_bests'] == [0, 1] and o['best'] == .5  # with ddpsafe, rank 0's
        assert o['ends_with_epoch'] == [1]                   # and every rank ends with epoch 1's weights

def nothing_saved(folder):
    res = {}
    for arm in ('stock', 'ddpsafe'):
        names = ['SaveModelCallback.after_fit', 'Learner.load'] if arm == 'stock' else []
        learn = rank_metric(synth_learner(path=Path(folder)/arm/f'node{rank()}'), [[float('nan')]*2]*2, name='nan_loss')
        stale = params(learn).clone()
        if rank() == 1:                                      # a stale file, on this rank's disk only
            (learn.path/'models').mkdir(parents=True)
            torch.save(learn.model.state_dict(), learn.path/'models/model.pth')
        with warnings.catch_warnings(record=True) as w, as_shipped(*names):
            warnings.simplefilter('always')
            try:
                with learn.distrib_ctx(): learn.fit(2, cbs=SaveModelCallback(monitor='nan_loss'))
                out = 'ok'
            except Exception as e: out = type(e).__name__
        res[arm] = out, [str(o.message) for o in w if 'SaveModelCallback' in str(o.message)], torch.equal(params(learn), stale)
    return res

@pytest.mark.timeout(120)
def test_save_model_nothing_saved(folder, report_race):
    res = run_ranks(nothing_saved, 2, args=(folder,), timeout=60)
    stock, ours = [r['stock'] for r in res], [r['ddpsafe'] for r in res]
    report_race('SaveModelCallback with nothing saved (NaN metric, node-local disks)',
                [s[0] if s[0] != 'ok' else ('loaded a stale file' if s[2] else None) for s in stock],
                [o[0] if o[0] != 'ok' else ('loaded a stale file' if o[2] else None if len(o[1]) == (r == 0) else f'{len(o[1])} warnings') for r, o in enumerate(ours)],
                stock_outcome=[s[0] for s in stock], ddpsafe_outcome=[o[0] for o in ours])
    assert stock[0][0] == 'FileNotFoundError' and stock[1][:1] + stock[1][2:] == ('ok', True)   # as shipped: rank 0 crashes, rank 1 loads its stale file
    missing = str(folder/'ddpsafe/node0/models/model.pth')
    for r, (out, msgs, stale) in enumerate(ours):                 # every rank keeps its weights; rank 0 alone says why, once
        assert out == 'ok' and not stale and len(msgs) == (r == 0), (r, msgs)
    assert ours[0][1][0].startswith(f'SaveModelCallback: there is no best model to load ({missing} does not exist): nan_loss never improved'), ours[0][1]

# ---------------------------------------------------------------------------------------------------------------
# TerminateOnNaNCallback: rank 1's loss is NaN in its 5th batch (`train_iter` 4)
#
# One process whose batch holds a NaN stops in that batch. Under DDP the NaN loss is on rank 1 only, but its gradient
# reaches every rank's weights through DDP's average, so rank 0's loss is NaN one batch later. Right: every rank stops
# in batch 4 and fit ends. fastai as shipped (each rank looks at its own loss): rank 1 leaves fit in batch 4, rank 0
# goes on and waits, still in batch 4, in the Recorder's all-gather of the loss, which rank 1 never joins: a hang.
# Deciding from rank 0's loss alone does not hang: both ranks stop in batch 5, one step after the NaN, with NaN
# weights; "both ranks stopped at the same batch" cannot tell that from the fix, so the check asks for batch 4.

NAN_AT = 4

def rank0_decides(self):
    "A wrong fix: every rank stops when rank 0's loss is NaN"
    if agree(bool(torch.isinf(self.loss) or torch.isnan(self.loss))): raise CancelFitException

class Batches(Callback):
    "Print each training batch as it starts; keep the last one"
    def before_batch(self):
        if self.training: self.last = self.train_iter; print(f'rank {rank()} batch {self.train_iter}', flush=True)

def nan_on_one_rank(folder, arm):
    learn = synth_learner(path=folder)
    mse = learn.loss_func
    def loss(pred, targ):
        l = mse(pred, targ)
        return l*float('nan') if rank() == 1 and learn.train_iter == NAN_AT else l
    learn.loss_func, seen = loss, Batches()
    names = ['TerminateOnNaNCallback.after_batch'] if arm == 'stock' else []
    with as_shipped(*names), patched(TerminateOnNaNCallback, 'after_batch', rank0_decides if arm == 'rank0' else None), \
         learn.distrib_ctx():
        learn.fit(4, cbs=[TerminateOnNaNCallback(), seen])
    barrier()
    return seen.last

@contextmanager
def patched(cls, name, f):
    "`cls.name` is `f` inside the block (nothing changes when `f` is `None`)"
    old = cls.__dict__.get(name)
    if f is not None: setattr(cls, name, f)
    try: yield
    finally: _put(cls, name, old)

def last_batches(res, err) -> list:
    "The last training batch each rank started, from its results or, after a hang, from what it printed"
    if err is None: return res
    return [max(map(int, re.findall(r'batch (\d+)', o or '')), default=None) for o in err.outputs]

def stopped_in_nan_batch(res, err) -> str|None:
    "`None` if every rank stopped in the batch whose loss was NaN, as one process does; else what happened"
    if err is not None: return failed(err) + f', last batches started {last_batches(res, err)}'
    return None if res == [NAN_AT]*2 else f'ranks stopped in batches {res}, the NaN was in batch {NAN_AT}'

@pytest.mark.timeout(120)
def test_terminate_on_nan(folder, report_race):
    stock, stock_err = attempt(nan_on_one_rank, folder/'stock', 'stock', timeout=HANG)
    rank0, rank0_err = attempt(nan_on_one_rank, folder/'rank0', 'rank0', timeout=60)
    ours, ours_err = attempt(nan_on_one_rank, folder/'ddpsafe', 'ddpsafe', timeout=60)
    report_race('TerminateOnNaNCallback with a NaN on one rank', [stopped_in_nan_batch(stock, stock_err)],
                [stopped_in_nan_batch(ours, ours_err)], stock_last_batches=last_batches(stock, stock_err),
                rank0_decides_last_batches=last_batches(rank0, rank0_err), ddpsafe_last_batches=ours)
    assert hung_or_apart(stock_err) and last_batches(stock, stock_err) == [NAN_AT]*2, \
        f'as shipped, rank 1 should stop in batch {NAN_AT} and rank 0 hang in it: {stopped_in_nan_batch(stock, stock_err)}'
    assert stopped_in_nan_batch(stock, stock_err) is not None
    assert rank0_err is None and rank0 == [NAN_AT + 1]*2, 'deciding from rank 0 alone stops together, one batch late'
    assert stopped_in_nan_batch(rank0, rank0_err) is not None       # the check tells that apart from the fix
    assert stopped_in_nan_batch(ours, ours_err) is None, stopped_in_nan_batch(ours, ours_err)
