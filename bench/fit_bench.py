"""A real fastai fit with `CheckpointCallback` against the same fit without it (issue 51, items 1 and 2).

    python bench/fit_bench.py --reps 3                    # CPU, 0.4 GB of state, 40 steps, a save every 10 -> results/fit_cpu.json
    python bench/fit_bench.py --gpu                       # one GPU: 1.7 GB (and 4 GB with --big), 100 steps -> results/fit_gpu.json
    python bench/fit_bench.py --diagnose --gpu --host --reps 1 --standins gil,memcpy,disk,writer   # -> diagnose_gpu_host.json
    python bench/fit_bench.py --cpu-smoke --out X.json    # every path in seconds (with --diagnose too): the code, not speed

Modes `none` (the baseline), `async`, `memory`, `sync`, rotated each repetition, ratios to the same repetition's baselines.
`--diagnose`: the same fit with one stand-in thread beside it at a time, then a `torch.profiler` trace of an `async` and
a `memory` fit. Method and fields: the benchmarks page, "A fastai fit with checkpoints" and "What a write could take"."""
from __future__ import annotations
import gc, os, sys, json, time, gzip, argparse, statistics, tempfile, shutil, threading, contextlib, io
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, GILProbe, load as machine_load, sync, device_facts, command, rotated, spread, write_json, now

MODES = ('none', 'async', 'memory', 'sync')
STANDINS = ('none', 'sleep', 'gil', 'memcpy', 'disk', 'writer')
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
    from ddpsafe.checkpoint import CheckpointCallback
    kw = dict(async_=dict(every_steps=every, async_save=True), memory=dict(memory_every_steps=every),
              sync=dict(every_steps=every)).get(mode.replace('async', 'async_'))
    return None if kw is None else CheckpointCallback(every_epoch=None, resume=False, **kw)

def writing(saver) -> bool:
    "Is a background write in flight? The writer process's (issue 61: its reply read now), or a writer thread's"
    if getattr(saver, 'pipe', None) is not None and saver.pipe.writer is not None:
        saver.pipe.poll(0)
        return saver.pipe.busy
    return any(w is not None and w.busy for w in (saver.writer, getattr(saver.memory, 'writer', None)))

def fit(learn, device, ck=None, limit:float|None=None, mark:bool=False):
    """`learn.fit(1)`, quiet, with a callback after `ck` that stamps each training step's end (the device synchronized)
    and whether a write is then in flight; `limit`: cancel after that many seconds; `mark`: a profiler marker
    `step:<i>:<busy>` at each step's end. The timer, and what the fit printed"""
    from fastai.callback.core import Callback, CancelFitException
    class StepTimer(Callback):
        order = 66
        def before_train(self): sync(device); self.stamps, self.busy = [time.perf_counter()], [False]
        def after_batch(self):
            if not self.training: return
            sync(device); self.stamps.append(time.perf_counter())
            s = getattr(ck, 'saver', None)
            self.busy.append(bool(s and writing(s)))
            if mark:
                with torch.profiler.record_function(f'step:{len(self.busy) - 1}:{int(self.busy[-1])}'): pass
            if limit and self.stamps[-1] - self.stamps[0] > limit and len(self.stamps) > 3: raise CancelFitException()
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
    from ddpsafe.snapshot import StateBuffers
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
    "The modes, rotated, in repetitions while the budget lasts; each size's summary"
    sizes = [(a.width, a.depth, a.batch)] + ([(4096, 20, 1024)] if a.gpu and a.big else [])
    modes, began = ['none']*a.baselines + a.modes.split(','), time.monotonic()
    res.update(steps=a.steps, every=a.every, sizes=[], skipped=[])
    with GILProbe() as probe:
        for a.width, a.depth, a.batch in sizes:
            size, last = dict(width=a.width, depth=a.depth, batch=a.batch, reps=[]), 0.
            res['sizes'].append(size)
            for r in range(a.reps):
                left = a.budget - (time.monotonic() - began)
                if r and left < 1.5*last:
                    res['skipped'].append(f'{a.width}x{a.depth}: repetition {r} (of {a.reps}): {left:.0f} s left'); break
                t = time.monotonic()
                rep = [one_fit(m, a, device, probe) for m in rotated(modes, r)]
                size['reps'].append(rep); last = time.monotonic() - t
                size['summary'] = summary(size['reps'])
                write_json(out, res)
                print(f'{a.width}x{a.depth} rep {r}: ' + ', '.join(f'{f["mode"]} {f["train_s"]:.2f}s/{f["fit_s"]:.2f}s '
                                                                   f'probe {f["probe_ms"]["fit"]:.0f}ms' for f in rep), flush=True)
    print(json.dumps({f'{s["width"]}x{s["depth"]}': s.get('summary') for s in res['sizes']}, indent=1))

