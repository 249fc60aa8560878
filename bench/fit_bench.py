"""A real fastai fit with `CheckpointCallback` against the same fit without it (issue 51, items 1 and 2).

    python bench/fit_bench.py --reps 3                    # CPU, 0.4 GB of state, 40 steps, a save every 10 -> results/fit_cpu.json
    python bench/fit_bench.py --gpu                       # one GPU: 1.7 GB of state, 100 steps -> results/fit_gpu.json
    python bench/fit_bench.py --cpu-smoke --out X.json    # every path in seconds: the code, not speed

Modes `none` (the baseline), `async`, `memory`, `sync`, rotated each repetition, ratios to the same repetition's baselines.
Method and fields: the benchmarks page, "A fastai fit with checkpoints"."""
from __future__ import annotations
import gc, sys, json, time, argparse, statistics, tempfile, shutil, contextlib, io
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, GILProbe, load as machine_load, sync, device_facts, command, rotated, spread, write_json, now

MODES = ('none', 'async', 'memory', 'sync')
HOST_WORKERS = 4

class Batches(torch.utils.data.Dataset):
    "`n` batches of `x`, `y`, sliced whole on the device (no per-item work)"
    def __init__(self, x, y, n:int): self.x, self.y, self.n = x, y, n
    def __len__(self): return self.n
    def __getitem__(self, i): return self.x, self.y

class Items(Batches):
    "`n` items, each a row of `x` and of `y` (on the CPU), in turn"
    def __getitem__(self, i): return self.x[i % len(self.x)], self.y[i % len(self.y)]

def learner(a, device, folder:Path):
    """A `Learner` of an MLP over plain torch DataLoaders: whole batches already on `device`; with `a.host`, rows on the
    CPU collated by workers and pinned, as users load; with `a.thread`, by the training thread"""
    from fastai.learner import Learner
    from fastai.data.core import DataLoaders
    import fastai.callback.progress   # no_bar, no_logging
    torch.manual_seed(0)
    layers = [m for _ in range(a.depth) for m in (torch.nn.Linear(a.width, a.width), torch.nn.ReLU())][:-1]
    model = torch.nn.Sequential(*layers).to(device)
    if a.host or a.thread:
        x, y = torch.randn(4*a.batch, a.width), torch.randn(4*a.batch, a.width)
        dl = lambda n: torch.utils.data.DataLoader(Items(x, y, n*a.batch), batch_size=a.batch, pin_memory=device.type == 'cuda',
                                                   num_workers=0 if a.thread else HOST_WORKERS)
    else:
        x, y = torch.randn(a.batch, a.width, device=device), torch.randn(a.batch, a.width, device=device)
        dl = lambda n: torch.utils.data.DataLoader(Batches(x, y, n), batch_size=None)
    return Learner(DataLoaders(dl(a.steps), dl(1), device=device), model, loss_func=torch.nn.MSELoss(), path=folder)

def checkpointer(mode:str, every:int):
    "The `CheckpointCallback` of a mode; `None` for the baseline"
    from ddpsafe.callback.checkpoint import CheckpointCallback
    kw = dict(async_=dict(every_steps=every, async_save=True), memory=dict(memory_every_steps=every),
              sync=dict(every_steps=every)).get(mode.replace('async', 'async_'))
    return None if kw is None else CheckpointCallback(every_epoch=None, resume=False, **kw)

def writing(saver) -> bool:
    "Is a background write in flight? The writer process's (its reply read now), or a writer thread's (shards)"
    if saver.pipe is not None and saver.pipe.writer is not None: saver.pipe.poll(0); return saver.pipe.busy
    return saver.writer is not None and saver.writer.busy

