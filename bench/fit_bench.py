"""A real fastai fit with `CheckpointCallback` against the same fit without it, in one run (issue 51, item 1).

    python bench/fit_bench.py --reps 3                    # CPU, 0.4 GB of state, 40 steps, a save every 10 -> results/fit_cpu.json
    python bench/fit_bench.py --gpu                       # one GPU: 1.7 GB (and 4 GB with --big), 100 steps -> results/fit_gpu.json
    python bench/fit_bench.py --cpu-smoke --out X.json    # every path in seconds: checks the code and the JSON, not speed

`Learner.fit(1)` of an MLP (`--depth` Linear layers `--width` wide, fastai's Adam) over batches already on the device
(`--host`: rows collated by workers; `--thread`: by the training thread). Modes: `none` (the baseline, `--baselines` fits
a repetition), `async`, `memory`, `sync`; the modes alternate (rotated each repetition), ratios are to the same
repetition's baselines, then median and range. Per fit: `train_s`, `fit_s`, `step_ms` (median, saves excluded), `save_ms`,
`beside_ms` (steps begun while a write was in flight), `copy_ms` (`StateBuffers.copy`, the floor of a blocking snapshot),
`probe_ms` (the GIL probe's longest late wake). Method: the benchmarks page, "A fastai fit with checkpoints"."""
from __future__ import annotations
import gc, sys, json, time, argparse, statistics, tempfile, shutil, contextlib, io
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, GILProbe, load as machine_load, sync, device_facts, command, rotated, spread, write_json, now

MODES = ('none', 'async', 'memory', 'sync')

class Batches(torch.utils.data.Dataset):
    "`n` batches of `x`, `y`, sliced whole on the device (no per-item work)"
    def __init__(self, x, y, n:int): self.x, self.y, self.n = x, y, n
    def __len__(self): return self.n
    def __getitem__(self, i): return self.x, self.y

class Items(torch.utils.data.Dataset):
    "`n` items, each a row of `x` and of `y` (on the CPU), in turn"
    def __init__(self, x, y, n:int): self.x, self.y, self.n = x, y, n
    def __len__(self): return self.n
    def __getitem__(self, i): return self.x[i % len(self.x)], self.y[i % len(self.y)]

HOST_WORKERS = 4

def learner(width:int, depth:int, batch:int, steps:int, device, folder:Path, host:bool=False, thread:bool=False):
    "A `Learner` over plain torch DataLoaders: whole batches already on `device`; with `host`, rows on the CPU collated by workers and pinned, as users load; with `thread`, by the training thread"
    from fastai.learner import Learner
    from fastai.data.core import DataLoaders
    import fastai.callback.progress   # no_bar, no_logging
    torch.manual_seed(0)
    layers = [m for _ in range(depth) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())][:-1]
    model = torch.nn.Sequential(*layers).to(device)
    if host or thread:
        x, y = torch.randn(4*batch, width), torch.randn(4*batch, width)
        dl = lambda n: torch.utils.data.DataLoader(Items(x, y, n*batch), batch_size=batch, num_workers=0 if thread else HOST_WORKERS,
                                                   pin_memory=device.type == 'cuda')
    else:
        x, y = torch.randn(batch, width, device=device), torch.randn(batch, width, device=device)
        dl = lambda n: torch.utils.data.DataLoader(Batches(x, y, n), batch_size=None)
    return Learner(DataLoaders(dl(steps), dl(1), device=device), model, loss_func=torch.nn.MSELoss(), path=folder)

def writing(saver) -> bool:
    "Is a background write in flight? The writer process's (issue 61: its reply read now), or a writer thread's (sharded, object storage)"
    if getattr(saver, 'pipe', None) is not None and saver.pipe.writer is not None:
        saver.pipe.poll(0)
        return saver.pipe.busy
    return any(w is not None and w.busy for w in (saver.writer, getattr(saver.memory, 'writer', None)))

def timer_cb(device, ck):
    "A callback after `CheckpointCallback` that stamps each training `after_batch`, and whether a background write is then in flight"
    from fastai.callback.core import Callback
    class StepTimer(Callback):
        order = 66
        def before_train(self): sync(device); self.stamps, self.busy = [time.perf_counter()], [False]
        def after_batch(self):
            if not self.training: return
            sync(device); self.stamps.append(time.perf_counter())
            s = getattr(ck, 'saver', None)
            self.busy.append(bool(s and writing(s)))
    return StepTimer()

