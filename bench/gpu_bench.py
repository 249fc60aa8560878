"""GPU figures in one device call, one JSON rewritten after every measurement (a run cut short keeps what it measured):
1. `test_cuda`: `pytest tests/test_cuda.py` within `--test-seconds` (skipped is not passed);
2. `async_blocking`: CUDA states of `--sizes` GB, `pinned_d2h` (the floor), `ddpsafe_async`, `dcp_async`, `torch_save`
   (`checkpoint_bench.Bench` on the device), ratios per repetition (goal ddpsafe / pinned_d2h <= 1.2);
3. `steps_beside_write`: a device MLP step alone and beside a `--step-state` GB background write;
4. `resume`: `resume_bench.py`'s two loaders into a model on the device.
Each part is skipped, and says so, when the time left (`--budget`) is too short. Run on one NVIDIA H200 (2026-11-26);
never since. Method: the benchmarks page, "On a GPU".

    bash bench/gpu_bench.sh                          # on a GPU machine -> results/gpu.json; then --render it
    bash bench/gpu_bench.sh --merge bench/results/gpu.json --parts resume --test-k fsdp   # measure again what a cut run missed
    python bench/gpu_bench.py --cpu-smoke --out X    # the same code paths on the CPU, MB for GB: not speed"""
from __future__ import annotations
import os, sys, json, time, shutil, argparse, platform, datetime, statistics, tempfile, subprocess, traceback
from pathlib import Path
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from harness import make_state, tensors, fsync_file, trim, sync, device_facts
from checkpoint_bench import Bench   # the methods of the save benchmark
from resume_bench import learner_state, save_both, torch_load, ddpsafe_resume, timed   # the loaders of the resume benchmark

PARTS = ('test_cuda', 'async_blocking', 'steps_beside_write', 'resume')

# ------------------------------------------------------------------------------------------------------------
# 1. tests/test_cuda.py

def descendants(pid:int) -> list:
    "Every live process below `pid` (children first), from /proc"
    kids = {}
    for d in Path('/proc').iterdir():
        if d.name.isdigit():
            try: kids.setdefault(int((d/'stat').read_text().rsplit(')', 1)[1].split()[1]), []).append(int(d.name))
            except (OSError, IndexError, ValueError): pass
    out, todo = [], list(kids.get(pid, []))
    while todo: c = todo.pop(); out.append(c); todo += kids.get(c, [])
    return out

def run_test_cuda(seconds:float, select:str|None=None) -> dict:
    "pytest tests/test_cuda.py (`-k select`), killed after `seconds`: exit code, counts, and each test's outcome"
    cmd = [sys.executable, '-m', 'pytest', str(ROOT/'tests'/'test_cuda.py'), '-v', '-rA', '-p', 'no:cacheprovider', *(['-k', select] if select else [])]
    t0 = time.monotonic()
    with tempfile.TemporaryFile('w+') as log:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try: code = p.wait(seconds)
        except subprocess.TimeoutExpired:
            code = None
            for pid in [p.pid, *descendants(p.pid)]:      # torchrun's ranks live in sessions of their own: each by its pid
                try: os.kill(pid, 9)
                except ProcessLookupError: pass
            p.wait()
        log.seek(0); out = log.read()
    import re    # each test's outcome from -v's lines, so that a run cut short still says which tests passed
    tests = dict(re.findall(r'^\S*test_cuda\.py::(\S+) (PASSED|FAILED|SKIPPED|ERROR)\b', out, re.M))
    counts = {k: sum(v == k.upper() for v in tests.values()) for k in ('passed', 'failed', 'skipped', 'error')}
    return dict(command=' '.join(cmd[1:]), exit_code=code, timed_out=code is None, seconds=round(time.monotonic() - t0, 1),
                **counts, tests=tests, ok=code == 0 and counts['passed'] > 0 and counts['failed'] == counts['error'] == 0,
                tail=out[-3000:])

# ------------------------------------------------------------------------------------------------------------
# 2. async blocking time on a device state

