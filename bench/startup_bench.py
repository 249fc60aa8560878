"""ddpsafe's share of a launch beside stock fastai (issue 51, item 5; goal: at most 0.5 s more on 2 ranks): `torchrun` of
`startup_train.py --variant stock|ddpsafe`, alternately, `--warmup` launches first; each rank stamps `POINTS`, a point
counts when the last rank reaches it, and `phases` cut launch -> exit; differences ddpsafe - stock per repetition, then
median, range, mean; `own_share` sums the phases where ddpsafe's code runs (`OWN`), `pieces` times ddpsafe's start-up
functions. Method and phases: the benchmarks page, "Start-up beside stock fastai".

    python bench/startup_bench.py --reps 5 --nproc 2          # -> results/startup.json
    python bench/startup_bench.py --cpu-smoke --out X.json    # one launch of each variant: the code and the JSON, not speed"""
from __future__ import annotations
import os, sys, json, time, shutil, argparse, platform, subprocess, tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, spread as mr, write_json, now
ROOT = HERE.parent
TRAIN = HERE/'startup_train.py'
VARIANTS = ('stock', 'ddpsafe')
POINTS = ('start', 'fastai_imported', 'imported', 'ctx', 'fit_start', 'ddp_wrapped', 'fit_ready', 'first_step', 'fit_end', 'end', 'exit_hooks_done')
PHASES = ('launch', 'imports', 'imports_fastai', 'imports_ddpsafe', 'init', 'fit_to_first_step', 'fit_setup', 'ddp_wrap',
          'before_fit_rest', 'first_batch', 'first_step_to_end', 'teardown', 'exit_hooks', 'exit_rest', 'to_first_step', 'total')
GOAL_S, GOAL_PHASE = 0.5, 'to_first_step'
# The phases before the first step in which ddpsafe's code runs; the others (launch, imports_fastai, ddp_wrap) run the
# same code in both variants, so their differences are the machine's noise (ddp_wrap: accelerate's `prepare`, inside
# ddpsafe's copy of fastai's `DistributedTrainer.before_fit`, which adds two attribute checks)
OWN = ('imports_ddpsafe', 'init', 'fit_setup', 'before_fit_rest', 'first_batch')

def launcher(nproc: int) -> list:
    t = Path(sys.executable).parent/'torchrun'
    head = [str(t)] if t.exists() else [sys.executable, '-m', 'torch.distributed.run']
    return head + ['--nproc_per_node', str(nproc), '--standalone']

def phases(t_launch: float, t_exit: float, s: dict) -> dict:
    "The phases of one launch, from the launch's times and the latest stamp of each point over the ranks"
    d = lambda a, b: s[b] - s[a]
    return dict(launch=s['start'] - t_launch, imports=d('start', 'imported'), imports_fastai=d('start', 'fastai_imported'),
                imports_ddpsafe=d('fastai_imported', 'imported'), init=d('imported', 'ctx'), fit_to_first_step=d('ctx', 'first_step'),
                fit_setup=d('ctx', 'fit_start'), ddp_wrap=d('fit_start', 'ddp_wrapped'), before_fit_rest=d('ddp_wrapped', 'fit_ready'),
                first_batch=d('fit_ready', 'first_step'), first_step_to_end=d('first_step', 'end'), teardown=t_exit - s['end'],
                exit_hooks=d('end', 'exit_hooks_done'), exit_rest=t_exit - s['exit_hooks_done'],
                to_first_step=s['first_step'] - t_launch, total=t_exit - t_launch)

def one_launch(variant: str, a, rep: int) -> dict:
    "Launch the script once under torchrun; its stamps, phases and ddpsafe's pieces"
    work = Path(tempfile.mkdtemp(prefix=f'startup-{variant}-', dir=a.dir))
    try:
        cmd = launcher(a.nproc) + [str(TRAIN), '--variant', variant, '--path', str(work/'learn'), '--out', str(work/'out')]
        if a.no_attribute: cmd.append('--no-attribute')
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')])))
        load = os.getloadavg()[0]
        t_launch = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env, cwd=str(work))
        t_exit = time.time()
        if p.returncode != 0: raise RuntimeError(f'{variant} launch failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}')
        ranks = [json.loads((work/'out'/f'rank{r}.json').read_text()) for r in range(a.nproc)]
        latest = {k: max(r['stamps'][k] for r in ranks) for k in POINTS if k in ranks[0]['stamps']}
        pieces = {}
        for r in ranks:
            for k, v in r['pieces'].items():
                q = pieces.setdefault(k, dict(seconds=0., calls=0))
                q['seconds'], q['calls'] = max(q['seconds'], v['seconds']), max(q['calls'], v['calls'])
        return dict(variant=variant, rep=rep, load=load, t_launch=t_launch, t_exit=t_exit, phases=phases(t_launch, t_exit, latest),
                    stamps={r['rank']: {k: v - t_launch for k, v in r['stamps'].items()} for r in ranks}, pieces=pieces,
                    saved=ranks[0]['ckpts'])
    finally: shutil.rmtree(work, ignore_errors=True)

