"""Proof (issue 8, the sweep): fastai's callbacks under DDP, as shipped and with ddpsafe, on real forked ranks.

Each test runs fastai's own methods first (put back inside the forked ranks only, with `as_shipped`), then ddpsafe's,
with a metric that differs per rank (a `ValueMetric`, which fastai does not gather). It reports both outcomes
(printed, and appended as a JSON line to `$DDPSAFE_RACE_REPORT` when set) and asserts that ddpsafe's is right.
A hang is caught by `run_ranks`' timeout (`RanksFailed.missing`); `pytest.mark.timeout` is the backstop.

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
from fastai.callback.core import Callback, GatherPredsCallback
from fastai.callback.tracker import (TrackerCallback, EarlyStoppingCallback, ReduceLROnPlateau, SaveModelCallback,
                                     TerminateOnNaNCallback)
from fastai.callback.schedule import LRFinder
from fastai.callback.progress import CSVLogger
import fastai.distributed                            # distrib_ctx
import ddpsafe.callbacks
from ddpsafe.core import rank, barrier
from ddpsafe.learner import fastai_stock
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

@pytest.mark.timeout(120)
def test_early_stopping(folder, report_race):
    with pytest.raises(RanksFailed) as e: run_ranks(early_stop, 2, args=(folder/'stock', True), timeout=HANG)
    assert e.value.missing, 'fastai as shipped should hang'
    stock = epochs_started(e.value)
    assert stock[0] == 2 and stock[1] > 2     # rank 0 stopped after epoch 2, rank 1 went on
    ours = run_ranks(early_stop, 2, args=(folder/'ddpsafe', False), timeout=60)
    report_race('EarlyStoppingCallback on a per-rank metric', 1, 1, 0, 1, stock_last_epoch_per_rank=stock,
                stock_missing=e.value.missing, ddpsafe_stopped_after=ours)
    assert ours == [2, 2]

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
    report_race('ReduceLROnPlateau on a per-rank metric', int(slr0 != slr1), 1, int(lr0 != lr1 or not torch.equal(w0, w1)), 1,
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

@pytest.mark.timeout(120)
def test_lr_find(folder, report_race):
    with pytest.raises(RanksFailed) as e: run_ranks(find_then_fit, 2, args=(folder/'stock', True), timeout=HANG)
    assert e.value.missing, 'fastai as shipped should hang'
    res = run_ranks(find_then_fit, 2, args=(folder/'ddpsafe', False), timeout=60)
    report_race('lr_find under DDP', 1, 1, 0, 1, stock_missing=e.value.missing,
                ddpsafe_restored=[r[0] for r in res], ddpsafe_suggestions=[r[2] for r in res], ddpsafe_batches=[r[5] for r in res])
    assert [r[0] for r in res] == [True, True]          # the weights from before lr_find, on every rank
    assert torch.equal(res[0][1], res[1][1])
    assert res[0][2] == res[1][2]                       # the same suggestion
    assert torch.equal(res[0][3], res[1][3])            # and the fit after it ran, in step
    assert res[0][4] == res[1][4] == []                 # the temporary folder is gone
    assert res[0][5] == res[1][5] == 20                 # the num_it batches asked for (fastai as shipped: 12 on 2 ranks)

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
    stock_bad = sum(s['torch_save'] > 0 for s in stock[1:]) + sum(s['csv_opens'] > 0 for s in stock[1:])
    ours_bad = sum(o['torch_save'] > 0 or o['csv_opens'] > 0 for o in ours[1:])
    report_race(f'GatherPredsCallback(save_preds, save_targs) + CSVLogger on {ranks} ranks', stock_bad, 2*(ranks-1), ours_bad, ranks-1,
                stock_torch_saves=[s['torch_save'] for s in stock], stock_csv_opens=[s['csv_opens'] for s in stock],
                stock_csv_rank_loss=stock[0]['csv_rank_loss'],
                ddpsafe_torch_saves=[o['torch_save'] for o in ours], ddpsafe_csv_opens=[o['csv_opens'] for o in ours])
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
    report_race('SaveModelCallback on a per-rank metric', int(stock[0]['best'] != stock[1]['best']), 1,
                int(ours[0] != ours[1]), 1,
                stock_best_epochs=[s['new_bests'][-1] for s in stock], stock_best=[s['best'] for s in stock],
                stock_ends_with_epoch=[s['ends_with_epoch'] for s in stock],
                ddpsafe_best_epochs=[o['new_bests'][-1] for o in ours], ddpsafe_ends_with_epoch=[o['ends_with_epoch'] for o in ours])
    assert [s['new_bests'][-1] for s in stock] == [1, 3]     # as shipped, each rank picks its own best epoch
    for o in ours:
        assert o['new_bests'] == [0, 1] and o['best'] == .5  # with ddpsafe, rank 0's
        assert o['ends_with_epoch'] == [1]                   # and every rank ends with epoch 1's weights

def nothing_saved(folder):
    res = {}
    for arm in ('stock', 'ddpsafe'):
        names = ['SaveModelCallback.after_fit', 'Learner.load'] if arm == 'stock' else []
        learn = rank_metric(synth_learner(path=Path(folder)/arm/f'node{rank()}'), [[float('nan')]*2]*2, name='nan_loss')
        if rank() == 1:                                      # a stale file, on this rank's disk only
            (learn.path/'models').mkdir(parents=True)
            torch.save(learn.model.state_dict(), learn.path/'models/model.pth')
        with warnings.catch_warnings(record=True) as w, as_shipped(*names):
            warnings.simplefilter('always')
            try:
                with learn.distrib_ctx(): learn.fit(2, cbs=SaveModelCallback(monitor='nan_loss'))
                out = 'ok'
            except Exception as e: out = type(e).__name__
        res[arm] = out, [str(o.message) for o in w if 'SaveModelCallback' in str(o.message)]
    return res

@pytest.mark.timeout(120)
def test_save_model_nothing_saved(folder, report_race):
    res = run_ranks(nothing_saved, 2, args=(folder,), timeout=60)
    stock, ours = [r['stock'] for r in res], [r['ddpsafe'] for r in res]
    report_race('SaveModelCallback with nothing saved (NaN metric, node-local disks)', sum(s[0] != 'ok' for s in stock), 2,
                sum(o[0] != 'ok' or len(o[1]) != 1 for o in ours), 2,
                stock_outcome=[s[0] for s in stock], ddpsafe_outcome=[o[0] for o in ours])
    assert stock[0][0] == 'FileNotFoundError' and stock[1][0] == 'ok'   # as shipped: rank 0 crashes, rank 1 loads its stale file
    missing = str(folder/'ddpsafe/node0/models/model.pth')
    for out, msgs in ours:
        assert out == 'ok' and len(msgs) == 1 and msgs[0].startswith(f'SaveModelCallback: {missing} does not exist on rank 0')

# ---------------------------------------------------------------------------------------------------------------
# TerminateOnNaNCallback: rank 1's loss is NaN at its 5th batch

def nan_on_one_rank(folder, stock):
    learn = synth_learner(path=folder)
    mse = learn.loss_func
    def loss(pred, targ):
        l = mse(pred, targ)
        return l*float('nan') if rank() == 1 and learn.train_iter == 4 else l
    learn.loss_func = loss
    with as_shipped(*(['TerminateOnNaNCallback.after_batch'] if stock else [])), learn.distrib_ctx():
        learn.fit(4, cbs=TerminateOnNaNCallback())
    print(f'rank {rank()} stopped at batch {learn.train_iter}', flush=True)
    barrier()
    return learn.train_iter

@pytest.mark.timeout(120)
def test_terminate_on_nan(folder, report_race):
    with pytest.raises(RanksFailed) as e: run_ranks(nan_on_one_rank, 2, args=(folder/'stock', True), timeout=HANG)
    assert e.value.missing, 'fastai as shipped should hang'
    ours = run_ranks(nan_on_one_rank, 2, args=(folder/'ddpsafe', False), timeout=60)
    report_race('TerminateOnNaNCallback with a NaN on one rank', 1, 1, 0, 1, stock_missing=e.value.missing,
                ddpsafe_stopped_at_batch=ours)
    assert ours[0] == ours[1]