# --diagnose: what slows steps beside a write

class StandIn:
    "A thread that does one kind of work beside a fit until stopped"
    def __init__(self, kind:str, folder:Path, state=None):
        self.kind, self.folder, self.state, self.stop, self.done = kind, folder, state, threading.Event(), 0
    def _sleep(self):
        while not self.stop.is_set(): time.sleep(0.001)
    def _gil(self):
        while not self.stop.is_set():
            x = 0
            for i in range(10_000): x += i
    def _memcpy(self):
        a, b = torch.empty(2**27), torch.empty(2**27)      # 512 MB each
        while not self.stop.is_set(): b.copy_(a); self.done += 1
    def _disk(self):
        buf, p = bytes(64*2**20), self.folder/'standin.bin'
        while not self.stop.is_set():
            with open(p, 'wb', buffering=0) as f:
                for _ in range(16):
                    if self.stop.is_set(): break
                    f.write(buf)
                os.fsync(f.fileno())
            self.done += 1
    def _writer(self):
        from ddpsafe.manifest import write_checkpoint
        from ddpsafe.io import checkpoint_writers
        from ddpsafe.snapshot import lower_priority
        lower_priority(19)                                  # as AsyncWriter's thread
        while not self.stop.is_set():
            write_checkpoint(self.folder, self.done, checkpoint_writers(self.state), {})
            for p in self.folder.glob('*'): shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
            self.done += 1
    def __enter__(self):
        if self.kind != 'none':
            self.thread = threading.Thread(target=getattr(self, f'_{self.kind}'), daemon=True, name=f'standin-{self.kind}')
            self.thread.start()
        return self
    def __exit__(self, *exc):
        self.stop.set()
        if self.kind != 'none': self.thread.join()

def state_files(learn) -> dict:
    "The fit's state as a checkpoint's files hold it (the weights, Adam's two moments), copied into host buffers once"
    from ddpsafe.snapshot import StateBuffers
    ps = list(learn.model.parameters())
    opt = {'state': {i: dict(exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p)) for i, p in enumerate(ps)},
           'param_groups': [dict(lr=1e-3, params=list(range(len(ps))))]}
    s = StateBuffers().copy({'model.safetensors': learn.model.state_dict(), 'opt.pt': opt})
    sync(ps[0].device)
    return s

def standins(a, device, kinds:list, switch_ms=None) -> list:
    "Repetitions of one fit per stand-in, in an order rotated each repetition; each one's median step over the `none` fits'"
    kinds, reps, old = ['none', *[k for k in kinds if k != 'none'], 'none'], [], sys.getswitchinterval()
    if switch_ms: sys.setswitchinterval(switch_ms/1e3)
    try:
        for r in range(a.reps):
            rep = []
            for kind in rotated(kinds, r):
                with fit_folder(a) as folder:
                    learn, t0 = learner(a, device, folder), time.monotonic()
                    with StandIn(kind, folder, state_files(learn) if kind == 'writer' else None) as s:
                        st = fit(learn, device, limit=20.)[0].stamps     # the limit: a stand-in that starves training
                    steps = [e - b for b, e in zip(st, st[1:])][1:]      # the first step warms up
                    rep.append(dict(kind=kind, step_ms=1e3*statistics.median(steps), p90_ms=1e3*sorted(steps)[int(0.9*len(steps))],
                                    steps=len(steps), rounds=s.done))
                    print(f"  {kind}: median step {rep[-1]['step_ms']:.1f} ms, {s.done} rounds, {time.monotonic() - t0:.1f} s", flush=True)
            base = statistics.median(f['step_ms'] for f in rep if f['kind'] == 'none')
            for f in rep: f['ratio'] = f['step_ms']/base
            reps.append(rep)
            print(f'switch {sys.getswitchinterval()*1e3:.2f} ms rep {r}: ' + ', '.join(f"{f['kind']} {f['ratio']:.3f}" for f in rep))
    finally: sys.setswitchinterval(old)
    return dict(reps=reps, summary={k: spread(f['ratio'] for r in reps for f in r if f['kind'] == k) for k in set(kinds)})

