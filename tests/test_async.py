"""Proof (asynchronous checkpoints): the step lock, async == sync, a failing background write, and resuming from an
async checkpoint.

    python -m pytest tests/test_async.py -s          # ~30 s on a quiet 2-core machine (3-4 min under load); prints the counts
    DDPSAFE_RACE_REPORT=races.jsonl python -m pytest tests/test_async.py -s   # also write the counts as JSON lines

1. `learn.snapshot()` holds the same lock as the optimizer step. A model of many small parameters, an optimizer that
   writes them one after the other (every parameter equals the step count after each step), and a thread copying the
   weights 1000 times during `fit`: the unguarded copy (`state_dict()` cloned from the thread) is mixed at a measured
   rate (asserted > 0, so the race is real); every `snapshot()` is uniform (asserted 0 mixed).
2. `CheckpointCallback(async_save=True)` and `async_save=False` write the same checkpoints on 2 ranks: every file's
   loaded content (weights, optimizer, `state.pt`, random states) and every manifest but its time are equal.
3. A background write that fails on a full disk (a tmpfs filled to the last byte) is raised on every rank, at the next
   save or at the end of fit, and leaves the checkpoint before it complete and no temporary folder.
4. A run stopped (by the stop switch) or crashed after async checkpoints resumes to the same final weights as a run
   never stopped, bit for bit, on 2 ranks.

5. After `fit` raises (here the failed background save raised at the next save), the signal handlers
   `CheckpointCallback` installed are given back (fastai skips `after_fit` then; ddpsafe's `fit` wrapper does not).

Multi-rank tests use `ddpsafe.testing.run_ranks` (a hang becomes `RanksFailed` naming the rank); `pytest.mark.timeout`
is a backstop."""
from __future__ import annotations
import os, time, errno, shutil, threading, tempfile
from pathlib import Path
import pytest, torch
from torch import nn
import safetensors.torch as st
from fastai.learner import Learner
from fastai.optimizer import Optimizer
from fastai.callback.core import Callback, CancelFitException
from fastai.callback.progress import ProgressCallback
import fastai.callback.schedule                      # fit_one_cycle
import fastai.distributed                            # distrib_ctx
from ddpsafe.all import *
import ddpsafe.write.saver as ckmod                       # where the saver makes the checkpoint writers
from ddpsafe.callback.checkpoint import CheckpointCallback, step_lock
from ddpsafe.storage.manifest import checkpoints, check_checkpoint, newest_complete, read_manifest, checkpoint_name
from ddpsafe.patches.learner import fastai_safe_globals
from ddpsafe.dist.collectives import rank
from ddpsafe.testing import run_ranks, synth_dls, synth_learner, wait_until

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-async-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)

def quiet(learn:Learner) -> Learner:
    "`learn` without the progress bars and the printed table"
    learn.remove_cbs([cb for cb in learn.cbs if isinstance(cb, ProgressCallback)])
    learn.logger = lambda *a, **k: None
    return learn

# ---------------------------------------------------------------------------------------------------------------
# 1. The step lock: a copy from another thread never lands half way through an optimizer step

N_PARAMS = 64

class Counter(nn.Module):
    "`N_PARAMS` small parameters that take part in the loss (so each has a gradient) without changing it"
    def __init__(self, n:int=N_PARAMS):
        super().__init__()
        self.ps = nn.ParameterList([nn.Parameter(torch.zeros(4)) for _ in range(n)])
    def forward(self, x): return x[:, :1]*0 + torch.stack([p.sum() for p in self.ps]).sum()*0

def count_step(p, step=0, **kwargs):
    "A fastai optimizer step that sets the parameter to the number of steps taken: one parameter at a time"
    step += 1
    p.data.fill_(float(step))
    time.sleep(0)          # let other threads run between two parameters, as a real optimizer's kernels do (GIL released)
    return {'step': step}

def counting_opt(params, lr=0.): return Optimizer(params, [count_step], lr=lr)

def counting_learner() -> Learner:
    return quiet(Learner(synth_dls(n=256, bs=8), Counter(), loss_func=lambda p, y: (p - y).pow(2).mean(), opt_func=counting_opt))

def values(sd:dict) -> set:
    "Every distinct value in the tensors of `sd`"
    return {float(x) for v in sd.values() for x in v.flatten()}

class StopWhen(Callback):
    "End `fit` once `event` is set"
    def __init__(self, event): self.event = event
    def after_batch(self):
        if self.event.is_set(): raise CancelFitException()

