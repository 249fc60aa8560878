"""What `CheckpointCallback`'s stop-request agreement costs per training step: one non-blocking gloo all-reduce of
five int32 values started at every step boundary and read one step later (`ddpsafe.preempt.StopRequests.poll`), or
once per `poll_seconds` of steps.

    python bench/preempt_bench.py                   # 2 CPU ranks, two model sizes, 6 repetitions
    python bench/preempt_bench.py --reps 4 --steps 100
    python bench/preempt_bench.py --polls-only      # only the poll() timings again, into the existing results
    python bench/preempt_bench.py --polls-only --poll-seconds 0.1,0.5    # with these poll_seconds (default 0.1,0.25)

Two measurements, on 2 CPU ranks joined by gloo (`ddpsafe.testing.run_ranks`, one torch thread per rank):

1. Training throughput, A/B: the same DDP training (fastai `distrib_ctx`, an MLP on synthetic data) run as
   `plain` (no ddpsafe callback), as `polling` (`CheckpointCallback(every_epoch=None, every_steps=None)`: no periodic
   save, only the per-step stop-request round) and as `bare_poll` (a callback that only calls `StopRequests.poll`, to
   tell the all-reduce from the rest of the callback). All three run in every repetition (order rotated each time);
   steps/s is timed between training steps only (after a few warm-up steps), so the final checkpoint that
   `CheckpointCallback` writes at the end of fit is not counted. Overhead = plain steps/s / polling steps/s - 1, paired
   per repetition, median and a bootstrap 95% interval over repetitions.
2. The call itself: `StopRequests.poll()` timed on its own, with a step's worth of busy work and a small all-reduce
   (standing for the gradients', which keeps DDP ranks in lockstep) between calls as in training (so the all-reduce
   started at one step can finish before the next step reads it), and back to back (each
   call then waits a full all-reduce round trip). Estimated overhead = poll time (median, and mean) / plain step time.
   The same with `StopRequests(poll_seconds=s)` (`CheckpointCallback(poll_seconds=s)`) for each `--poll-seconds` s
   (0.1 and 0.25 by default), where one round spans about s seconds of steps: the mean of its calls is the cost per step.

Results: `bench/results/preempt.json`."""
from __future__ import annotations
import os, sys, json, time, random, argparse, platform, datetime, statistics, tempfile, shutil, warnings
from pathlib import Path
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

MODELS = {   # name: (input features, hidden width, hidden layers, batch size per rank)
    'small':  (256, 512, 2, 64),
    'medium': (512, 1536, 3, 64),
}

def make_learner(model:str, steps:int, path:str):
    "A fastai Learner of an MLP on random data: `steps` training batches per rank and epoch, a tiny validation set"
    from torch import nn
    from torch.utils.data import TensorDataset
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from fastai.callback.progress import ProgressCallback
    n_in, hidden, layers, bs = MODELS[model]
    g = torch.Generator().manual_seed(0)
    n = steps*bs*2                                        # 2 ranks
    x, y = torch.randn(n, n_in, generator=g), torch.randn(n, 1, generator=g)
    dls = DataLoaders.from_dsets(TensorDataset(x, y), TensorDataset(x[:bs*2], y[:bs*2]), bs=bs, device='cpu', path=path, num_workers=0)
    torch.manual_seed(0)
    mods = [nn.Linear(n_in, hidden), nn.ReLU()]
    for _ in range(layers - 1): mods += [nn.Linear(hidden, hidden), nn.ReLU()]
    learn = Learner(dls, nn.Sequential(*mods, nn.Linear(hidden, 1)), loss_func=nn.MSELoss(), path=path)
    learn.remove_cbs([cb for cb in learn.cbs if isinstance(cb, ProgressCallback)])
    learn.logger = lambda *a, **k: None
    return learn