GPU_CATS = {'kernel', 'gpu_memcpy', 'gpu_memset'}
SYNCS = ('cudaDeviceSynchronize', 'cudaStreamSynchronize', 'cudaEventSynchronize', 'cudaMemcpy', 'cudaMemcpyAsync')

def union(spans:list) -> float:
    "Total length covered by `spans` [(start, end)]"
    total, end = 0., float('-inf')
    for s, e in sorted(spans):
        if e <= end: continue
        total += e - max(s, end); end = e
    return total

def analyse(trace:dict) -> dict:
    "Per step of a Chrome trace with `step:<i>:<busy>` markers: wall, GPU busy, and the training thread's waits after syncs"
    ev = [e for e in trace['traceEvents'] if e.get('ph') == 'X']
    marks = sorted((e['ts'], e['name'], e['tid']) for e in ev if e.get('cat') == 'user_annotation' and e['name'].startswith('step:'))
    if len(marks) < 3: return dict(error=f'{len(marks)} step markers in the trace')
    main = marks[0][2]
    gpu = sorted((e['ts'], e['ts'] + e['dur']) for e in ev if e.get('cat') in GPU_CATS)
    on_main = sorted((e['ts'], e['ts'] + e.get('dur', 0), e['name'], e.get('cat')) for e in ev
                     if e['tid'] == main and e.get('cat') != 'user_annotation')
    syncs = [(s, e) for s, e, name, cat in on_main if cat == 'cuda_runtime' and name.startswith(SYNCS)]
    other = [e['ts'] for e in ev if e['tid'] != main and e.get('cat') in ('cpu_op', 'cuda_runtime')]
    steps = []
    for (t0, n0, _), (t1, n1, _) in zip(marks, marks[1:]):
        g = union([(max(s, t0), min(e, t1)) for s, e in gpu if e > t0 and s < t1])
        ends = [e for s, e in syncs if t0 <= e < t1]
        starts = [s for s, e, name, cat in on_main if t0 <= s < t1 + 1e4]
        waits = [min((s for s in starts if s >= e), default=t1) - e for e in ends]
        syncing = sum(min(e, t1) - max(s, t0) for s, e in syncs if e > t0 and s < t1)
        steps.append(dict(step=int(n1.split(':')[1]), busy=n1.split(':')[2] == '1', wall_ms=(t1 - t0)/1e3, gpu_ms=g/1e3,
                          gpu_idle_ms=(t1 - t0 - g)/1e3, sync_ms=syncing/1e3, after_sync_ms=sum(waits)/1e3,
                          after_sync_max_ms=max(waits, default=0)/1e3, syncs=len(ends), other_thread_ops=sum(t0 <= s < t1 for s in other)))
    keys = ('wall_ms', 'gpu_ms', 'gpu_idle_ms', 'sync_ms', 'after_sync_ms', 'after_sync_max_ms', 'syncs')
    groups = dict(beside=[s for s in steps if s['busy']], alone=[s for s in steps[1:] if not s['busy']])
    return dict(steps=steps, **{g: {k: statistics.median(r[k] for r in rows) if rows else None for k in keys} | dict(n=len(rows))
                                for g, rows in groups.items()})

def profiled_fit(mode:str, a, device, out:Path|None) -> dict:
    "One fit with ddpsafe's saves (`async` or `memory`) under the profiler, a marker at every step's end"
    with fit_folder(a) as folder:
        learn, ck = learner(a, device, folder), checkpointer(mode, a.every)
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == 'cuda' else [])
        with torch.profiler.profile(activities=acts) as prof: fit(learn, device, ck, mark=True)
        tf = folder/'trace.json'
        prof.export_chrome_trace(str(tf))
        if out is not None and len(z := gzip.compress(tf.read_bytes())) < 15*2**20: out.write_bytes(z)
        res = analyse(json.loads(tf.read_text()))
        print(prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=25), flush=True)
        return res