def copy_outcome(weights, opt) -> str|None:
    "What is wrong with one copy: weights of two steps, or an optimizer state of another step; `None` if nothing"
    vals = values(weights)
    if len(vals) != 1: return 'weights of two steps'
    if opt is not None and {s.get('step', 0) for s in opt['state']} != {int(v) for v in vals}: return 'optimizer of another step'
    return None

def copy_during_fit(copy, n:int=1000) -> dict:
    "Call `copy(learn)` `n` times from a thread while `learn` trains: each copy's outcome"
    learn, done, out = counting_learner(), threading.Event(), dict(outcomes=[], steps=set(), error=None)
    def copier():
        try:
            wait_until(lambda: learn.opt is not None and learn.training, 60, 'fit to start training', every=0.001)
            for _ in range(n):
                weights, opt = copy(learn)
                out['outcomes'].append(copy_outcome(weights, opt)); out['steps'] |= values(weights)
        except BaseException as e: out['error'] = e
        finally: done.set()
    th = threading.Thread(target=copier, daemon=True); th.start()
    learn.fit(100_000, cbs=StopWhen(done))
    th.join(60)
    if out['error'] is not None: raise out['error']
    return dict(out, steps=len(out['steps']), model_steps=learn.opt.state[learn.model.ps[0]]['step'])

def unguarded_copy(learn): return {k: v.clone() for k, v in learn.model.state_dict().items()}, None
def snapshot_copy(learn):
    s = learn.snapshot()
    return s['model'], s['opt']

@pytest.mark.timeout(180)
def test_step_lock(report_race, stopwatch):
    n = 1000
    unguarded = copy_during_fit(unguarded_copy, n)
    guarded = copy_during_fit(snapshot_copy, n)
    rec = report_race(f'copy of the weights from another thread during fit ({N_PARAMS} parameters written one by one)',
                      unguarded['outcomes'], guarded['outcomes'], unguarded_distinct_steps=unguarded['steps'],
                      snapshot_distinct_steps=guarded['steps'], seconds=stopwatch())
    assert len(unguarded['outcomes']) == len(guarded['outcomes']) == n
    assert rec['ddpsafe_failures'] == 0, f'snapshots that were wrong, of {n}: {rec["ddpsafe_kinds"]}'
    assert guarded['steps'] > 10, 'the snapshots did not span the run'
    assert rec['unguarded_kinds'].get('weights of two steps', 0) > 0, f'the unguarded copy was never mixed in {n} copies: the race did not reproduce'

def test_step_lock_is_held_around_step():
    "The lock `snapshot` takes is the one held while the optimizer steps"
    learn, held = counting_learner(), []
    class Probe(Callback):
        def before_step(self): held.append(step_lock(self.learn)._is_owned())
        def after_batch(self): held.append(not step_lock(self.learn)._is_owned())
    learn.fit(1, cbs=Probe())
    assert held and all(held)

# ---------------------------------------------------------------------------------------------------------------
# 2. Async and sync checkpoints of the same run are the same

def ddp_fit(folder, async_save:bool, n_epoch:int=3, cbs=(), **ck_kwargs):
    "fit_one_cycle on `synth_learner` under DDP with a `CheckpointCallback`; the final weights"
    learn = quiet(synth_learner(n=128, path=folder))
    ck = CheckpointCallback(async_save=async_save, exit_code=None, **{'every_steps': 2, 'keep': 100, 'poll_seconds': 0, **ck_kwargs})   # a round every step: the tests name the steps stops land on
    with learn.distrib_ctx(): learn.fit_one_cycle(n_epoch, 1e-2, cbs=[ck, *cbs])
    return {k: v.detach().clone() for k, v in learn.model.state_dict().items()}

def load_all(ck:Path) -> dict:
    "Every file of checkpoint `ck`, loaded; the manifest without its time"
    man = read_manifest(ck); man.pop('time')
    with torch.serialization.safe_globals(fastai_safe_globals()):
        out = {name: st.load_file(ck/name) if name.endswith('.safetensors') else torch.load(ck/name, weights_only=True)
               for name in man['files']}
    return dict(out, manifest=man)

def same(a, b, where='') -> list:
    "Where `a` and `b` differ (tensors by value, dtype and shape; containers recursively)"
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        ok = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return [] if ok else [where]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b): return [f'{where}: keys {sorted(map(str, set(a) ^ set(b)))}']
        return [d for k in a for d in same(a[k], b[k], f'{where}/{k}')]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b): return [f'{where}: lengths {len(a)} != {len(b)}']
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f'{where}[{i}]')]
    if hasattr(a, 'items') and hasattr(a, 'map'): return same(list(a), list(b), where)   # fastcore's L
    return [] if type(a) == type(b) and a == b else [f'{where}: {a!r} != {b!r}']