def step_timer(warmup:int):
    "A callback recording the time of every training step boundary (after `CheckpointCallback`'s poll)"
    from fastai.callback.core import Callback
    class StepTimer(Callback):
        order = 70
        def before_fit(self): self.times = []
        def after_batch(self):
            if self.training: self.times.append(time.perf_counter())
        def rate(self):
            t = self.times[warmup:]
            return (len(t) - 1)/(t[-1] - t[0]), statistics.median(b - a for a, b in zip(t, t[1:]))
    return StepTimer()

def bare_poll():
    "A callback that only polls a `StopRequests` at every training step: the agreement without the rest of `CheckpointCallback`"
    from fastai.callback.core import Callback
    from ddpsafe.preempt import StopRequests
    class BarePoll(Callback):
        order = 65
        def before_fit(self): self.stops = StopRequests(folder=self.learn.path).install()
        def after_batch(self):
            if self.training: self.stops.poll()
        def after_fit(self): self.stops.uninstall()
    return BarePoll()

VARIANTS = ['plain', 'polling', 'bare_poll']

def train(model:str, steps:int, variant:str, warmup:int) -> dict:
    "One DDP fit of one epoch; this rank's steps/s and median step time"
    from ddpsafe.checkpoint import CheckpointCallback
    folder = tempfile.mkdtemp(prefix='ddpsafe-preempt-bench-')
    try:
        learn, timer = make_learner(model, steps, folder), step_timer(warmup)
        cbs = [timer]
        if variant == 'polling': cbs.append(CheckpointCallback(every_epoch=None, every_steps=None, resume=False, exit_code=None))
        if variant == 'bare_poll': cbs.append(bare_poll())
        with learn.distrib_ctx(): learn.fit(1, 1e-3, cbs=cbs)
        rate, step = timer.rate()
        return dict(steps_per_s=rate, median_step_s=step, steps=len(timer.times))
    finally: shutil.rmtree(folder, ignore_errors=True)

def poll_cost(n:int, gap_s:float, poll_seconds:float=0.) -> dict:
    "`StopRequests.poll()` timed `n` times with `gap_s` seconds of busy work between calls, and `n` times back to back"
    import torch.distributed as dist
    from ddpsafe.preempt import StopRequests
    folder = tempfile.mkdtemp(prefix='ddpsafe-poll-bench-')
    stops = StopRequests(folder=folder, poll_seconds=poll_seconds).install()
    try:
        def busy(s):
            t = time.perf_counter() + s
            while time.perf_counter() < t: pass
        spaced, b2b, grads = [], [], torch.zeros(256)
        for _ in range(20): stops.poll()                 # warm up the side group
        dist.barrier()
        for _ in range(n):
            busy(gap_s)
            dist.all_reduce(grads)                       # stands for the step's gradient all-reduce: the ranks in lockstep, as in DDP
            t0 = time.perf_counter(); stops.poll(); spaced.append(time.perf_counter() - t0)
        dist.barrier()
        for _ in range(n):
            t0 = time.perf_counter(); stops.poll(); b2b.append(time.perf_counter() - t0)
        return dict(spaced_gap_s=gap_s, spaced_median_us=statistics.median(spaced)*1e6, spaced_mean_us=statistics.mean(spaced)*1e6,
                    back_to_back_median_us=statistics.median(b2b)*1e6, back_to_back_mean_us=statistics.mean(b2b)*1e6, calls=n)
    finally:
        stops.uninstall(); shutil.rmtree(folder, ignore_errors=True)

def poll_worker(polls:int, gap:float, spans:tuple) -> dict:
    "Only the timings of `poll()`, per step and with each `poll_seconds` of `spans`, on one rank"
    return dict(poll=poll_cost(polls, gap), poll_spaced_by={str(s): poll_cost(polls, gap, poll_seconds=s) for s in spans})