def fit(learn, device, ck=None):
    """`learn.fit(1)`, quiet, with a callback after `ck` that stamps each training step's end (the device synchronized)
    and whether a write is then in flight. The timer, and what the fit printed"""
    from fastai.callback.core import Callback
    class StepTimer(Callback):
        order = 66
        def before_train(self): sync(device); self.stamps, self.busy = [time.perf_counter()], [False]
        def after_batch(self):
            if not self.training: return
            sync(device); self.stamps.append(time.perf_counter())
            s = getattr(ck, 'saver', None)
            self.busy.append(bool(s and writing(s)))
    timer, out = StepTimer(), io.StringIO()
    with learn.no_bar(), learn.no_logging(), contextlib.redirect_stdout(out):
        learn.fit(1, 1e-5, cbs=[c for c in (ck, timer) if c is not None])
    return timer, out.getvalue()

@contextlib.contextmanager
def fit_folder(a):
    "A folder for one fit's checkpoints, removed after, with the fit's CUDA tensors (a DataLoader worker forked later must not free them)"
    folder = Path(tempfile.mkdtemp(dir=a.dir))
    try: yield folder
    finally: shutil.rmtree(folder, ignore_errors=True); gc.collect()

def one_fit(mode:str, a, device, probe) -> dict:
    from ddpsafe.write.snapshot import StateBuffers
    with fit_folder(a) as folder:
        learn, ck = learner(a, device, folder), checkpointer(mode, a.every)
        t0 = time.perf_counter()
        timer, said = fit(learn, device, ck)
        sync(device)
        fit_s = time.perf_counter() - t0
        st, busy = timer.stamps, timer.busy
        steps = [b - a_ for a_, b in zip(st, st[1:])]
        saved = {i for i in range(len(steps)) if ck is not None and (i+1) % a.every == 0}
        plain = [s for i, s in enumerate(steps) if i not in saved and i > 0]
        beside = [s for i, s in enumerate(steps) if i not in saved and busy[i]]       # began while a write was in flight
        spans = [(st[i], st[i+1]) for i in range(len(steps)) if busy[i] and i not in saved]
        state = {'model': learn.model.state_dict(), 'opt': learn.opt.state_dict()}
        bufs = StateBuffers(); bufs.copy(state); sync(device)
        c0 = time.perf_counter()
        bufs.copy(state)
        sync(device)
        copy_s = time.perf_counter() - c0
        return dict(mode=mode, fit_s=fit_s, train_s=st[-1] - st[0], step_ms=1e3*statistics.median(plain), steps=len(steps),
                    save_ms=[1e3*steps[i] for i in sorted(saved)], beside_ms=1e3*statistics.median(beside) if beside else None,
                    beside_n=len(beside), copy_ms=1e3*copy_s, state_mb=bufs.nbytes/2**20,
                    said=[l for l in said.splitlines() if 'waited' in l or 'not saved there' in l],
                    probe_ms=dict(fit=1e3*probe.longest(st[0], st[-1]),
                                  beside=1e3*max((probe.longest(s, e) for s, e in spans), default=0.)),
                    load=machine_load())

def ratios(rep:list) -> dict:
    "Each mode's figures over the median of the same repetition's baselines"
    base = [f for f in rep if f['mode'] == 'none']
    med = lambda k: statistics.median(f[k] for f in base)
    out = {f['mode']: dict(fit=f['fit_s']/med('fit_s'), train=f['train_s']/med('train_s'), step=f['step_ms']/med('step_ms'),
                           beside=f['beside_ms']/med('step_ms') if f['beside_ms'] else None,
                           save_over_copy=[(s - med('step_ms'))/f['copy_ms'] for s in f['save_ms']])
           for f in rep if f['mode'] != 'none'}
    out['baseline_spread'] = max(f['train_s'] for f in base)/min(f['train_s'] for f in base)
    return out

def summary(reps:list) -> dict:
    "Median and range over repetitions of each ratio"
    rs = [ratios(r) for r in reps]
    out = {m: {k: spread([r[m][k] for r in rs if m in r]) for k in ('fit', 'train', 'step', 'beside')}
           for m in MODES[1:] if any(m in r for r in rs)}
    for m in out: out[m]['save_over_copy'] = spread([x for r in rs if m in r for x in r[m]['save_over_copy']])
    out['baseline_spread'] = spread([r['baseline_spread'] for r in rs])
    out['probe_ms'] = {m: spread([f['probe_ms']['fit'] for r in reps for f in r if f['mode'] == m]) for m in MODES}
    return out