class DeviceBench(Bench):
    "`checkpoint_bench.Bench` on a state that lives on `device`, with the pinned device-to-host copy as the floor"
    def __init__(self, state, folder:Path, device):
        from ddpsafe.snapshot import StateBuffers, AsyncWriter
        from ddpsafe.checkpoint import rng_state
        self.state, self.folder, self.device = state, folder, device
        self.sbufs, self.writer, self.rngs = StateBuffers(), AsyncWriter(), [rng_state()]
        self.meta = dict(epoch=0, iter=1, epoch_done=False, reason='steps', world_size=1, monitor='valid_loss', metric=None)
        self.ckstate = dict(epoch=0, iter=1, train_iter=1000, global_step=1000, world_size=1)
        self.n = 0
        pin = device.type == 'cuda'
        self.host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=pin) for t in tensors(state)]   # pinned_d2h's buffers
        self.sbufs.copy(state)                                                                     # ddpsafe's, allocated once

    def pinned_d2h(self):
        t0 = time.perf_counter()
        for b, t in zip(self.host, tensors(self.state)): b.copy_(t, non_blocking=True)
        sync(self.device)
        dt = time.perf_counter() - t0
        return dt, dt, {}

    def clean(self):
        "Remove what the methods wrote: the disk holds one checkpoint at a time"
        for p in list(self.folder.iterdir()): shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)

ASYNC_METHODS = ('pinned_d2h', 'ddpsafe_async', 'dcp_async', 'torch_save')

def measure_async(gb:float, reps:int, device, folder:Path, unit:int, left) -> dict:
    "Each method `reps` times on a device state of `gb` units (GB, or MB in the smoke run); stops early when `left()` runs out"
    t_state = time.perf_counter()
    state = make_state(int(gb*unit))
    state = {'model': {k: v.to(device) for k, v in state['model'].items()},
             'opt': dict(state=[{k: (v.to(device) if torch.is_tensor(v) else v) for k, v in s.items()} for s in state['opt']['state']],
                         hypers=state['opt']['hypers'])}
    sync(device)
    nbytes = sum(t.numel()*t.element_size() for t in tensors(state))
    sub = folder/f'{gb:g}'; sub.mkdir(parents=True, exist_ok=True)
    b = DeviceBench(state, sub, device)
    setup_s = time.perf_counter() - t_state
    runs, stopped = [], None
    for r in range(reps):
        t_rep = time.perf_counter()
        rep = {}
        for m in (ASYNC_METHODS if r % 2 == 0 else ASYNC_METHODS[::-1]):     # the order alternates: drift hits all
            blocking, total, extra = getattr(b, m)()
            rep[m] = dict(blocking=blocking, total=total, **extra)
            b.clean(); trim()
        rep['rep_seconds'] = time.perf_counter() - t_rep
        runs.append(rep)
        if r + 1 < reps and left() < 1.5*rep['rep_seconds']: stopped = f'after {r+1} of {reps} repetitions: the time budget'; break
    b.writer.wait()
    def med(f): return statistics.median(f(x) for x in runs)
    res = dict(gb=gb, bytes=nbytes, setup_seconds=round(setup_s, 2), reps=runs, stopped_early=stopped,
               blocking_median={m: med(lambda x: x[m]['blocking']) for m in ASYNC_METHODS},
               total_median={m: med(lambda x: x[m]['total']) for m in ASYNC_METHODS},
               ratios=dict(ddpsafe_over_pinned_d2h=med(lambda x: x['ddpsafe_async']['blocking'] / x['pinned_d2h']['blocking']),
                           dcp_async_over_ddpsafe=med(lambda x: x['dcp_async']['blocking'] / x['ddpsafe_async']['blocking']),
                           torch_save_over_ddpsafe=med(lambda x: x['torch_save']['blocking'] / x['ddpsafe_async']['blocking'])))
    res['goal'] = 'ddpsafe_over_pinned_d2h <= 1.2'
    res['met'] = res['ratios']['ddpsafe_over_pinned_d2h'] <= 1.2
    del b, state; trim()
    if device.type == 'cuda': torch.cuda.empty_cache()
    return res

# ------------------------------------------------------------------------------------------------------------
# 3. steps beside a background write

def timed_steps(step, n:int|None=None, until=None) -> list:
    "Step times: `n` steps, or steps until `until()` is true"
    out = []
    while (n is not None and len(out) < n) or (until is not None and not until()):
        t0 = time.perf_counter(); step(); out.append(time.perf_counter() - t0)
    return out

def device_trainer(device, width:int, batch:int):
    "A synchronized MLP training step on `device`: forward, backward, Adam"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = torch.randn(batch, width, device=device), torch.randn(batch, 1, device=device)
    def step():
        opt.zero_grad(); torch.nn.functional.mse_loss(model(x), y).backward(); opt.step(); sync(device)
    return step