def worker(models:list, steps:dict, reps:int, warmup:int, polls:int, spans:tuple) -> dict:
    "The whole benchmark on one rank"
    import torch.distributed as dist
    import fastai.distributed, ddpsafe.all                 # ddpsafe patches fastai's DDP for CPU
    warnings.filterwarnings('ignore')
    out = {}
    for model in models:
        train(model, max(warmup + 5, 20), 'plain', warmup)  # warm-up run, not recorded
        runs = []
        for rep in range(reps):
            order = VARIANTS[rep % 3:] + VARIANTS[:rep % 3]      # rotated each repetition
            res = {}
            for v in order:
                dist.barrier()
                res[v] = train(model, steps[model], v, warmup)
            runs.append(dict(order=order, **res))
        out[model] = dict(runs=runs)
    gap = min(statistics.median(r['plain']['median_step_s'] for r in out[m]['runs']) for m in models)
    out.update(poll_worker(polls, gap, spans))
    return out

def bootstrap(xs:list, n:int=2000, seed:int=0) -> list:
    "A percentile bootstrap 95% interval of the median of `xs`"
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return [meds[int(0.025*n)], meds[int(0.975*n) - 1]]

def summarize(ranks:list, models:list) -> dict:
    "Per model: steps/s per variant (slowest rank: DDP runs at its pace), paired overhead, and the poll-cost estimate"
    out = {}
    poll = ranks[0]['poll']
    for m in models:
        reps = list(zip(*[r[m]['runs'] for r in ranks]))     # per repetition: every rank's record
        rate = {v: [min(r[v]['steps_per_s'] for r in rep) for rep in reps] for v in VARIANTS}
        step = {v: [max(r[v]['median_step_s'] for r in rep) for rep in reps] for v in VARIANTS}
        overhead = [p/q - 1 for p, q in zip(rate['plain'], rate['polling'])]
        bare = [p/q - 1 for p, q in zip(rate['plain'], rate['bare_poll'])]
        plain_step = statistics.median(step['plain'])
        out[m] = dict(model=dict(zip(('n_in', 'hidden', 'layers', 'bs_per_rank'), MODELS[m])),
                      steps_per_s=rate, median_step_s=step,
                      median_steps_per_s={v: statistics.median(x) for v, x in rate.items()},
                      plain_median_step_ms=plain_step*1e3,
                      overhead_pct_median_paired=statistics.median(overhead)*100,
                      overhead_pct_ci95=[o*100 for o in bootstrap(overhead)],
                      overhead_pct_per_rep=[o*100 for o in overhead],
                      bare_poll_overhead_pct_median_paired=statistics.median(bare)*100,
                      bare_poll_overhead_pct_ci95=[o*100 for o in bootstrap(bare)],
                      overhead_pct_of_medians=(statistics.median(rate['plain'])/statistics.median(rate['polling']) - 1)*100,
                      poll_estimate_pct=max(r['poll']['spaced_median_us'] for r in ranks)*1e-6/plain_step*100,
                      poll_estimate_pct_of_mean=max(r['poll']['spaced_mean_us'] for r in ranks)*1e-6/plain_step*100,
                      goal='<= 1%')
        out[m]['met'] = bool(out[m]['overhead_pct_median_paired'] <= 1.0)
        out[m]['poll_estimate_pct_per_rank'] = [r['poll']['spaced_mean_us']*1e-6/plain_step*100 for r in ranks]
        out[m]['poll_estimate_met'] = bool(out[m]['poll_estimate_pct_of_mean'] <= 1.0)
    shortest = min(out, key=lambda m: out[m]['plain_median_step_ms'])   # the polls were timed at this model's step
    o = out[shortest]
    pct = lambda q: q['spaced_mean_us']*1e-6/(o['plain_median_step_ms']*1e-3)*100    # the mean call: the cost per step
    o['poll_spaced_by'] = {k: dict(pct_per_rank=[pct(r['poll_spaced_by'][k]) for r in ranks]) for k in ranks[0]['poll_spaced_by']}
    for v in o['poll_spaced_by'].values(): v['met'] = bool(max(v['pct_per_rank']) <= 1.0)
    return dict(models=out, poll_per_rank=[r['poll'] for r in ranks])

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--models', default='small,medium', help=f'comma separated, from {list(MODELS)}')
    p.add_argument('--steps', type=int, default=None, help='training steps per run (default: 400 small, 150 medium)')
    p.add_argument('--reps', type=int, default=6, help='repetitions; each runs every variant once (default 6)')
    p.add_argument('--warmup', type=int, default=5, help='steps left out at the start of every run')
    p.add_argument('--polls', type=int, default=2000, help='calls of StopRequests.poll timed on their own')
    p.add_argument('--out', default=str(HERE/'results'/'preempt.json'))
    p.add_argument('--resummarize', action='store_true', help='only recompute the summaries of an existing --out from its raw timings')
    p.add_argument('--polls-only', action='store_true', help="only time poll() again, at the step time of --out's shortest model, and resummarize")
    p.add_argument('--poll-seconds', default='0.1,0.25', help="the poll_seconds values to time poll() with as well, comma separated (default 0.1,0.25)")
    a = p.parse_args(argv)
    spans = tuple(float(x) for x in a.poll_seconds.split(','))
    if a.polls_only:
        from ddpsafe.testing import run_ranks
        res = json.loads(Path(a.out).read_text())
        gap = min(v['plain_median_step_ms'] for v in res['models'].values())/1e3
        for raw, polls in zip(res['raw'], run_ranks(poll_worker, n=2, args=(a.polls, gap, spans), timeout=1800)): raw.update(polls)
        res.update(summarize(res['raw'], list(res['steps_per_run'])), polls_date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
                   polls_command=' '.join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]))
        Path(a.out).write_text(json.dumps(res, indent=1))
        for i, q in enumerate(res['poll_per_rank']):
            print(f"rank {i}: poll() between steps mean {q['spaced_mean_us']:.0f} us, at {gap*1e3:.1f} ms steps; with poll_seconds " +
                  ', '.join(f"{k}: mean {v['spaced_mean_us']:.0f} us" for k, v in res['raw'][i]['poll_spaced_by'].items()))
        return res
    if a.resummarize:
        res = json.loads(Path(a.out).read_text())
        res.update(summarize(res['raw'], list(res['steps_per_run'])))
        Path(a.out).write_text(json.dumps(res, indent=1))
        return res
    from ddpsafe.testing import run_ranks
    models = a.models.split(',')
    steps = {m: a.steps or dict(small=400, medium=150).get(m, 200) for m in models}
    t0 = time.time()
    ranks = run_ranks(worker, n=2, args=(models, steps, a.reps, a.warmup, a.polls, spans), timeout=3000)
    res = dict(benchmark='preempt', date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
               machine=dict(cores=os.cpu_count(), platform=platform.platform(), python=platform.python_version(),
                            torch=torch.__version__, load_at_end=os.getloadavg()),
               ranks=2, backend='gloo', torch_threads_per_rank=1, steps_per_run=steps, reps=a.reps, warmup_steps=a.warmup,
               command=' '.join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
               **summarize(ranks, models), raw=ranks, seconds=time.time() - t0)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    for m, r in res['models'].items():
        print(f'{m}: plain {r["median_steps_per_s"]["plain"]:.1f} steps/s ({r["plain_median_step_ms"]:.1f} ms/step), '
              f'polling {r["median_steps_per_s"]["polling"]:.1f} steps/s: overhead {r["overhead_pct_median_paired"]:+.2f}% '
              f'(95% CI {r["overhead_pct_ci95"][0]:+.2f}..{r["overhead_pct_ci95"][1]:+.2f}); bare poll {r["bare_poll_overhead_pct_median_paired"]:+.2f}%; poll-cost estimate {r["poll_estimate_pct"]:.3f}%')
    pr = res['poll_per_rank']
    print('poll(): ' + '; '.join(f'rank {i} {q["spaced_median_us"]:.0f} us between steps, {q["back_to_back_median_us"]:.0f} us back to back' for i, q in enumerate(pr)))
    print(f'wrote {a.out} in {res["seconds"]:.0f}s')
    return res

if __name__ == '__main__': main()
