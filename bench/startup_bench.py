"""ddpsafe's share of a launch beside stock fastai (goal: at most 0.5 s more on 2 ranks): `torchrun` of `torchrun_fit.py`
for one epoch of 8 batches, `--variant stock` and `--variant ddpsafe` (`CheckpointCallback(every_epoch=1)`), alternately,
`--warmup` launches first; a point of `POINTS` counts when the last rank logs it, and `phases` cut launch -> exit;
differences ddpsafe - stock per repetition, then median, range, mean; `own_share` sums the phases where ddpsafe's code
runs (`OWN`). Method and phases: the benchmarks page, "Start-up beside stock fastai".

    python bench/startup_bench.py --reps 5 --nproc 2          # -> results/startup.json
    python bench/startup_bench.py --cpu-smoke --out X.json    # one launch of each variant: the code and the JSON, not speed"""
from __future__ import annotations
import os, sys, json, time, shutil, argparse, subprocess, tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, spread as mr, write_json, now, command, machine
FIT = HERE/'torchrun_fit.py'
VARIANTS = ('stock', 'ddpsafe')
POINTS = ('py_start', 'import_fastai', 'import_ddpsafe', 'ctx', 'before_fit', 'ddp_wrapped', 'fit_ready', 'first_step', 'fit_end', 'exit')
PHASES = ('launch', 'imports', 'imports_fastai', 'imports_ddpsafe', 'init', 'fit_to_first_step', 'fit_setup', 'ddp_wrap',
          'before_fit_rest', 'first_batch', 'first_step_to_end', 'teardown', 'exit_hooks', 'exit_rest', 'to_first_step', 'total')
GOAL_S, GOAL_PHASE = 0.5, 'to_first_step'
# The phases before the first step in which ddpsafe's code runs; the others (launch, imports_fastai, ddp_wrap) run the
# same code in both variants, so their differences are the machine's noise (ddp_wrap: accelerate's `prepare`, inside
# ddpsafe's copy of fastai's `DistributedTrainer.before_fit`, which adds two attribute checks)
OWN = ('imports_ddpsafe', 'init', 'fit_setup', 'before_fit_rest', 'first_batch')

def phases(t_launch: float, t_exit: float, s: dict) -> dict:
    "The phases of one launch, from the launch's times and the latest time of each point over the ranks"
    d = lambda a, b: s[b] - s[a]
    return dict(launch=s['py_start'] - t_launch, imports=d('py_start', 'import_ddpsafe'), imports_fastai=d('py_start', 'import_fastai'),
                imports_ddpsafe=d('import_fastai', 'import_ddpsafe'), init=d('import_ddpsafe', 'ctx'), fit_to_first_step=d('ctx', 'first_step'),
                fit_setup=d('ctx', 'before_fit'), ddp_wrap=d('before_fit', 'ddp_wrapped'), before_fit_rest=d('ddp_wrapped', 'fit_ready'),
                first_batch=d('fit_ready', 'first_step'), first_step_to_end=d('first_step', 'fit_end'), teardown=t_exit - s['fit_end'],
                exit_hooks=d('fit_end', 'exit'), exit_rest=t_exit - s['exit'], to_first_step=s['first_step'] - t_launch, total=t_exit - t_launch)

def one_launch(variant: str, a, rep: int) -> dict:
    "Launch the fit once under torchrun; its points per rank, its phases, the checkpoints it saved"
    work = Path(tempfile.mkdtemp(prefix=f'startup-{variant}-', dir=a.dir))
    try:
        (work/'log').mkdir()
        cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', str(a.nproc), '--standalone', str(FIT), str(work/'learn'),
               '--variant', variant, '--epochs', '1', '--batches', '8', '--hidden', '64', '--every-epoch', '1', '--every-seconds', 'none']
        env = dict(os.environ, BENCH_LOG=str(work/'log'), OMP_NUM_THREADS='1',
                   PYTHONPATH=os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get('PYTHONPATH')])))
        load, t_launch = os.getloadavg()[0], time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env, cwd=str(work))
        t_exit = time.time()
        if p.returncode != 0: raise RuntimeError(f'{variant} launch failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}')
        ranks = [{e['ev']: e['t'] for e in map(json.loads, (work/'log'/f'launch0.rank{r}.jsonl').read_text().splitlines())} for r in range(a.nproc)]
        latest = {k: max(r[k] for r in ranks) for k in POINTS}
        return dict(variant=variant, rep=rep, load=load, t_launch=t_launch, t_exit=t_exit, phases=phases(t_launch, t_exit, latest),
                    stamps={str(i): {k: r[k] - t_launch for k in POINTS} for i, r in enumerate(ranks)},
                    saved=sorted(q.name for q in (work/'learn'/'checkpoints').glob('step-*')) if variant == 'ddpsafe' else None)
    finally: shutil.rmtree(work, ignore_errors=True)