def measure_steps(gb:float, reps:int, device, folder:Path, unit:int, width:int, batch:int, baseline_steps:int, left) -> dict:
    "Step times alone and during one background ddpsafe write of a `gb`-unit device state, `reps` paired repetitions"
    from ddpsafe.snapshot import StateBuffers, AsyncWriter
    from ddpsafe.parts import checkpoint_writers
    from ddpsafe.manifest import write_checkpoint
    state = make_state(int(gb*unit))
    state = dict(model={k: v.to(device) for k, v in state['model'].items()}, opt=state['opt'])
    step, bufs, writer = device_trainer(device, width, batch), StateBuffers(), AsyncWriter()
    timed_steps(step, 5)                                           # warm-up
    bufs.copy(state)
    runs, stopped = [], None
    for r in range(reps):
        t_rep = time.perf_counter()
        base = timed_steps(step, baseline_steps)
        snap = bufs.copy(state)                                     # the blocking copy is part 2's figure, not this one's
        root = folder/f'steps-{r}'
        write = lambda: write_checkpoint(root, r, checkpoint_writers({'model.safetensors': snap['model'], 'optimizer.pt': snap['opt'],
                                                                      'state.pt': {}, 'rng.pt': []}), {})
        t0 = time.perf_counter()
        writer.submit(write)
        during = timed_steps(step, until=lambda: not writer.busy)
        write_s = time.perf_counter() - t0
        if (err := writer.wait()) is not None: raise err
        shutil.rmtree(root, ignore_errors=True); trim()
        runs.append(dict(baseline_median=statistics.median(base), during_median=statistics.median(during), steps_during=len(during),
                         write_s=write_s, ratio=statistics.median(during) / statistics.median(base)))
        if r + 1 < reps and left() < 1.5*(time.perf_counter() - t_rep): stopped = f'after {r+1} of {reps} repetitions: the time budget'; break
    ratios = [x['ratio'] for x in runs]
    return dict(gb=gb, width=width, batch=batch, reps=runs, stopped_early=stopped, min=min(ratios), median=statistics.median(ratios),
                max=max(ratios), goal='<= 1.05', met=statistics.median(ratios) <= 1.05)

# ------------------------------------------------------------------------------------------------------------
# 4. resume

def measure_resume(mb:int, reps:int, device, left) -> dict:
    "resume_bench's two loaders into a model on `device`: seconds each, ratio ddpsafe / torch.load"
    folder = Path(tempfile.mkdtemp(prefix='ddpsafe-gpu-resume-'))
    try:
        model, opt = learner_state(mb)
        save_both(model, opt, folder)
        model.to(device)                                           # the weights are loaded onto the device
        def tl(): torch_load(model, opt, folder); sync(device)
        def dr(): ddpsafe_resume(model, opt, folder); sync(device)
        tl(); dr()                                                 # warm-up
        runs, stopped = [], None
        for r in range(reps):
            t_rep = time.perf_counter()
            order = [('torch_load', tl), ('ddpsafe', dr)][::(-1 if r % 2 else 1)]
            rep = {}
            for name, f in order: trim(); rep[name] = timed(f)
            rep['ratio'] = rep['ddpsafe'] / rep['torch_load']
            runs.append(rep)
            if r + 1 < reps and left() < 1.5*(time.perf_counter() - t_rep): stopped = f'after {r+1} of {reps} repetitions: the time budget'; break
        ratios = [x['ratio'] for x in runs]
        return dict(mb=mb, reps=runs, stopped_early=stopped, torch_load_median=statistics.median(x['torch_load'] for x in runs),
                    ddpsafe_median=statistics.median(x['ddpsafe'] for x in runs), min=min(ratios), median=statistics.median(ratios),
                    max=max(ratios), goal='<= 1.2', met=statistics.median(ratios) <= 1.2)
    finally: shutil.rmtree(folder, ignore_errors=True)

# ------------------------------------------------------------------------------------------------------------

