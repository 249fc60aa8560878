"""Goodput at realistic failure rates: a first-order model of the share of a fit's wall time lost to saves, to steps
done again after a failure, and to restarts, fed with the costs `bench/goodput_bench.py` measured, and the
`memory_every_steps` that the memory tier should use.

    python bench/goodput_model.py                          # the table, from bench/results/goodput.json
    python bench/goodput_model.py --json out.json          # the same, as JSON
    python bench/goodput_model.py --survives 0.5           # half the failures are ones the memory tier survives

Runs nothing: arithmetic over a result file. The model (Young's, as `ddpsafe.callback.interval.waste`, with a second tier), its
inputs (each from the run's `memory` scenario) and what it leaves out: the benchmarks page, "Goodput at realistic failure
rates". Failures every `M` s, a share `f` of them survived by the memory tier; the disk every `tau_d` s at `c_d` a save,
the tier every `tau_m` s at `c_m`; each failure costs a restart `R` and the work since the newest usable checkpoint:

    saves    c_d/tau_d + c_m/tau_m
    redo     (f*min(tau_m, tau_d)/2 + (1-f)*tau_d/2) / M
    restart  R / M"""
from __future__ import annotations
import sys, json, math, argparse
from pathlib import Path

try: from ddpsafe.callback.interval import save_interval, MAX_SHARE
except ImportError:                                          # run from a checkout without ddpsafe installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1])); from ddpsafe.callback.interval import save_interval, MAX_SHARE

RESULTS = Path(__file__).resolve().parent/'results'
RATES = {'one an hour': 3600., 'one every 10 min': 600.}   # realistic; the run's own stress rate is added
STARTUP = ('start-up: launcher', 'start-up: interpreter', 'start-up: imports', 'start-up: init', 'resume')
AFTER_FAILURE = ('stop and exit', 'launcher shut-down', 'requeue')

def relaunch_seconds(s:dict # One scenario of a goodput run, with failures
                    ) -> float:
    "Seconds per failure from the end of the killed launch to training again: every launch's start-up and resume but the first one's, the stop, the launcher's shut-down, the requeue"
    sh, launches = s['shares_s'], s['launches']
    return (sum(sh[k] for k in STARTUP)*(launches - 1)/launches + sum(sh[k] for k in AFTER_FAILURE))/s['signals']

def measured(gp:dict,                # A result of bench/goodput_bench.py
             scenario:str='memory'   # The scenario with both tiers and SIGKILLs
            ) -> dict:
    "The model's inputs from one goodput run: `step`, `c_m`, `c_d`, `tau_d`, `R`, the stress rate `M_stress`, and what they came from"
    s = gp['scenarios'][scenario]
    sh, fails = s['shares_s'], s['signals']
    step, c_m, c_d = s['median_step_ms']/1e3, sh['saves: memory']/s['memory_saves'], sh['saves']/s['saves']
    every = gp['memory_every_steps']
    tau_m = every*step + c_m                                                 # a memory save's interval, the save included
    noticing = max(0., sh['steps done twice']/fails - tau_m/2)               # the redo the model does not account for
    R = relaunch_seconds(s) + noticing
    return dict(step=step, c_m=c_m, c_d=c_d, tau_d=gp['save_every_seconds'], R=R, noticing=noticing, M_stress=gp['kill_every'],
                memory_every_steps=every, cores=gp['machine']['cores'], date=gp['date'], scenario=scenario, failures=fails)

def lost(M:float,                # Mean seconds between failures
         R:float,                # Seconds a restart takes
         tau_d:float, c_d:float, # The disk's interval and the seconds one of its saves blocks
         tau_m:float|None=None,  # The memory tier's interval, seconds; `None`: no tier
         c_m:float=0.,           # Seconds one memory save blocks
         f:float=1.              # The share of failures the memory tier survives
        ) -> dict:
    "The shares of the wall time lost: `saves`, `redo`, `restart` and their `total`"
    if tau_m is None: saves, redo = c_d/tau_d, tau_d/2/M
    else: saves, redo = c_d/tau_d + c_m/tau_m, (f*min(tau_m, tau_d)/2 + (1 - f)*tau_d/2)/M
    return dict(saves=saves, redo=redo, restart=R/M, total=saves + redo + R/M)

def best_memory_interval(c_m:float, M:float, R:float=0., f:float=1., w:float=0.) -> float:
    "Seconds between memory saves: Young/Daly's for the failures the tier survives, at least `c_m/MAX_SHARE` and its write `w`"
    return save_interval(c_m, M/f, R, w)

def pays_off(c_m:float, M:float, tau_d:float, f:float=1.) -> bool:
    "Does the memory tier at its best interval (its floors aside) lose less than it saves, beside the disk every `tau_d` s?"
    return tau_d > 2*math.sqrt(2*c_m*M/f)

