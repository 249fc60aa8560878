"""DataLoader workers forked beside gloo's threads: how many 40-epoch `torchrun` fits of `torchrun_fit.py` on 2 ranks,
with 2 DataLoader workers each, hang (no new epoch for `--stall` s), stock fastai against ddpsafe, alternately, beside
`--busy` spinning processes; and what ddpsafe's watch over a worker start costs (200 starts with and without it, over
the fit's epoch time). Goal: 0 hangs, <= 1%. Method: the benchmarks page, "DataLoader workers forked beside gloo: hangs".

    python bench/hang_bench.py --runs 8 --epochs 40       # -> results/hangs.json
    python bench/hang_bench.py --start-cost-only          # only the watch's cost, into the same file"""
from __future__ import annotations
import os, sys, json, time, signal, argparse, platform, datetime, statistics, subprocess, tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, command
FIT = HERE/'torchrun_fit.py'

def one_fit(mode:str, n_epoch:int, stall:float, tmp:Path) -> dict:
    "One torchrun of the fit: hung or not, seconds, epochs seen"
    (log := tmp/'log').mkdir()
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', 'BENCH_LOG': str(log),
           'PYTHONPATH': os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get('PYTHONPATH')]))}
    epochs_seen = lambda: sum(f.read_text().count('"ev": "epoch"') for f in log.glob('*.jsonl')) // 2
    t0, last, epochs, hung = time.monotonic(), time.monotonic(), 0, False
    out = open(tmp/f'{mode}.out', 'w+')
    p = subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', str(FIT), str(tmp/'learn'), '--variant', mode,
                          '--epochs', str(n_epoch), '--batches', '6', '--hidden', '8', '--workers', '2', '--every-epoch', '1', '--every-seconds', 'none'],
                         stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=tmp)
    while p.poll() is None:
        time.sleep(0.5)
        if (n := epochs_seen()) != epochs: epochs, last = n, time.monotonic()
        if time.monotonic() - last > stall:
            hung = True
            for sig in (signal.SIGTERM, signal.SIGKILL):
                subprocess.run(['pkill', f'-{int(sig)}', '-f', str(tmp/'learn')]); time.sleep(1)
            os.killpg(p.pid, signal.SIGKILL); p.wait(); break
    return dict(mode=mode, hung=hung, code=p.returncode, seconds=round(time.monotonic() - t0, 1), epochs=epochs_seen(),
                done=int(p.returncode == 0), restarted='did not reach' in (said := (tmp/f'{mode}.out').read_text()), retries=said.count('did not reach'))

def start_cost(reps:int=200) -> dict:
    "Seconds from `iter()` to the first batch of a 2-worker torch DataLoader, watched by ddpsafe or not"
    import torch, ddpsafe.callback.preempt as pm
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
    ap.add_argument('--runs', type=int, default=8); ap.add_argument('--epochs', type=int, default=40)
    ap.add_argument('--busy', type=int, default=2); ap.add_argument('--stall', type=float, default=60.)
    ap.add_argument('--start-cost-only', action='store_true'); ap.add_argument('--out', default=str(HERE/'results'/'hangs.json'))
    a = ap.parse_args()
    res_file = Path(a.out)
    res = json.loads(res_file.read_text()) if res_file.exists() and a.start_cost_only else {}
    res.update(start_cost=start_cost(), python=platform.python_version(), date=datetime.date.today().isoformat(), command=command('hang_bench.py'))
    if not a.start_cost_only:
        busy = [subprocess.Popen([sys.executable, '-c', f'import os\nwhile os.getppid() == {os.getpid()}: pass']) for _ in range(a.busy)]   # they end with this process
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
