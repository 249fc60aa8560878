"""What slows training steps beside a background write (issue 51, item 2): `fit_bench.py`'s fit with one stand-in thread
beside it at a time (`sleep`, `gil`, `memcpy`, `disk`, `writer`: ddpsafe's own writes), each fit's median step over the
same repetition's `none` fits; a second pass over `gil` and `writer` at `--switch-ms`; then a `torch.profiler` trace of an
`async` and a `memory` fit, per step: wall, GPU busy, the training thread's wait after each CUDA synchronization.
Method: the benchmarks page, "What a write could take from a step".

    python bench/fit_diagnose.py --gpu --host --reps 1 --standins gil,memcpy,disk,writer   # -> results/diagnose_gpu_host.json
    python bench/fit_diagnose.py --cpu-smoke      # tiny sizes on the CPU: checks the code, not speed"""
from __future__ import annotations
import gc, os, sys, json, time, gzip, argparse, statistics, tempfile, shutil, threading, contextlib, io
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, sync, device_facts, command, rotated, spread, write_json, now
from fit_bench import learner, writing, PRESETS

STANDINS = ('none', 'sleep', 'gil', 'memcpy', 'disk', 'writer')

class StandIn:
    "A thread that does one kind of work beside a fit until stopped"
    def __init__(self, kind:str, folder:Path, state=None): self.kind, self.folder, self.state, self.stop, self.done = kind, folder, state, threading.Event(), 0
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
        step = 0
        while not self.stop.is_set():
            write_checkpoint(self.folder, step, checkpoint_writers(self.state), {}); shutil.rmtree(self.folder/f'{step:08d}', ignore_errors=True)
            for p in self.folder.glob('*'): shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
            step += 1; self.done += 1
    def __enter__(self):
        if self.kind != 'none':
            self.thread = threading.Thread(target=getattr(self, f'_{self.kind}'), daemon=True, name=f'standin-{self.kind}'); self.thread.start()
        return self
    def __exit__(self, *exc):
        self.stop.set()
        if self.kind != 'none': self.thread.join()

def state_files(learn) -> dict:
    "The fit's state as the files of a checkpoint hold them (the weights, Adam's two moments), copied into host buffers once"
    from ddpsafe.snapshot import StateBuffers
    ps = list(learn.model.parameters())
    opt = {'state': {i: dict(exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p)) for i, p in enumerate(ps)}, 'param_groups': [dict(lr=1e-3, params=list(range(len(ps))))]}
    s = StateBuffers().copy({'model.safetensors': learn.model.state_dict(), 'opt.pt': opt})
    sync(next(learn.model.parameters()).device)
    return s

def timed_fit(learn, device, cbs=(), limit:float=20.) -> list:
    "Step times (s) of `learn.fit(1)`, each step from one training `after_batch` to the next, the device synchronized; cancelled after `limit` s"
    from fastai.callback.core import Callback, CancelFitException
    class StepTimer(Callback):
        order = 66
        def before_train(self): sync(device); self.stamps = [time.perf_counter()]
        def after_batch(self):
            if not self.training: return
            sync(device); self.stamps.append(time.perf_counter())
            if self.stamps[-1] - self.stamps[0] > limit and len(self.stamps) > 3: raise CancelFitException()   # a stand-in that starves training
    t = StepTimer()
    with learn.no_bar(), learn.no_logging(), contextlib.redirect_stdout(io.StringIO()): learn.fit(1, 1e-5, cbs=[*cbs, t])
    return [b - a for a, b in zip(t.stamps, t.stamps[1:])][1:]      # the first step warms up

