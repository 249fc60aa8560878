"""DataLoader workers forked beside gloo's threads: how many 40-epoch `torchrun` fits on 2 ranks hang (no new epoch for
`--stall` s), stock fastai against ddpsafe, alternately, beside `--busy` spinning processes; and what ddpsafe's watch over
a worker start costs (200 starts with and without it, over the fit's epoch time). Goal (issue 31): 0 hangs, <= 1%.
Method: the benchmarks page, "DataLoader workers forked beside gloo: hangs".

    python bench/hang_bench.py --runs 10 --epochs 40      # -> results/hangs.json
    python bench/hang_bench.py --start-cost-only          # only the watch's cost, into the same file"""
from __future__ import annotations
import os, sys, json, time, signal, argparse, platform, datetime, statistics, subprocess, tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIT = r'''
import os, sys, time, torch
mode, n_epoch = sys.argv[1], int(sys.argv[2])
from fastai.data.core import Datasets
from fastai.data.transforms import ItemGetter
from fastai.learner import Learner
from fastai.losses import MSELossFlat
from fastai.callback.core import Callback
from fastai.callback.progress import ProgressCallback
import fastai.distributed as fd
if mode == 'stock':                                  # what stock fastai needs to run DDP on a CPU, and nothing else
    os.environ['ACCELERATE_USE_CPU'] = '1'
    def _broadcast(self, t, rank):
        t = torch.LongTensor(t); torch.distributed.broadcast(t, rank); return t.tolist()
    fd.DistributedDL._broadcast = _broadcast
    cbs = []
else:
    from ddpsafe.all import CheckpointCallback
    cbs = [CheckpointCallback(path=sys.argv[3])]
g = torch.Generator().manual_seed(0)
x = torch.randn(128, 4, generator=g); y = x @ torch.tensor([1.,2.,3.,4.])
items = [(u, v[None]) for u, v in zip(x, y)]
dls = Datasets(items, [[ItemGetter(0)], [ItemGetter(1)]], splits=[list(range(96)), list(range(96, 128))]).dataloaders(bs=8, device='cpu', num_workers=2)
class Say(Callback):
    def after_epoch(self): print(f'EPOCH {self.epoch} {time.time():.3f}', flush=True)
learn = Learner(dls, torch.nn.Linear(4, 1), loss_func=MSELossFlat(), cbs=[Say()])
learn.remove_cb(ProgressCallback)
with learn.distrib_ctx(sync_bn=False): learn.fit(n_epoch, 1e-3, cbs=cbs)
print('DONE', flush=True)
'''

def one_fit(mode:str, n_epoch:int, stall:float, tmp:Path) -> dict:
    "One torchrun of the fit: hung or not, seconds, epochs seen"
    script = tmp/'fit.py'; script.write_text(FIT)
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1'}
    t0, last, epochs, hung = time.monotonic(), time.monotonic(), 0, False
    out = open(tmp/f'{mode}.out', 'w+')
    p = subprocess.Popen([str(Path(sys.executable).parent/'torchrun'), '--nproc_per_node', '2', str(script), mode, str(n_epoch),
                          str(tmp/'ck')], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=tmp)
    while p.poll() is None:
        time.sleep(0.5)
        n = (tmp/f'{mode}.out').read_text().count('EPOCH ')
        if n != epochs: epochs, last = n, time.monotonic()
        if time.monotonic() - last > stall:
            hung = True
            for sig in (signal.SIGTERM, signal.SIGKILL):
                subprocess.run(['pkill', f'-{int(sig)}', '-f', str(script)]); time.sleep(1)
            os.killpg(p.pid, signal.SIGKILL); p.wait(); break
    text = (tmp/f'{mode}.out').read_text()
    return dict(mode=mode, hung=hung, code=p.returncode, seconds=round(time.monotonic() - t0, 1), epochs=text.count('EPOCH ') // 2,
                done=text.count('DONE'), restarted='did not reach its loop' in text)

def start_cost(reps:int=200) -> dict:
    "Seconds from `iter()` to the first batch of a 2-worker torch DataLoader, watched by ddpsafe or not"
    import torch, ddpsafe.preempt as pm
    dl = torch.utils.data.DataLoader(torch.arange(64.), batch_size=8, num_workers=2)
    watched, plain, real = [], [], pm.stuck_workers
    for i in range(2*reps):
        pm.stuck_workers = real if i % 2 == 0 else (lambda it, timeout=None: [])
        t0 = time.perf_counter(); next(iter(dl)); (watched if i % 2 == 0 else plain).append(time.perf_counter() - t0)
    pm.stuck_workers = real
    med = statistics.median
    return dict(reps=reps, watched_ms=round(1e3*med(watched), 2), plain_ms=round(1e3*med(plain), 2),
                cost_ms=round(1e3*(med(watched) - med(plain)), 2))

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--runs', type=int, default=10); ap.add_argument('--epochs', type=int, default=40)
    ap.add_argument('--busy', type=int, default=2); ap.add_argument('--stall', type=float, default=60.)
    ap.add_argument('--start-cost-only', action='store_true')
    a = ap.parse_args()
    res_file = HERE/'results'/'hangs.json'
    res = json.loads(res_file.read_text()) if res_file.exists() and a.start_cost_only else {}
    res.update(start_cost=start_cost(), python=platform.python_version(), date=datetime.date.today().isoformat())
    if not a.start_cost_only:
        busy = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(a.busy)]
        runs = []
        try:
            for i in range(a.runs):
                for mode in (('stock', 'ddpsafe') if i % 2 == 0 else ('ddpsafe', 'stock')):
                    with tempfile.TemporaryDirectory(prefix='ddpsafe-hang-bench-') as d:
                        runs.append(r := one_fit(mode, a.epochs, a.stall, Path(d))); print(r, flush=True)
        finally:
            for b in busy: b.kill()
        res.update(runs=runs, epochs=a.epochs, busy=a.busy, stall=a.stall,
                   summary={m: dict(runs=sum(r['mode'] == m for r in runs), hung=sum(r['hung'] for r in runs if r['mode'] == m),
                                    restarts=sum(r['restarted'] for r in runs if r['mode'] == m),
                                    epoch_s=round(statistics.median(r['seconds']/max(r['epochs'], 1) for r in runs if r['mode'] == m and not r['hung']), 3)
                                    if any(r['mode'] == m and not r['hung'] for r in runs) else None) for m in ('stock', 'ddpsafe')})
        if (e := res['summary']['ddpsafe']['epoch_s']):   # a rank starts its workers twice an epoch: training and validation
            res['start_cost']['of_an_epoch'] = round(2 * res['start_cost']['cost_ms'] / 1e3 / e, 4)
    res_file.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != 'runs'}, indent=1))

if __name__ == '__main__': main()