def diagnose(a, device, out:Path, res:dict):
    "The stand-ins, at the default switch interval and at `--switch-ms`, then the two profiled fits"
    s = standins(a, device, a.standins.split(','))
    res.update(switch_interval_ms=sys.getswitchinterval()*1e3, standins=s['reps'], standins_summary=s['summary'])
    write_json(out, res)
    if a.switch_ms:
        s = standins(a, device, ['gil', 'writer'], a.switch_ms)
        res['switch'] = dict(ms=a.switch_ms, reps=s['reps'], summary=s['summary']); write_json(out, res)
    for mode in ('async', 'memory') if not a.no_profile else ():
        res[f'profile_{mode}'] = prof = profiled_fit(mode, a, device, out.with_name(out.stem + '_async_trace.json.gz') if mode == 'async' else None)
        write_json(out, res)
        print(mode, json.dumps({g: prof.get(g) for g in ('beside', 'alone', 'error')}, indent=1), flush=True)
    print(json.dumps(dict(standins=res['standins_summary'], switch=res.get('switch', {}).get('summary')), indent=1))

PRESETS = dict(cpu=dict(width=2048, depth=8, batch=32, steps=40, every=10, reps=3),
               smoke=dict(width=64, depth=2, batch=8, steps=8, every=4, reps=1),
               gpu=dict(width=4096, depth=8, batch=2048, steps=100, every=25, reps=3))

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--cpu-smoke', action='store_true', help='tiny sizes, one repetition: the code paths and the JSON, not speed')
    p.add_argument('--gpu', action='store_true', help="on cuda:0, the issue's sizes: 1.7 GB (and 4 GB with --big), 100 steps, a save every 25")
    p.add_argument('--host', action='store_true', help=f'batches from the CPU, collated by {HOST_WORKERS} DataLoader workers, pinned on CUDA')
    p.add_argument('--thread', action='store_true', help='batches from the CPU, collated by the training thread (no workers)')
    p.add_argument('--big', action='store_true', help='with --gpu: also the 4 GB state (20 layers 4096 wide, batch 1024)')
    for k in ('width', 'depth', 'batch', 'steps', 'every', 'reps'): p.add_argument(f'--{k}', type=int, default=None)
    p.add_argument('--baselines', type=int, default=2, help='fits without the callback per repetition (default 2)')
    p.add_argument('--modes', default=','.join(MODES[1:]), help='modes besides the baseline, comma separated')
    p.add_argument('--threads', type=int, default=1, help='torch threads on the CPU (default 1)')
    p.add_argument('--budget', type=float, default=300., help='seconds; no repetition starts with less than 1.5 of the last left')
    p.add_argument('--diagnose', action='store_true', help='stand-in threads beside the fit, then profiled fits (default 2 reps)')
    p.add_argument('--standins', default=','.join(STANDINS[1:]), help='with --diagnose: the stand-ins, comma separated')
    p.add_argument('--switch-ms', type=float, default=0.5, help='with --diagnose: gil and writer again at this switch interval; 0: not')
    p.add_argument('--no-profile', action='store_true', help='with --diagnose: no profiled fits')
    p.add_argument('--dir', default=None, help='where checkpoints are written (default: a temporary folder)')
    p.add_argument('--out', default=None, help='the JSON file (default bench/results/fit_<cpu|gpu>.json, diagnose_<cpu|gpu>.json)')
    a = p.parse_args(argv)
    if a.host and a.thread: p.error('--host (workers collate) or --thread (the training thread collates), not both')
    for k, v in dict(PRESETS['smoke' if a.cpu_smoke else 'gpu' if a.gpu else 'cpu'], **({'reps': 2} if a.diagnose else {})).items():
        if getattr(a, k) is None: setattr(a, k, v)
    device = torch.device('cuda:0' if a.gpu else 'cpu')
    if device.type == 'cpu': torch.set_num_threads(1 if a.diagnose else a.threads)
    name = f'{"diagnose" if a.diagnose else "fit"}_{"gpu" if a.gpu else "cpu"}{"_host" if a.host else "_thread" if a.thread else ""}'
    out = Path(a.out or HERE/'results'/f'{name}.json')
    res = dict(date=now(), command=command('fit_bench.py', argv or None), cpu_smoke=a.cpu_smoke, host=a.host, thread=a.thread,
               device=device_facts(device), torch=torch.__version__, python=sys.version.split()[0],
               sizes=dict(width=a.width, depth=a.depth, batch=a.batch, steps=a.steps, every=a.every))
    (diagnose if a.diagnose else bench)(a, device, out, res)
    return 0

if __name__ == '__main__': sys.exit(main())