@pytest.mark.timeout(300)
def test_async_equals_sync(folder, stopwatch):
    ws = run_ranks(ddp_fit, args=(folder/'sync', False), timeout=120)
    wa = run_ranks(ddp_fit, args=(folder/'async', True), timeout=120)
    assert not same(ws[0], ws[1]) and not same(wa[0], wa[1]), 'ranks ended with different weights'
    assert not same(ws[0], wa[0]), 'async_save changed the training itself'
    cs, ca = checkpoints(folder/'sync'/'checkpoints'), checkpoints(folder/'async'/'checkpoints')
    assert [p.name for p in cs] == [p.name for p in ca] and len(cs) >= 8
    diffs, same_bytes = [], 0
    for s, a in zip(cs, ca):
        assert check_checkpoint(s) == [] and check_checkpoint(a) == []
        ls, la = load_all(s), load_all(a)
        fs, fa = ls['manifest'].pop('files'), la['manifest'].pop('files')
        diffs += [f'{s.name}{d}' for d in same(ls, la)] + ([] if fs.keys() == fa.keys() else [f'{s.name}: files {sorted(fs)} != {sorted(fa)}'])
        diffs += [f'{s.name}/{n}: bytes differ' for n in fs if n.endswith('.safetensors') and fs[n] != fa.get(n)]   # the weights: the same bytes
        same_bytes += fs == fa   # sizes and xxh3 checksums: a `.pt` written by the writer process (issue 61) has the same records as torch.save's, laid out with other padding
    print(f'\n[async == sync] {len(cs)} checkpoints x {len(fs)} files compared; '
          f'byte-identical (same checksums): {same_bytes}/{len(cs)}; differences: {diffs}; {stopwatch()}s')
    assert diffs == [], f'async and sync checkpoints differ: {diffs[:10]}'

# ---------------------------------------------------------------------------------------------------------------
# 3. A background write that fails

def fill_disk(folder:Path):
    "Write zeros into `folder/filler` until the filesystem is full"
    chunk = bytes(1 << 16)
    with open(folder/'filler', 'wb', buffering=0) as f:
        try:
            while True: f.write(chunk)
        except OSError as e: assert e.errno == errno.ENOSPC
        try:
            while True: f.write(b'\0'*512)
        except OSError: pass
    try: (folder/'filler2').write_bytes(b'\0'*4096)
    except OSError: pass

def writing(saver) -> bool:
    "Is a background write in flight? The writer process's (its reply read now), or a writer thread's (sharded)"
    if saver.writer is not None: return saver.writer.busy
    saver.pipe.poll(0)
    return saver.pipe.busy

class DiskFullAfter(Callback):
    "After the save at step `at` is committed, rank 0 fills the disk: every later write fails"
    order = CheckpointCallback.order + 1
    def __init__(self, at:int, simulate:bool): self.at,self.simulate = at,simulate
    def after_batch(self):
        if not (self.training and self.train_iter == self.at and rank() == 0): return
        wait_until(lambda: not writing(self.learn.checkpoint.saver), 60, 'the background writer to finish', rank=0, every=0.01)
        if self.simulate: FullDisk.full = True
        else: fill_disk(Path(self.learn.path))

class FullDisk:
    "A full disk without a filesystem: the checkpoint writers raise `ENOSPC` once `full` is set"
    full, original = False, None
    @classmethod
    def install(cls):
        cls.original = ckmod.checkpoint_writers
        def writers(*args):
            def failing(w):
                def write(p):
                    if cls.full: raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(p))
                    return w(p)
                return write
            return {k: failing(w) for k, w in cls.original(*args).items()}
        ckmod.checkpoint_writers = writers

def failing_fit(folder, at:int, simulate:bool):
    "Train with async saves every 2 steps on a disk that is full after step `at`: (error type, message, steps done)"
    if simulate: FullDisk.install()
    learn = quiet(synth_learner(n=128, path=folder))   # 6 steps per rank and epoch
    try:
        with learn.distrib_ctx():
            learn.fit(1, cbs=[CheckpointCallback(every_steps=2, every_epoch=None, async_save=True, exit_code=None),
                              DiskFullAfter(at, simulate)])
    except Exception as e:
        return type(e).__name__, str(e), getattr(e, 'errno', None), learn.train_iter
    return None, None, None, learn.train_iter