def standins(a, device, switch_ms=None) -> list:
    "Repetitions of one fit per stand-in, in an order rotated each repetition; the median step of each"
    kinds = ['none', *[k for k in a.standins.split(',') if k != 'none'], 'none']
    reps, old = [], sys.getswitchinterval()
    if switch_ms: sys.setswitchinterval(switch_ms/1e3)
    try:
        for r in range(a.reps):
            order, rep = rotated(kinds, r), []
            for kind in order:
                folder, t0 = Path(tempfile.mkdtemp(dir=a.dir)), time.monotonic()
                try:
                    learn = learner(a.width, a.depth, a.batch, a.steps, device, folder, a.host)
                    files = state_files(learn) if kind == 'writer' else None
                    with StandIn(kind, folder, files) as s: steps = timed_fit(learn, device)
                    rep.append(dict(kind=kind, step_ms=1e3*statistics.median(steps), p90_ms=1e3*sorted(steps)[int(0.9*len(steps))], steps=len(steps), rounds=s.done))
                    print(f"  {kind}: median step {rep[-1]['step_ms']:.1f} ms, {s.done} rounds, {time.monotonic() - t0:.1f} s", flush=True)
                finally: shutil.rmtree(folder, ignore_errors=True); gc.collect()   # as fit_bench: nothing of CUDA left for a forked worker to free
            base = statistics.median(f['step_ms'] for f in rep if f['kind'] == 'none')
            for f in rep: f['ratio'] = f['step_ms']/base
            reps.append(rep)
            print(f'switch {sys.getswitchinterval()*1e3:.2f} ms rep {r}: ' + ', '.join(f"{f['kind']} {f['ratio']:.3f}" for f in rep), flush=True)
    finally: sys.setswitchinterval(old)
    return reps

def summary(reps:list) -> dict:
    "Median and range of each stand-in's ratios"
    return {k: spread(f['ratio'] for r in reps for f in r if f['kind'] == k) for k in {f['kind'] for r in reps for f in r}}

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
    on_main = sorted((e['ts'], e['ts'] + e.get('dur', 0), e['name'], e.get('cat')) for e in ev if e['tid'] == main and e.get('cat') != 'user_annotation')
    other = sorted((e['ts'], e['ts'] + e.get('dur', 0), e['name']) for e in ev if e['tid'] != main and e.get('cat') in ('cpu_op', 'cuda_runtime'))
    steps = []
    for (t0, n0, _), (t1, n1, _) in zip(marks, marks[1:]):
        busy = n1.split(':')[2] == '1'          # the marker at a step's end says whether a write was in flight then
        g = union([(max(s, t0), min(e, t1)) for s, e in gpu if e > t0 and s < t1])
        ends = [(e, name) for s, e, name, cat in on_main if cat == 'cuda_runtime' and name.startswith(SYNCS) and t0 <= e < t1]
        starts = [s for s, e, name, cat in on_main if t0 <= s < t1 + 1e4]
        waits = [min((s for s in starts if s >= e), default=t1) - e for e, _ in ends]
        syncing = sum(min(e, t1) - max(s, t0) for s, e, name, cat in on_main if cat == 'cuda_runtime' and name.startswith(SYNCS) and e > t0 and s < t1)
        steps.append(dict(step=int(n1.split(':')[1]), busy=busy, wall_ms=(t1 - t0)/1e3, gpu_ms=g/1e3, gpu_idle_ms=(t1 - t0 - g)/1e3,
                          sync_ms=syncing/1e3, after_sync_ms=sum(waits)/1e3, after_sync_max_ms=max(waits, default=0)/1e3, syncs=len(ends),
                          other_thread_ops=sum(1 for s, e, name in other if t0 <= s < t1)))
    def med(rows, k): return statistics.median(r[k] for r in rows) if rows else None
    groups = dict(beside=[s for s in steps if s['busy']], alone=[s for s in steps[1:] if not s['busy']])
    return dict(steps=steps, **{g: {k: med(rows, k) for k in ('wall_ms', 'gpu_ms', 'gpu_idle_ms', 'sync_ms', 'after_sync_ms', 'after_sync_max_ms', 'syncs')} | dict(n=len(rows))
                                for g, rows in groups.items()})