def bench(a, device, out:Path, res:dict):
    "The modes, rotated, in repetitions while the budget lasts, and their summary"
    modes, began, last = ['none']*a.baselines + a.modes.split(','), time.monotonic(), 0.
    size = dict(width=a.width, depth=a.depth, batch=a.batch, reps=[])
    res.update(steps=a.steps, every=a.every, sizes=[size], skipped=[])
    with GILProbe() as probe:
        for r in range(a.reps):
            if r and (left := a.budget - (time.monotonic() - began)) < 1.5*last:
                res['skipped'].append(f'{a.width}x{a.depth}: repetition {r} (of {a.reps}): {left:.0f} s left'); break
            t = time.monotonic()
            size['reps'].append(rep := [one_fit(m, a, device, probe) for m in rotated(modes, r)])
            size['summary'], last = summary(size['reps']), time.monotonic() - t
            write_json(out, res)
            print(f'rep {r}: ' + ', '.join(f'{f["mode"]} {f["train_s"]:.2f}s/{f["fit_s"]:.2f}s probe {f["probe_ms"]["fit"]:.0f}ms' for f in rep), flush=True)
    print(json.dumps(size.get('summary'), indent=1))

PRESETS = dict(cpu=dict(width=2048, depth=8, batch=32, steps=40, every=10, reps=3),
               smoke=dict(width=64, depth=2, batch=8, steps=8, every=4, reps=1),
               gpu=dict(width=4096, depth=8, batch=2048, steps=100, every=25, reps=3))

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--cpu-smoke', action='store_true', help='tiny sizes, one repetition: the code paths and the JSON, not speed')
    p.add_argument('--gpu', action='store_true', help="on cuda:0: 1.7 GB of state, 100 steps, a save every 25")
    p.add_argument('--host', action='store_true', help=f'batches from the CPU, collated by {HOST_WORKERS} DataLoader workers, pinned on CUDA')
    p.add_argument('--thread', action='store_true', help='batches from the CPU, collated by the training thread (no workers)')
    for k in ('width', 'depth', 'batch', 'steps', 'every', 'reps'): p.add_argument(f'--{k}', type=int, default=None)
    p.add_argument('--baselines', type=int, default=2, help='fits without the callback per repetition (default 2)')
    p.add_argument('--modes', default=','.join(MODES[1:]), help='modes besides the baseline, comma separated')
    p.add_argument('--threads', type=int, default=1, help='torch threads on the CPU (default 1)')
    p.add_argument('--budget', type=float, default=300., help='seconds; no repetition starts with less than 1.5 of the last left')
    p.add_argument('--dir', default=None, help='where checkpoints are written (default: a temporary folder)')
    p.add_argument('--out', default=None, help='the JSON file (default bench/results/fit_<cpu|gpu>[_host|_thread].json)')
    a = p.parse_args(argv)
    if a.host and a.thread: p.error('--host (workers collate) or --thread (the training thread collates), not both')
    for k, v in PRESETS['smoke' if a.cpu_smoke else 'gpu' if a.gpu else 'cpu'].items():
        if getattr(a, k) is None: setattr(a, k, v)
    device = torch.device('cuda:0' if a.gpu else 'cpu')
    if device.type == 'cpu': torch.set_num_threads(a.threads)
    name = f'fit_{"gpu" if a.gpu else "cpu"}{"_host" if a.host else "_thread" if a.thread else ""}'
    out = Path(a.out or HERE/'results'/f'{name}.json')
    res = dict(date=now(), command=command('fit_bench.py', argv or None), cpu_smoke=a.cpu_smoke, host=a.host, thread=a.thread,
               device=device_facts(device), torch=torch.__version__, python=sys.version.split()[0],
               sizes=dict(width=a.width, depth=a.depth, batch=a.batch, steps=a.steps, every=a.every))
    bench(a, device, out, res)
    return 0

if __name__ == '__main__': sys.exit(main())