def render(res:dict) -> str:
    "The JSON as the markdown the benchmarks page shows: the card's name, then one table per part"
    d = res['device']
    head = f"**{d['name']}**" + (f", {d['memory_gb']} GiB, CUDA {d['cuda']}" if d.get('type') == 'cuda' else ' (CPU smoke run: the figures mean nothing)')
    lines = [f"{head}; torch {res['torch']}, {res['date'][:10]}", '']
    if tc := res.get('test_cuda'):
        lines += [f"`tests/test_cuda.py`: {tc['passed']} passed, {tc['failed']} failed, {tc['skipped']} skipped, {tc['error']} errors"
                  + (' (did not finish in time)' if tc['timed_out'] else '')
                  + (': ' + ', '.join(f'`{n}` {v.lower()}' for n, v in tc['tests'].items()) if tc.get('tests') else ''), '']
    if res.get('async_blocking'):
        u = 'MB' if res['cpu_smoke'] else 'GB'
        lines += [f'| state | pinned D2H copy (s) | ddpsafe async blocks (s) | ddpsafe / pinned copy (goal <= 1.2) | DCP async_save blocks (s) | torch.save (s) |',
                  '|---|---|---|---|---|---|']
        for x in res['async_blocking']:
            b, r = x['blocking_median'], x['ratios']
            lines.append(f"| {x['gb']:g} {u} | {b['pinned_d2h']:.3f} | {b['ddpsafe_async']:.3f} | {r['ddpsafe_over_pinned_d2h']:.2f}x | "
                         f"{b['dcp_async']:.3f} ({r['dcp_async_over_ddpsafe']:.1f}x ddpsafe) | {b['torch_save']:.3f} ({r['torch_save_over_ddpsafe']:.1f}x) |")
        lines.append('')
    if s := res.get('steps_beside_write'):
        lines += [f"Steps beside a background write of {s['gb']:g} {'MB' if res['cpu_smoke'] else 'GB'}: {s['median']:.3f}x the step time "
                  f"without one (min {s['min']:.3f}, max {s['max']:.3f}, {len(s['reps'])} repetitions; goal <= 1.05)", '']
    if r := res.get('resume'):
        lines += [f"Resume of {r['mb']} MB onto the device: ddpsafe {r['ddpsafe_median']:.3f} s, torch.load {r['torch_load_median']:.3f} s: "
                  f"{r['median']:.2f}x (goal <= 1.2)", '']
    for k, v in {**res.get('skipped', {}), **{n: 'ERROR ' + e.splitlines()[0] for n, e in res.get('errors', {}).items()}}.items():
        lines.append(f'- {k}: {v}')
    return '\n'.join(lines).rstrip() + '\n'

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--cpu-smoke', action='store_true', help='every part on the CPU, sizes in MB instead of GB, a tiny MLP: checks the code, not speed')
    p.add_argument('--budget', type=float, default=450., help='seconds for the whole run (default 450); parts that do not fit are skipped')
    p.add_argument('--sizes', default='1,4,16', help='async_blocking state sizes in GB (MB with --cpu-smoke), comma separated')
    p.add_argument('--reps', type=int, default=3, help='repetitions per size and part (default 3)')
    p.add_argument('--step-state', type=float, default=4., help='GB (MB with --cpu-smoke) written beside the timed steps (default 4)')
    p.add_argument('--width', type=int, default=None, help='MLP width of the timed steps (default 8192; 64 with --cpu-smoke)')
    p.add_argument('--batch', type=int, default=None, help='MLP batch of the timed steps (default 4096; 16 with --cpu-smoke)')
    p.add_argument('--resume-mb', type=int, default=None, help='resume state in MB (default 2000; 10 with --cpu-smoke)')
    p.add_argument('--test-seconds', type=float, default=280., help='bound on tests/test_cuda.py (default 280: it took about 260 s on an H200)')
    p.add_argument('--test-k', default=None, help='only the tests of tests/test_cuda.py that pytest -k selects')
    p.add_argument('--merge', default=None, metavar='JSON', help="an earlier run's JSON on the same card: its parts are kept unless measured again")
    p.add_argument('--parts', default=','.join(PARTS), help=f'which parts, comma separated (default all: {",".join(PARTS)})')
    p.add_argument('--dir', default=None, help='where checkpoints are written (default: a temporary folder, removed after)')
    p.add_argument('--out', default=str(HERE/'results'/'gpu.json'), help='the JSON file (default bench/results/gpu.json)')
    p.add_argument('--render', default=None, metavar='JSON', help="print an existing JSON file as the benchmarks page's markdown, and exit")
    return p.parse_args(argv)