@pytest.mark.timeout(300)
@pytest.mark.parametrize('when', ['next_save', 'end_of_fit'])
def test_failed_background_write(tmpfs, when, stopwatch):
    disk = tmpfs('16m')
    # saves at steps 2, 4, 6 and at the end of the epoch (step 6 again, epoch done).
    # next_save: full after step 2, so step 4's write fails and the save at step 6 raises it.
    # end_of_fit: full after step 6, so the end-of-epoch save fails and `after_fit` raises it.
    at, prev, raised_at = (2, 2, 6) if when == 'next_save' else (6, 6, 6)
    res = run_ranks(failing_fit, args=(disk, at, False), timeout=120, raises=False)
    for r, o in enumerate(res):
        assert not isinstance(o, BaseException), f'rank {r} failed in the harness: {o}'
    print(f'\n[failed write, {when}, full tmpfs] per rank: {res}; {stopwatch()}s')
    for r, (kind, msg, err, steps) in enumerate(res):
        assert kind is not None, f'rank {r} finished fit without raising the failed background write'
        assert err == errno.ENOSPC and 'could not write checkpoint' in msg, f'rank {r} raised something else: {kind}: {msg}'
        assert steps == raised_at, f'rank {r} raised at step {steps}, expected {raised_at}'
    root = disk/'checkpoints'
    leftovers = [p.name for p in root.iterdir() if p.name.startswith('.')]
    assert leftovers == [], f'temporary folders left behind: {leftovers}'
    newest = newest_complete(root)
    assert newest is not None and newest.name == checkpoint_name(prev), f'newest complete checkpoint: {newest}'
    assert check_checkpoint(newest) == []
    assert read_manifest(newest)['epoch_done'] is False

# ---------------------------------------------------------------------------------------------------------------
# 4. Resume from an async checkpoint: the same final weights as an uninterrupted run

class Touch(Callback):
    "Create the stop switch at step `at` (as a user or a scheduler would)"
    order = CheckpointCallback.order - 1
    def __init__(self, at): self.at = at
    def after_batch(self):
        if self.training and self.train_iter == self.at and rank() == 0: (Path(self.learn.path)/'checkpoints'/'stop-now').touch()

class Crash(Callback):
    "Raise on every rank at step `at`, right after that step's async save was handed to the writer"
    order = CheckpointCallback.order + 1
    def __init__(self, at): self.at = at
    def after_batch(self):
        if self.training and self.train_iter == self.at: raise RuntimeError(f'crash at step {self.at}')

@pytest.mark.timeout(300)
def test_resume_from_async(folder, stopwatch):
    whole = run_ranks(ddp_fit, args=(folder/'whole', True), timeout=120)
    # stopped by the switch at step 7 (mid-epoch 2): agreed and saved at step 8, then resumed
    stopped = run_ranks(ddp_fit, args=(folder/'stop', True), kwargs=dict(cbs=[Touch(7)]), timeout=120)
    assert all(same(w, whole[0]) for w in stopped), 'the stop did not stop the run'
    assert read_manifest(newest_complete(folder/'stop'/'checkpoints'))['reason'] == 'switch'
    resumed = run_ranks(ddp_fit, args=(folder/'stop', True), timeout=120)
    # crashed at step 10, while the write of step 10 may still be in flight: resumes from step 10 or step 8
    crashed = run_ranks(ddp_fit, args=(folder/'crash', True), kwargs=dict(cbs=[Crash(10)]), timeout=120, raises=False)
    assert all(isinstance(o, RuntimeError) and 'crash at step 10' in str(o) for o in crashed), crashed
    from_step = [checkpoint_name(8), checkpoint_name(10)]
    resumed2 = run_ranks(ddp_fit, args=(folder/'crash', True), timeout=120)
    print(f'\n[resume from async] stop switch: bit-identical on ranks {[not same(w, whole[0]) for w in resumed]}; '
          f'crash: bit-identical on ranks {[not same(w, whole[0]) for w in resumed2]}; {stopwatch()}s')
    for w in resumed + resumed2:
        assert not same(w, whole[0]), f'resumed run differs from the uninterrupted one: {same(w, whole[0])}'
    names = [p.name for p in checkpoints(folder/'crash'/'checkpoints')]
    assert any(n in names for n in from_step) and names[-1] == checkpoint_name(18)