def profiled_fit(mode:str, a, device, out:Path|None) -> dict:
    "One fit with ddpsafe's saves (`async` or `memory`) under the profiler, a marker at every step's end"
    from fastai.callback.core import Callback
    from ddpsafe.checkpoint import CheckpointCallback
    folder = Path(tempfile.mkdtemp(dir=a.dir))
    try:
        learn = learner(a.width, a.depth, a.batch, a.steps, device, folder, a.host)
        ck = CheckpointCallback(every_epoch=None, resume=False, **(dict(every_steps=a.every, async_save=True) if mode == 'async' else dict(memory_every_steps=a.every)))
        class Marker(Callback):
            order = 66
            def before_train(self): self.i = 0
            def after_batch(self):
                if not self.training: return
                busy = bool(ck.saver and writing(ck.saver))
                sync(device); self.i += 1
                with torch.profiler.record_function(f'step:{self.i}:{int(busy)}'): pass
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == 'cuda' else [])
        with torch.profiler.profile(activities=acts) as prof, learn.no_bar(), learn.no_logging(), contextlib.redirect_stdout(io.StringIO()):
            learn.fit(1, 1e-5, cbs=[ck, Marker()])
        tf = Path(tempfile.mkdtemp(dir=a.dir))/'trace.json'
        prof.export_chrome_trace(str(tf))
        trace = json.loads(tf.read_text())
        if out is not None:
            z = gzip.compress(tf.read_bytes())
            if len(z) < 15*2**20: out.write_bytes(z)
        shutil.rmtree(tf.parent, ignore_errors=True)
        res = analyse(trace)
        res['top_main'] = prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=25)
        return res
    finally: shutil.rmtree(folder, ignore_errors=True); gc.collect()

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--gpu', action='store_true'); p.add_argument('--cpu-smoke', action='store_true')
    for k in ('width', 'depth', 'batch', 'steps', 'every', 'reps'): p.add_argument(f'--{k}', type=int, default=None)
    p.add_argument('--standins', default=','.join(STANDINS[1:]))
    p.add_argument('--switch-ms', type=float, default=0.5, help='a second pass over none, gil and writer at this switch interval; 0: none')
    p.add_argument('--host', action='store_true', help="batches from the CPU through DataLoader workers (fit_bench's --host)")
    p.add_argument('--no-profile', action='store_true')
    p.add_argument('--dir', default=None); p.add_argument('--out', default=None)
    a = p.parse_args(argv)
    preset = dict(PRESETS['smoke' if a.cpu_smoke else 'gpu' if a.gpu else 'cpu'], reps=2)
    for k, v in preset.items():
        if getattr(a, k) is None: setattr(a, k, v)
    device = torch.device('cuda:0' if a.gpu else 'cpu')
    if device.type == 'cpu': torch.set_num_threads(1)
    out = Path(a.out or HERE/'results'/f'diagnose_{"gpu" if a.gpu else "cpu"}{"_host" if a.host else ""}.json')
    res = dict(date=now(), command=command('fit_diagnose.py', argv or None),
               device=device_facts(device), torch=torch.__version__, python=sys.version.split()[0], host=a.host, sizes=dict(width=a.width, depth=a.depth, batch=a.batch, steps=a.steps, every=a.every),
               switch_interval_ms=sys.getswitchinterval()*1e3)
    dump = lambda: write_json(out, res)
    res['standins'] = standins(a, device); res['standins_summary'] = summary(res['standins']); dump()
    if a.switch_ms:
        kept, a.standins = a.standins, 'gil,writer'
        res['switch'] = dict(ms=a.switch_ms, reps=standins(a, device, a.switch_ms)); res['switch']['summary'] = summary(res['switch']['reps']); dump()
        a.standins = kept
    if not a.no_profile:
        for mode in ('async', 'memory'):
            prof = profiled_fit(mode, a, device, out.with_name(out.stem + f'_{mode}_trace.json.gz') if mode == 'async' else None)
            print(prof.pop('top_main'), flush=True)
            res[f'profile_{mode}'] = prof; dump()
            print(mode, json.dumps({g: prof.get(g) for g in ('beside', 'alone', 'error')}, indent=1), flush=True)
    print(json.dumps(dict(standins=res['standins_summary'], switch=res.get('switch', {}).get('summary')), indent=1))
    return 0

if __name__ == '__main__': sys.exit(main())