def main(argv=None) -> int:
    a = parse_args(argv)
    if a.render: print(render(json.loads(Path(a.render).read_text())), end=''); return 0
    t0 = time.monotonic()
    left = lambda: a.budget - (time.monotonic() - t0)
    smoke = a.cpu_smoke
    if not smoke and not torch.cuda.is_available():
        print('gpu_bench: torch sees no CUDA device; run with --cpu-smoke to check the code on the CPU', file=sys.stderr); return 2
    device = torch.device('cpu' if smoke else 'cuda')
    unit = 10**6 if smoke else 10**9
    width, batch = a.width or (64 if smoke else 8192), a.batch or (16 if smoke else 4096)
    resume_mb = a.resume_mb or (10 if smoke else 2000)
    parts = [p for p in a.parts.split(',') if p]
    if unknown := set(parts) - set(PARTS): print(f'gpu_bench: unknown parts {sorted(unknown)}', file=sys.stderr); return 2
    folder = Path(a.dir or tempfile.mkdtemp(prefix='ddpsafe-gpu-bench-')); folder.mkdir(parents=True, exist_ok=True)
    out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True)
    res = dict(date=datetime.datetime.now().isoformat(timespec='seconds'), command=' '.join(sys.argv), cpu_smoke=smoke,
               units='MB (cpu smoke: figures mean nothing)' if smoke else 'GB',
               device=device_facts(device), torch=torch.__version__, python=platform.python_version(), platform=platform.platform(),
               budget_seconds=a.budget, parts=parts, skipped={}, errors={},
               test_cuda=None, async_blocking=[], steps_beside_write=None, resume=None)
    if a.merge:      # the parts of an earlier run on the same card are kept where this run does not measure them again
        old = json.loads(Path(a.merge).read_text())
        if old['device'].get('name') != res['device'].get('name'):
            print(f"gpu_bench: --merge {a.merge} was measured on {old['device'].get('name')}, not {res['device'].get('name')}", file=sys.stderr); return 2
        res.update({k: old[k] for k in ('test_cuda', 'async_blocking', 'steps_beside_write', 'resume') if old.get(k)})
        res['earlier_runs'] = old.get('earlier_runs', []) + [{k: old[k] for k in ('date', 'command', 'torch', 'skipped', 'errors', 'seconds') if k in old}]
    def save():
        res['seconds'] = round(time.monotonic() - t0, 1)
        tmp = out.with_suffix('.json.tmp'); tmp.write_text(json.dumps(res, indent=1, default=str)); os.replace(tmp, out)
    def attempt(name, f, need:float=5., label=None, store=None):
        "Run part `name` if `need` seconds are left, `store` its result, then save; its error is recorded under `label`, not raised"
        label = label or name
        if name not in parts: return None
        if left() < need: res['skipped'][label] = f'{left():.0f} s left of the {a.budget:.0f} s budget'; save(); return None
        print(f'gpu_bench: {label} ({left():.0f} s left)', flush=True)
        try:
            r = f()
            if store and r is not None: store(r)
            return r
        except Exception as e: res['errors'][label] = f'{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}'; return None
        finally: save()
    def put(key): return lambda r: res.__setitem__(key, r)
    save()
    try:
        def keep_tests(r):    # with --merge and --test-k, the outcomes of the earlier run's other tests are kept beside these
            old = res.get('test_cuda') or {}
            if a.merge and a.test_k and old.get('tests'):
                tests = {**old['tests'], **r['tests']}
                r = dict(r, tests=tests, earlier=dict(command=old.get('command'), note=old.get('note')),
                         **{k: sum(v == k.upper() for v in tests.values()) for k in ('passed', 'failed', 'skipped', 'error')})
                r['ok'] = r['exit_code'] == 0 and r['passed'] > 0 and r['failed'] == r['error'] == 0
            res['test_cuda'] = r
        attempt('test_cuda', lambda: run_test_cuda(min(a.test_seconds, max(left() - 60, 10)), a.test_k), store=keep_tests)
        sizes = [float(s) for s in a.sizes.split(',') if s]
        big = [gb for gb in sizes if gb >= 8 and not smoke]     # the big states last: they take most of the time, the rest fits before them
        def blocking(gb):
            def keep(r):    # one entry a size: a size measured again (--merge) replaces the earlier one
                res['async_blocking'] = sorted([x for x in res['async_blocking'] if x['gb'] != r['gb']] + [r], key=lambda x: x['gb'])
            # need: setup and one repetition, measured on an H200 at about 3.4 s and 5 s a GB
            attempt('async_blocking', lambda: measure_async(gb, a.reps, device, folder, unit, left), need=10 + 9*gb*(0 if smoke else 1),
                    label=f'async_blocking {gb:g}', store=keep)
        for gb in sizes:
            if gb not in big: blocking(gb)
        attempt('steps_beside_write', lambda: measure_steps(a.step_state, a.reps, device, folder, unit, width, batch, 20 if smoke else 40, left),
                need=15, store=put('steps_beside_write'))
        attempt('resume', lambda: measure_resume(resume_mb, a.reps, device, left), need=10, store=put('resume'))
        for gb in big: blocking(gb)
    finally:
        save()
        if a.dir is None: shutil.rmtree(folder, ignore_errors=True)
    print(f'gpu_bench: wrote {out} in {res["seconds"]} s; errors: {sorted(res["errors"]) or "none"}; skipped: {sorted(res["skipped"]) or "none"}')
    return 1 if res['errors'] else 0

if __name__ == '__main__': sys.exit(main())