@pytest.mark.timeout(60)
def test_full_disk_error_names_checkpoint(tmpfs):
    "On a real full disk, safetensors' own error (`SafetensorError`) still comes out as `OSError(ENOSPC)` naming the checkpoint"
    small_disk = tmpfs('16m')
    from ddpsafe.storage.manifest import write_checkpoint
    from ddpsafe.state.parts import checkpoint_writers
    fill_disk(small_disk)
    weights = {'w': torch.ones(1000)}
    with pytest.raises(OSError) as e:
        write_checkpoint(small_disk/'checkpoints', 4, checkpoint_writers({'model.safetensors': weights, 'optimizer.pt': {'state': [], 'hypers': []}}))
    assert e.value.errno == errno.ENOSPC and 'could not write checkpoint' in str(e.value)
    assert [p.name for p in (small_disk/'checkpoints').iterdir()] == []

# ---------------------------------------------------------------------------------------------------------------
# A fit that raises gives the signals their handlers back

class NoSlot(Callback):
    "After step `at`, /dev/shm is full too: a save falls back to the trainer's own write (which `FullDisk` fails)"
    order = CheckpointCallback.order + 1
    def __init__(self, at:int): self.at = at
    def after_batch(self):
        if not (self.training and self.train_iter == self.at): return
        def full(*a, **k): raise OSError(errno.ENOSPC, 'No space left on device (/dev/shm)')
        self.learn.checkpoint.saver.pipe.ring.fill = full

@pytest.mark.timeout(60)
def test_signal_handlers_restored_after_failed_save(folder):
    import signal
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    FullDisk.install()
    try:
        learn = quiet(synth_learner(n=128, path=folder))
        with pytest.raises(OSError):
            learn.fit(1, cbs=[CheckpointCallback(every_steps=2, every_epoch=None, async_save=True), DiskFullAfter(2, True), NoSlot(2)])
        assert {s: signal.getsignal(s) for s in before} == before
    finally:
        ckmod.checkpoint_writers, FullDisk.full = FullDisk.original, False
        for s, h in before.items(): signal.signal(s, h)     # this test process must still stop on SIGTERM

# ---------------------------------------------------------------------------------------------------------------
# One writer thread for every save of a fit, at the lowest priority, ended with the fit

@pytest.mark.timeout(120)
def test_failed_fit_leaves_no_slots(folder):
    "A fit with async saves (no memory tier) that raises once its saves are on disk leaves nothing in /dev/shm: two copies of the state held there for nothing, until the same run is launched again"
    class Boom(Callback):
        order = 99
        def after_batch(self):
            if self.train_iter == 5: self.seen.append(cb.saver.pipe.folder); raise RuntimeError('boom')
    learn, cb, boom = quiet(synth_learner(n=128, path=folder)), CheckpointCallback(every_steps=2, every_epoch=None, async_save=True, exit_code=None), Boom()
    boom.seen = []
    with pytest.raises(RuntimeError, match='boom'): learn.fit(1, cbs=[cb, boom])
    slots = boom.seen[0]
    assert newest_complete(folder/'checkpoints').name == checkpoint_name(4), [p.name for p in checkpoints(folder/'checkpoints')]
    assert not slots.exists() and not slots.parent.exists(), f'slots left in /dev/shm after the failed fit: {sorted(p.name for p in slots.parent.rglob("*"))}'

@pytest.mark.timeout(120)
def test_one_writer_process_per_fit(folder):
    "Every background save of a fit is committed by the same writer process (issue 61), at idle priority on Linux; it has exited when the fit ends, and no writer thread runs"
    class Seen(CheckpointCallback):
        def before_fit(self):
            super().before_fit()
            pipe = self.saver.pipe
            hand = pipe.hand                         # the handover to the writer process
            def seen(*args, **kwargs):
                pid = pipe.writer.pid
                self.seen.append((pid, (os.getpriority(os.PRIO_PROCESS, pid), os.sched_getscheduler(pid))))
                return hand(*args, **kwargs)
            pipe.hand = seen
    learn, cb = quiet(synth_learner(n=128, path=folder)), Seen(every_steps=2, every_epoch=None, async_save=True, exit_code=None)
    cb.seen = []
    learn.fit(2, cbs=[cb])
    assert len(cb.seen) >= 3, f'only {len(cb.seen)} background saves'
    assert len({p for p, _ in cb.seen}) == 1, f'background saves went to {len({p for p, _ in cb.seen})} processes'
    if os.uname().sysname == 'Linux': assert {n for _, n in cb.seen} == {(19, os.SCHED_IDLE)}, f'writer (niceness, policy) {cb.seen}'
    pid = cb.seen[0][0]
    assert not Path(f'/proc/{pid}').exists(), f'the writer process {pid} still runs after the fit'
    left = [t.name for t in threading.enumerate() if t.name.startswith('ddpsafe-writer')]
    assert left == [], f'writer threads left after fit: {left}'