def summary(launches: list) -> dict:
    "Per variant, each phase's median and range; per repetition, ddpsafe minus stock, summarised"
    by = {v: [l for l in launches if l['variant'] == v] for v in VARIANTS}
    out = {v: {k: mr([l['phases'][k] for l in by[v]]) for k in PHASES} for v in VARIANTS}
    pair = lambda r, v: next((l for l in by[v] if l['rep'] == r), None)
    diffs = [(d, s) for r in sorted({l['rep'] for l in launches}) if (d := pair(r, 'ddpsafe')) and (s := pair(r, 'stock'))]
    out['diff'] = {k: mr([d['phases'][k] - s['phases'][k] for d, s in diffs]) for k in PHASES}
    out['own_share'] = mr([sum(d['phases'][k] - s['phases'][k] for k in OWN) for d, s in diffs])
    out['same_code_diff'] = {k: mr([abs(d['phases'][k] - s['phases'][k]) for d, s in diffs]) for k in ('launch', 'imports_fastai', 'ddp_wrap')}
    d, o = out['diff'][GOAL_PHASE], out['own_share']
    out['goal'] = dict(phase=GOAL_PHASE, limit_s=GOAL_S, diff_median_s=d and d['median'], met=bool(d and d['median'] <= GOAL_S),
                       own_phases=list(OWN), own_share_median_s=o and o['median'], own_met=bool(o and o['median'] <= GOAL_S))
    return out

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--cpu-smoke', action='store_true', help='one repetition, no warm-up: checks the code paths and the JSON, not speed')
    p.add_argument('--reps', type=int, default=None, help='repetitions of each variant (default 5; 1 with --cpu-smoke)')
    p.add_argument('--warmup', type=int, default=None, help='unrecorded launches of each variant first (default 1; 0 with --cpu-smoke)')
    p.add_argument('--nproc', type=int, default=2, help='ranks (torchrun --nproc_per_node)')
    p.add_argument('--timeout', type=float, default=300., help='seconds a launch may take')
    p.add_argument('--dir', default=None, help='where the launches write (default: a temporary folder)')
    p.add_argument('--out', default=str(HERE/'results'/'startup.json'), help='the JSON file')
    a = p.parse_args(argv)
    a.reps = a.reps if a.reps is not None else 1 if a.cpu_smoke else 5
    a.warmup = a.warmup if a.warmup is not None else 0 if a.cpu_smoke else 1
    res = dict(date=now(), command=command('startup_bench.py', argv), cpu_smoke=a.cpu_smoke, machine=machine(), nproc=a.nproc,
               reps=a.reps, warmup=a.warmup, phases=list(PHASES), goal=dict(phase=GOAL_PHASE, limit_s=GOAL_S), orders=[], launches=[])
    for w in range(a.warmup):
        for v in VARIANTS: one_launch(v, a, -1 - w)
    for r in range(a.reps):
        res['orders'].append(order := list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS)))     # alternating
        for v in order:
            res['launches'].append(l := one_launch(v, a, r))
            print(f'rep {r} {v:8} to_first_step {l["phases"]["to_first_step"]:.2f}s total {l["phases"]["total"]:.2f}s (load {l["load"]:.1f})', flush=True)
        res['summary'] = summary(res['launches'])
        write_json(a.out, res)
    s = res['summary']
    print('\n'.join(f"{k:18} stock {s['stock'][k]['median']:6.2f}  ddpsafe {s['ddpsafe'][k]['median']:6.2f}  diff {s['diff'][k]['median']:+.2f}" for k in PHASES))
    print(f"ddpsafe's own phases ({'+'.join(OWN)}): {s['own_share']['median']:+.2f} s (goal <= {GOAL_S} s: {'met' if s['goal']['own_met'] else 'NOT met'})")

if __name__ == '__main__': main()