def summary(launches: list) -> dict:
    "Per variant, each phase's median and range; per repetition, ddpsafe minus stock, summarised; ddpsafe's pieces"
    by = {v: [l for l in launches if l['variant'] == v] for v in VARIANTS}
    out = {v: {k: mr([l['phases'][k] for l in by[v]]) for k in PHASES} for v in VARIANTS}
    reps = sorted({l['rep'] for l in launches})
    pair = lambda r, v: next((l for l in by[v] if l['rep'] == r), None)
    diffs = [(pair(r, 'ddpsafe'), pair(r, 'stock')) for r in reps]
    out['diff'] = {k: mr([d['phases'][k] - s['phases'][k] for d, s in diffs if d and s]) for k in PHASES}
    names = sorted({k for l in by['ddpsafe'] for k in l['pieces']})
    out['pieces'] = {k: mr([l['pieces'][k]['seconds'] for l in by['ddpsafe'] if k in l['pieces']]) for k in names}
    out['own_share'] = mr([sum(d['phases'][k] - s['phases'][k] for k in OWN) for d, s in diffs if d and s])
    out['same_code_diff'] = {k: mr([abs(d['phases'][k] - s['phases'][k]) for d, s in diffs if d and s]) for k in ('launch', 'imports_fastai', 'ddp_wrap')}
    d, o = out['diff'][GOAL_PHASE], out['own_share']
    out['goal'] = dict(phase=GOAL_PHASE, limit_s=GOAL_S, diff_median_s=d and d['median'], met=bool(d and d['median'] <= GOAL_S),
                       own_phases=list(OWN), own_share_median_s=o and o['median'], own_met=bool(o and o['median'] <= GOAL_S))
    return out

def table(s: dict) -> str:
    f = lambda m: f'{m["median"]:6.2f} ({m["min"]:.2f} .. {m["max"]:.2f})' if m else '-'
    rows = [f'{"phase":18} {"stock":>22} {"ddpsafe":>22} {"ddpsafe - stock":>24} {"mean":>6}']
    rows += [f'{k:18} {f(s["stock"][k]):>22} {f(s["ddpsafe"][k]):>22} {f(s["diff"][k]):>24} {s["diff"][k]["mean"]:6.2f}' for k in PHASES]
    g3 = lambda m: f'{m["median"]:.3f} ({m["min"]:.3f} .. {m["max"]:.3f})'
    rows += ['ddpsafe pieces (s, largest over ranks; nested; process_group holds the wait for the last rank):'] + [f'  {k:20} {g3(m)}' for k, m in s['pieces'].items()]
    rows += [f'same code in both, |ddpsafe - stock| (noise): ' + ', '.join(f'{k} {f(m).strip()}' for k, m in s['same_code_diff'].items())]
    rows += [f'own_share (ddpsafe - stock over {"+".join(OWN)}): {f(s["own_share"]).strip()}']
    g = s['goal']
    rows.append(f'goal: {g["phase"]} at most {g["limit_s"]} s more than stock: median difference {g["diff_median_s"]:.2f} s -> {"met" if g["met"] else "NOT met"}; '
                f'in the phases where ddpsafe runs ({"+".join(OWN)}): {g["own_share_median_s"]:.2f} s -> {"met" if g["own_met"] else "NOT met"}')
    return '\n'.join(rows)

def versions() -> dict:
    from importlib.metadata import version
    out = {}
    for n in ('torch', 'fastai', 'accelerate'):
        try: out[n] = version(n)
        except Exception: out[n] = None
    sys.path.insert(0, str(ROOT))
    try: import ddpsafe; out['ddpsafe'] = getattr(ddpsafe, '__version__', None)   # this checkout's (its __init__ imports nothing)
    except Exception: out['ddpsafe'] = None
    finally: sys.path.remove(str(ROOT))
    return out

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--cpu-smoke', action='store_true', help='one repetition, no warm-up: checks the code paths and the JSON, not speed')
    p.add_argument('--reps', type=int, default=None, help='repetitions of each variant (default 5; 1 with --cpu-smoke)')
    p.add_argument('--warmup', type=int, default=None, help='unrecorded launches of each variant first (default 1; 0 with --cpu-smoke)')
    p.add_argument('--nproc', type=int, default=2, help='ranks (torchrun --nproc_per_node)')
    p.add_argument('--timeout', type=float, default=300., help='seconds a launch may take')
    p.add_argument('--no-attribute', action='store_true', help="do not time ddpsafe's start-up functions inside the ddpsafe variant")
    p.add_argument('--dir', default=None, help='where the launches write (default: a temporary folder)')
    p.add_argument('--out', default=None, help='the JSON file (default bench/results/startup.json)')
    a = p.parse_args(argv)
    a.reps = a.reps if a.reps is not None else 1 if a.cpu_smoke else 5
    a.warmup = a.warmup if a.warmup is not None else 0 if a.cpu_smoke else 1
    out = Path(a.out or HERE/'results'/'startup.json')
    res = dict(date=now(),
               command=' '.join(['bench/startup_bench.py'] + [x for x in (argv or sys.argv[1:])]), cpu_smoke=a.cpu_smoke,
               machine=dict(name=platform.processor() or platform.machine(), cpus=os.cpu_count()), versions=versions(),
               nproc=a.nproc, reps=a.reps, warmup=a.warmup, launcher=' '.join([Path(launcher(a.nproc)[0]).name] + launcher(a.nproc)[1:]),
               phases=list(PHASES), goal=dict(phase=GOAL_PHASE, limit_s=GOAL_S), orders=[], launches=[])
    for w in range(a.warmup):
        for v in VARIANTS: one_launch(v, a, -1 - w)
    for r in range(a.reps):
        order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))     # alternating
        res['orders'].append(order)
        for v in order:
            l = one_launch(v, a, r); res['launches'].append(l)
            print(f'rep {r} {v:8} to_first_step {l["phases"]["to_first_step"]:.2f}s total {l["phases"]["total"]:.2f}s (load {l["load"]:.1f})', flush=True)
        res['summary'] = summary(res['launches'])
        write_json(out, res)
    print(table(res['summary']))
    return 0

if __name__ == '__main__': sys.exit(main())