def one_fit(mode:str, a, device, probe) -> dict:
    from ddpsafe.checkpoint import CheckpointCallback
    from ddpsafe.snapshot import StateBuffers
    folder = Path(tempfile.mkdtemp(dir=a.dir))
    try:
        learn = learner(a.width, a.depth, a.batch, a.steps, device, folder, a.host, a.thread)
        kw = dict(async_=dict(every_steps=a.every, async_save=True), memory=dict(memory_every_steps=a.every), sync=dict(every_steps=a.every)).get(mode.replace('async', 'async_'))
        ck = CheckpointCallback(every_epoch=None, resume=False, **kw) if kw is not None else None
        timer = timer_cb(device, ck)
        out = io.StringIO()
        with learn.no_bar(), learn.no_logging(), contextlib.redirect_stdout(out):
            t0 = time.perf_counter(); learn.fit(1, 1e-5, cbs=[c for c in (ck, timer) if c is not None]); sync(device); fit_s = time.perf_counter() - t0
        st, busy = timer.stamps, timer.busy
        steps = [b - a_ for a_, b in zip(st, st[1:])]
        saved = {i for i in range(len(steps)) if ck is not None and (i+1) % a.every == 0}
        plain = [s for i, s in enumerate(steps) if i not in saved and i > 0]
        beside = [s for i, s in enumerate(steps) if i not in saved and busy[i]]       # began while a write was in flight
        spans = [(st[i], st[i+1]) for i in range(len(steps)) if busy[i] and i not in saved]
        state = {'model': learn.model.state_dict(), 'opt': learn.opt.state_dict()}
        bufs = StateBuffers(); bufs.copy(state); sync(device); c0 = time.perf_counter(); bufs.copy(state); sync(device); copy_s = time.perf_counter() - c0
        return dict(mode=mode, fit_s=fit_s, train_s=st[-1] - st[0], step_ms=1e3*statistics.median(plain), steps=len(steps),
                    save_ms=[1e3*steps[i] for i in sorted(saved)], beside_ms=1e3*statistics.median(beside) if beside else None, beside_n=len(beside),
                    copy_ms=1e3*copy_s, state_mb=bufs.nbytes/2**20, said=[l for l in out.getvalue().splitlines() if 'waited' in l or 'not saved there' in l],
                    probe_ms=dict(fit=1e3*probe.longest(st[0], st[-1]), beside=1e3*max((probe.longest(s, e) for s, e in spans), default=0.)),
                    load=machine_load())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        gc.collect()   # the fit's CUDA tensors freed here: a DataLoader worker forked later must not free them (CUDA in a fork fails)

def ratios(rep:list) -> dict:
    "Each mode's figures over the median of the same repetition's baselines"
    base = [f for f in rep if f['mode'] == 'none']
    med = lambda k: statistics.median(f[k] for f in base)
    out = {}
    for f in rep:
        if f['mode'] == 'none': continue
        out[f['mode']] = dict(fit=f['fit_s']/med('fit_s'), train=f['train_s']/med('train_s'), step=f['step_ms']/med('step_ms'),
                              beside=f['beside_ms']/med('step_ms') if f['beside_ms'] else None,
                              save_over_copy=[(s - med('step_ms'))/f['copy_ms'] for s in f['save_ms']])
    out['baseline_spread'] = max(f['train_s'] for f in base)/min(f['train_s'] for f in base)
    return out

def summary(reps:list) -> dict:
    "Median and range over repetitions of each ratio"
    mr, rs = spread, [ratios(r) for r in reps]
    out = {m: {k: mr([r[m][k] for r in rs if m in r]) for k in ('fit', 'train', 'step', 'beside')} for m in MODES[1:] if any(m in r for r in rs)}
    for m in out: out[m]['save_over_copy'] = mr([x for r in rs if m in r for x in r[m]['save_over_copy']])
    out['baseline_spread'] = mr([r['baseline_spread'] for r in rs])
    out['probe_ms'] = {m: mr([f['probe_ms']['fit'] for r in reps for f in r if f['mode'] == m]) for m in MODES}
    return out

