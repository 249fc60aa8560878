"""What `CheckpointCallback`'s stop-request agreement (`StopRequests.poll`) costs a training step, on 2 CPU ranks: the
same DDP fit `plain`, `polling` and `bare_poll`, rotated; `poll()` timed alone; `--at-default`: the callback at its
defaults against none at padded step lengths, and the delay from a SIGTERM to its checkpoint. Method: the benchmarks
page, "Preemption: the per-step stop-request agreement".

    python bench/preempt_bench.py --reps 6                     # -> results/preempt.json
    python bench/preempt_bench.py --polls-only --poll-seconds 0.1,0.25    # only the poll() timings, into the same file
    python bench/preempt_bench.py --at-default --reps 11       # -> results/preempt_default.json"""
from __future__ import annotations
import os, sys, json, time, random, argparse, platform, statistics, tempfile, shutil, warnings
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, write_json, now

MODELS = {   # name: (input features, hidden width, hidden layers, batch size per rank)
    'small':  (256, 512, 2, 64),
    'medium': (512, 1536, 3, 64),
    'tiny':   (32, 64, 1, 16),          # `--at-default`: its steps are padded with busy work to the lengths measured
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
        order, on_warm = 70, None      # `on_warm`: called once the warm-up steps are done
        def before_fit(self): self.times = []
        def after_batch(self):
            if not self.training: return
            self.times.append(time.perf_counter())
            if len(self.times) == warmup and self.on_warm: self.on_warm()
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

# ---------------------------------------------------------------------------------------------------------------
# At the default settings: step time with / without the callback at 4, 10 and 50 ms steps, and the delay of a SIGTERM

STEP_MS = (4, 10, 50)

def paced_learner(steps:int, path:str, pad_s:float, warmup:int):
    "A tiny DDP-able MLP whose steps are padded with `pad_s` seconds of busy work (standing for compute) after the forward pass"
    from fastai.callback.core import Callback
    learn = make_learner('tiny', steps, path)
    class Pad(Callback):
        order = -5
        def after_pred(self):
            if not self.training: return
            t = time.perf_counter() + pad_s
            while time.perf_counter() < t: pass
    learn.add_cb(Pad())
    return learn

def default_callback(**kwargs):
    "`CheckpointCallback` at its defaults, saving nothing during training (its one save at the end of fit is not timed)"
    from ddpsafe.checkpoint import CheckpointCallback
    return CheckpointCallback(every_epoch=None, every_steps=None, resume=False, exit_code=None, **kwargs)

def paced_run(steps:int, pad_s:float, variant:str, warmup:int, signal_after:float|None=None) -> dict:
    """One DDP fit of `steps` padded steps: 'plain' or 'callback'; with `signal_after` seconds, rank 1 sends itself SIGTERM that long
    after the warm-up and the run records when, and when and at which step each rank began the signal's checkpoint"""
    import signal, threading, torch.distributed as dist
    folder = tempfile.mkdtemp(prefix='ddpsafe-preempt-bench-')
    try:
        learn, timer = paced_learner(steps, folder, pad_s, warmup), step_timer(warmup)
        cbs, seen = [timer], {}
        if variant == 'callback':
            cb = default_callback()
            stock_save = type(cb).save
            def save(reason='request', **kw):
                if reason == 'signal': seen.update(saved_at=time.monotonic(), step=cb.position()['global_step'])
                return stock_save(cb, reason, **kw)
            cb.save = save
            stock_after_batch, inside = cb.after_batch, []
            def after_batch():                                            # the callback's own time at each step boundary
                t = time.perf_counter()
                try: return stock_after_batch()
                finally: inside.append(time.perf_counter() - t)
            cb.after_batch = after_batch
            cbs.append(cb)
        from ddpsafe.preempt import StopRequests
        stock_poll, in_poll = StopRequests.poll, []
        def poll(self, *args, **kw):                                      # of which the agreement itself
            t = time.perf_counter()
            try: return stock_poll(self, *args, **kw)
            finally: in_poll.append(time.perf_counter() - t)
        if signal_after is not None and dist.get_rank() == 1:
            def send(): seen['sent_at'] = time.monotonic(); os.kill(os.getpid(), signal.SIGTERM)
            timer.on_warm = lambda: threading.Timer(signal_after, send).start()
        StopRequests.poll = poll
        try:
            with learn.distrib_ctx(): learn.fit(1, 1e-3, cbs=cbs)
        finally: StopRequests.poll = stock_poll
        out = dict(steps=len(timer.times), **seen)
        if signal_after is None: out.update(zip(('steps_per_s', 'median_step_s'), timer.rate()))
        if signal_after is None and variant == 'callback':
            t = inside[warmup:]
            p = in_poll[warmup:len(inside)]
            out.update(callback_mean_s=statistics.mean(t), callback_share_of_step=statistics.mean(t)*out['steps_per_s'],
                       poll_mean_s=statistics.mean(p), poll_share_of_step=statistics.mean(p)*out['steps_per_s'])
        return out
    finally: shutil.rmtree(folder, ignore_errors=True)

def paced_worker(step_ms:tuple, reps:int, warmup:int, run_s:float, seed:int) -> dict:
    "On one rank: calibrate the padding of each step length, then per repetition and step length the pair (order alternated) and a signal run"
    import torch.distributed as dist
    import fastai.distributed, ddpsafe.all
    warnings.filterwarnings('ignore')
    base = min(paced_run(40, 0., 'plain', warmup)['median_step_s'] for _ in range(3))   # the tiny model's own step, unpadded; a load spike is not it
    t = torch.tensor([base]); dist.all_reduce(t, op=dist.ReduceOp.MAX); base = float(t)
    pads = {ms: max(0., ms/1e3 - base) for ms in step_ms}
    rng = random.Random(seed)                                              # the same draws on both ranks
    out = dict(base_step_s=base, pads=pads, runs={ms: [] for ms in step_ms}, signals={ms: [] for ms in step_ms})
    for rep in range(reps):
        for ms in step_ms:
            step = max(ms/1e3, base)                                      # a loaded machine may not reach the shortest
            steps = warmup + max(60, int(run_s/step))
            order = ['plain', 'callback'] if rep % 2 == 0 else ['callback', 'plain']
            res = {}
            for v in order:
                dist.barrier(); res[v] = paced_run(steps, pads[ms], v, warmup)
            out['runs'][ms].append(dict(order=order, **res))
            after = rng.uniform(0.2, 0.2 + 0.6)                           # seconds after the warm-up
            dist.barrier()
            out['signals'][ms].append(dict(signal_after=after, **paced_run(warmup + int(3/(ms/1e3)) + 50, pads[ms], 'callback', warmup, after)))
    return out

def summarize_paced(ranks:list, step_ms:tuple, poll_seconds:float) -> dict:
    "Per step length: the step-time ratio callback / plain per repetition (slowest rank each), and the SIGTERM delays"
    out = {}
    for ms in step_ms:
        reps = list(zip(*[r['runs'][ms] for r in ranks]))
        plain = [max(x['plain']['median_step_s'] for x in rep) for rep in reps]
        ratio = [min(x['plain']['steps_per_s'] for x in rep) / min(x['callback']['steps_per_s'] for x in rep) for rep in reps]
        sig = list(zip(*[r['signals'][ms] for r in ranks]))
        delays = [max(x['saved_at'] for x in rep) - rep[1]['sent_at'] for rep in sig if all('saved_at' in x for x in rep)]
        same = [len({x.get('step') for x in rep}) == 1 and all('saved_at' in x for x in rep) for rep in sig]
        step = statistics.median(plain)
        bound = max(poll_seconds, step) + step
        share = [max(x['callback']['callback_share_of_step'] for x in rep) for rep in reps]    # the rank that spends most in it
        polls = [max(x['callback']['poll_share_of_step'] for x in rep) for rep in reps]
        out[str(ms)] = dict(target_step_ms=ms, plain_median_step_ms=step*1e3, reps=len(ratio),
                            ratio_per_rep=ratio, ratio_median=statistics.median(ratio), ratio_min=min(ratio), ratio_max=max(ratio),
                            ratio_ci95=bootstrap(ratio), overhead_pct_median=(statistics.median(ratio) - 1)*100, goal='ratio <= 1.01',
                            met=bool(statistics.median(ratio) <= 1.01),
                            in_callback_pct_per_rep=[x*100 for x in share], in_callback_pct_median=statistics.median(share)*100,
                            in_callback_pct_min=min(share)*100, in_callback_pct_max=max(share)*100,
                            in_poll_pct_per_rep=[x*100 for x in polls], in_poll_pct_median=statistics.median(polls)*100,
                            in_poll_pct_min=min(polls)*100, in_poll_pct_max=max(polls)*100,
                            signal_runs=len(sig), signal_saved_on_every_rank_at_one_step=sum(same),
                            delay_s_per_run=delays, delay_s_median=statistics.median(delays) if delays else None,
                            delay_s_max=max(delays) if delays else None, delay_bound_s=bound,
                            delays_within_bound=sum(d <= bound for d in delays))
    return out

def run_paced(a) -> dict:
    "`--at-default`: the whole measurement on 2 ranks, written to `--out`"
    import inspect, subprocess
    from ddpsafe.testing import run_ranks
    from ddpsafe.checkpoint import CheckpointCallback
    from ddpsafe.preempt import POLL_SECONDS
    poll = inspect.signature(CheckpointCallback).parameters['poll_seconds'].default
    if poll != POLL_SECONDS: print(f'note: CheckpointCallback\'s default poll_seconds is {poll}, StopRequests\' is {POLL_SECONDS}: measuring the callback\'s')
    step_ms = tuple(int(x) for x in a.step_ms.split(','))
    uptime = lambda: subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()
    load_before, t0 = uptime(), time.time()
    ranks = run_ranks(paced_worker, n=2, args=(step_ms, a.reps, a.warmup, a.run_seconds, a.seed), timeout=3000)
    res = dict(benchmark='preempt at default settings', date=now(utc=True),
               machine=dict(cores=os.cpu_count(), platform=platform.platform(), python=platform.python_version(), torch=torch.__version__,
                            uptime_before=load_before, uptime_after=uptime()),
               ranks=2, backend='gloo', torch_threads_per_rank=1, poll_seconds=poll, POLL_SECONDS=POLL_SECONDS, reps=a.reps,
               warmup_steps=a.warmup, run_seconds=a.run_seconds,
               command=' '.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
               step_lengths=summarize_paced(ranks, step_ms, poll), raw=ranks, seconds=time.time() - t0)
    write_json(a.out, res)
    print(f"load before: {res['machine']['uptime_before']}\nload after:  {res['machine']['uptime_after']}")
    for ms, r in res['step_lengths'].items():
        print(f"{ms} ms target ({r['plain_median_step_ms']:.1f} ms measured): step time with / without the callback, median {r['ratio_median']:.4f} "
              f"(min {r['ratio_min']:.4f}, max {r['ratio_max']:.4f}, {r['reps']} reps); time in the callback {r['in_callback_pct_median']:.2f}% of the step "
              f"(min {r['in_callback_pct_min']:.2f}, max {r['in_callback_pct_max']:.2f}), in its poll() {r['in_poll_pct_median']:.2f}%; SIGTERM to the saved step: median "
              f"{r['delay_s_median']:.3f} s, max {r['delay_s_max']:.3f} s (bound {r['delay_bound_s']:.3f} s, {r['delays_within_bound']}/{len(r['delay_s_per_run'])} within); "
              f"{r['signal_saved_on_every_rank_at_one_step']}/{r['signal_runs']} saved on both ranks at one step")
    print(f"wrote {a.out} in {res['seconds']:.0f}s")
    return res

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--models', default='small,medium', help=f'comma separated, from {list(MODELS)}')
    p.add_argument('--steps', type=int, default=None, help='training steps per run (default: 400 small, 150 medium)')
    p.add_argument('--reps', type=int, default=None, help='repetitions; each runs every variant once (default 6; 7 with --at-default)')
    p.add_argument('--warmup', type=int, default=5, help='steps left out at the start of every run')
    p.add_argument('--polls', type=int, default=2000, help='calls of StopRequests.poll timed on their own')
    p.add_argument('--out', default=None, help='default: bench/results/preempt.json (preempt_default.json with --at-default)')
    p.add_argument('--at-default', action='store_true', help='CheckpointCallback at its default settings against no callback at --step-ms, and the SIGTERM delay')
    p.add_argument('--step-ms', default=','.join(map(str, STEP_MS)), help='with --at-default: the step lengths, ms, comma separated')
    p.add_argument('--run-seconds', type=float, default=2.5, help='with --at-default: seconds of timed steps per run (at least 60 steps)')
    p.add_argument('--seed', type=int, default=0, help='with --at-default: the seed of the signal times')
    p.add_argument('--polls-only', action='store_true', help="only time poll() again, at the step time of --out's shortest model, and resummarize")
    p.add_argument('--poll-seconds', default='0.1,0.25', help="the poll_seconds values to time poll() with as well, comma separated (default 0.1,0.25)")
    a = p.parse_args(argv)
    a.out = a.out or str(HERE/'results'/('preempt_default.json' if a.at_default else 'preempt.json'))
    a.reps = a.reps or (7 if a.at_default else 6)
    if a.at_default: return run_paced(a)
    spans = tuple(float(x) for x in a.poll_seconds.split(','))
    if a.polls_only:
        from ddpsafe.testing import run_ranks
        res = json.loads(Path(a.out).read_text())
        gap = min(v['plain_median_step_ms'] for v in res['models'].values())/1e3
        for raw, polls in zip(res['raw'], run_ranks(poll_worker, n=2, args=(a.polls, gap, spans), timeout=1800)): raw.update(polls)
        res.update(summarize(res['raw'], list(res['steps_per_run'])), polls_date=now(utc=True),
                   polls_command=' '.join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]))
        write_json(a.out, res)
        for i, q in enumerate(res['poll_per_rank']):
            print(f"rank {i}: poll() between steps mean {q['spaced_mean_us']:.0f} us, at {gap*1e3:.1f} ms steps; with poll_seconds " +
                  ', '.join(f"{k}: mean {v['spaced_mean_us']:.0f} us" for k, v in res['raw'][i]['poll_spaced_by'].items()))
        return res
    from ddpsafe.testing import run_ranks
    models = a.models.split(',')
    steps = {m: a.steps or dict(small=400, medium=150).get(m, 200) for m in models}
    t0 = time.time()
    ranks = run_ranks(worker, n=2, args=(models, steps, a.reps, a.warmup, a.polls, spans), timeout=3000)
    res = dict(benchmark='preempt', date=now(utc=True),
               machine=dict(cores=os.cpu_count(), platform=platform.platform(), python=platform.python_version(),
                            torch=torch.__version__, load_at_end=os.getloadavg()),
               ranks=2, backend='gloo', torch_threads_per_rank=1, steps_per_run=steps, reps=a.reps, warmup_steps=a.warmup,
               command=' '.join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
               **summarize(ranks, models), raw=ranks, seconds=time.time() - t0)
    write_json(a.out, res)
    for m, r in res['models'].items():
        print(f'{m}: plain {r["median_steps_per_s"]["plain"]:.1f} steps/s ({r["plain_median_step_ms"]:.1f} ms/step), '
              f'polling {r["median_steps_per_s"]["polling"]:.1f} steps/s: overhead {r["overhead_pct_median_paired"]:+.2f}% '
              f'(95% CI {r["overhead_pct_ci95"][0]:+.2f}..{r["overhead_pct_ci95"][1]:+.2f}); bare poll {r["bare_poll_overhead_pct_median_paired"]:+.2f}%; poll-cost estimate {r["poll_estimate_pct"]:.3f}%')
    pr = res['poll_per_rank']
    print('poll(): ' + '; '.join(f'rank {i} {q["spaced_median_us"]:.0f} us between steps, {q["back_to_back_median_us"]:.0f} us back to back' for i, q in enumerate(pr)))
    print(f'wrote {a.out} in {res["seconds"]:.0f}s')
    return res

if __name__ == '__main__': main()