def table(inp:dict, f:float=1., memory_steps=(100, 1000), rates:dict|None=None) -> list:
    "One row per failure rate and configuration: the shares lost, in % of the wall time"
    step, c_m, c_d, tau_d, R = (inp[k] for k in ('step', 'c_m', 'c_d', 'tau_d', 'R'))
    rates = {**(rates or RATES), f"stress: one every {inp['M_stress']:.0f} s": inp['M_stress']}
    rows = []
    for rate, M in rates.items():
        tau_auto = save_interval(c_d, M, R)
        tau_best = best_memory_interval(c_m, M, R, f)
        configs = [(f'disk every {tau_d:.0f} s, no memory tier', tau_d, None),
                   (f"disk every {tau_auto:.1f} s ('auto'), no memory tier", tau_auto, None)]
        configs += [(f'disk every {tau_d:.0f} s + memory_every_steps={n} ({n*step:.1f} s)', tau_d, n) for n in memory_steps]
        n_best = max(1, round(tau_best/step))
        configs.append((f'disk every {tau_d:.0f} s + memory_every_steps={n_best} ({tau_best:.1f} s, best)', tau_d, n_best))
        for name, td, n in configs:
            l = lost(M, R, td, c_d, None if n is None else n*step + c_m, c_m, f)
            rows.append(dict(rate=rate, M=M, config=name, tau_d=td, memory_every_steps=n,
                             **{f'{k}_pct': round(100*v, 2) for k, v in l.items()}, goodput=round(1 - l['total'], 4)))
    return rows

def recommend(inp:dict, f:float=1.) -> dict:
    "Per rate: the memory tier's best interval, in seconds and steps, whether it pays off beside the disk's interval, the 1% floor"
    out = dict(floor_s=inp['c_m']/MAX_SHARE, floor_steps=math.ceil(inp['c_m']/MAX_SHARE/inp['step']))
    for rate, M in {**RATES, 'stress': inp['M_stress']}.items():
        t = best_memory_interval(inp['c_m'], M, inp['R'], f)
        out[rate] = dict(seconds=round(t, 2), steps=round(t/inp['step']), pays_off=pays_off(inp['c_m'], M, inp['tau_d'], f),
                         breakeven_disk_s=round(2*math.sqrt(2*inp['c_m']*M/f), 1),
                         memory_cost_pct=round(100*inp['c_m']/t, 2))
    return out

def with_disk_at_best(c_m:float, c_d:float, R:float, w_d:float=0., f:float=1., rates:dict|None=None) -> list:
    "Per rate: the disk at its own best interval (`every_seconds='auto'`, at least its write `w_d`), without and with the memory tier at its best"
    rows = []
    for rate, M in (rates or RATES).items():
        td, tm = save_interval(c_d, M, R, w_d), best_memory_interval(c_m, M, R, f)
        no, yes = lost(M, R, td, c_d), lost(M, R, td, c_d, tm, c_m, f)
        rows.append(dict(rate=rate, disk_s=round(td, 1), memory_s=round(tm, 1), lost_without_pct=round(100*no['total'], 2),
                         lost_with_pct=round(100*yes['total'], 2), memory_saves_pct=round(100*c_m/tm, 2), pays_off=yes['total'] < no['total']))
    return rows

def render(inp:dict, rows:list, f:float=1.) -> str:
    "The inputs and the table, as markdown"
    lines = [f"Inputs ({inp['date']}, {inp['cores']} cores, scenario `{inp['scenario']}`): step {1e3*inp['step']:.2f} ms; "
             f"a memory save blocks {1e3*inp['c_m']:.1f} ms, a disk save {1e3*inp['c_d']:.1f} ms; disk every {inp['tau_d']:.0f} s; "
             f"a restart {inp['R']:.1f} s (of which {inp['noticing']:.1f} s the survivors noticing); "
             f"{100*f:.0f}% of failures survived by the memory tier.", '',
             '| failures | configuration | saves, % | redo, % | restarts, % | lost, % | goodput |', '|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append(f"| {r['rate']} | {r['config']} | {r['saves_pct']:.2f} | {r['redo_pct']:.2f} | {r['restart_pct']:.2f} | "
                     f"{r['total_pct']:.2f} | {r['goodput']:.3f} |")
    return '\n'.join(lines)

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--results', default=str(RESULTS/'goodput.json'), help="bench/goodput_bench.py's result with a `memory` scenario")
    p.add_argument('--survives', type=float, default=1., help='the share of failures the memory tier survives (same node): 0 to 1')
    p.add_argument('--c-memory', type=float, help="seconds one memory save blocks training (default: the run's)")
    p.add_argument('--c-disk', type=float, help="seconds one disk save blocks training (default: the run's)")
    p.add_argument('--step', type=float, help="seconds a step takes (default: the run's)")
    p.add_argument('--restart', type=float, help="seconds a restart takes (default: the run's)")
    p.add_argument('--json', help='also write the inputs, table and recommendation here')
    a = p.parse_args(argv)
    inp = measured(json.loads(Path(a.results).read_text()))
    for k, v in dict(c_m=a.c_memory, c_d=a.c_disk, step=a.step, R=a.restart).items():
        if v is not None: inp[k] = v
    rows, rec = table(inp, a.survives), recommend(inp, a.survives)
    print(render(inp, rows, a.survives)); print(); print(json.dumps(rec, indent=1))
    if a.json: Path(a.json).write_text(json.dumps(dict(inputs=inp, survives=a.survives, rows=rows, recommend=rec), indent=1) + '\n')

if __name__ == '__main__': main()