PRESETS = dict(cpu=dict(width=2048, depth=8, batch=32, steps=40, every=10, reps=3),
               smoke=dict(width=64, depth=2, batch=8, steps=8, every=4, reps=1),
               gpu=dict(width=4096, depth=8, batch=2048, steps=100, every=25, reps=3))

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--cpu-smoke', action='store_true', help='tiny sizes, one repetition: checks the code paths and the JSON, not speed')
    p.add_argument('--gpu', action='store_true', help='on cuda:0, the sizes of the issue: 1.7 GB (and 4 GB with --big), 100 steps, a save every 25')
    p.add_argument('--host', action='store_true', help=f'batches from the CPU: rows collated by {HOST_WORKERS} DataLoader workers, pinned on CUDA (default: whole batches already on the device)')
    p.add_argument('--thread', action='store_true', help='batches from the CPU: rows collated by the training thread itself, no workers (a per-item Dataset)')
    p.add_argument('--big', action='store_true', help='with --gpu: also the 4 GB state (20 layers 4096 wide, batch 1024)')
    for k in ('width', 'depth', 'batch', 'steps', 'every', 'reps'): p.add_argument(f'--{k}', type=int, default=None)
    p.add_argument('--baselines', type=int, default=2, help='fits without the callback per repetition (default 2: their spread is noise)')
    p.add_argument('--modes', default=','.join(MODES[1:]), help='modes besides the baseline, comma separated')
    p.add_argument('--threads', type=int, default=1, help='torch threads on the CPU (default 1)')
    p.add_argument('--budget', type=float, default=300., help='seconds; a repetition is not started when less than 1.5 of the last is left')
    p.add_argument('--dir', default=None, help='where checkpoints are written (default: a temporary folder)')
    p.add_argument('--out', default=None, help='the JSON file (default bench/results/fit_<cpu|gpu>.json)')
    a = p.parse_args(argv)
    preset = PRESETS['smoke' if a.cpu_smoke else 'gpu' if a.gpu else 'cpu']
    for k, v in preset.items():
        if getattr(a, k) is None: setattr(a, k, v)
    device = torch.device('cuda:0' if a.gpu else 'cpu')
    if device.type == 'cpu': torch.set_num_threads(a.threads)
    if a.host and a.thread: p.error('--host (workers collate) or --thread (the training thread collates), not both')
    out = Path(a.out or HERE/'results'/f'fit_{"gpu" if a.gpu else "cpu"}{"_host" if a.host else "_thread" if a.thread else ""}.json')
    sizes = [(a.width, a.depth, a.batch)] + ([(4096, 20, 1024)] if a.gpu and a.big else [])
    modes = ['none']*a.baselines + a.modes.split(',')
    res = dict(date=now(), command=command('fit_bench.py', argv or None),
               cpu_smoke=a.cpu_smoke, host=a.host, thread=a.thread, device=device_facts(device), torch=torch.__version__, steps=a.steps, every=a.every, sizes=[], skipped=[])
    began = time.monotonic()
    with GILProbe() as probe:
        for width, depth, batch in sizes:
            size = dict(width=width, depth=depth, batch=batch, reps=[]); res['sizes'].append(size)
            last = 0.
            for r in range(a.reps):
                left = a.budget - (time.monotonic() - began)
                if r and left < 1.5*last: res['skipped'].append(f'{width}x{depth}: repetition {r} (of {a.reps}): {left:.0f} s left'); break
                t = time.monotonic(); order = rotated(modes, r)
                a.width, a.depth, a.batch = width, depth, batch
                rep = [one_fit(m, a, device, probe) for m in order]
                size['reps'].append(rep); last = time.monotonic() - t
                size['summary'] = summary(size['reps'])
                write_json(out, res)
                print(f'{width}x{depth} rep {r}: ' + ', '.join(f'{f["mode"]} {f["train_s"]:.2f}s/{f["fit_s"]:.2f}s probe {f["probe_ms"]["fit"]:.0f}ms' for f in rep), flush=True)
    print(json.dumps({f'{s["width"]}x{s["depth"]}': s.get('summary') for s in res['sizes']}, indent=1))
    return 0

if __name__ == '__main__': sys.exit(main())
