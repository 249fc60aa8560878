"""What `CheckpointCallback` at its defaults costs a training step, and how soon a SIGTERM becomes a checkpoint, on 2 CPU
ranks: a tiny DDP MLP whose steps are padded with busy work to `--step-ms`, with the callback and without (order
alternated), a third run per repetition that sends SIGTERM to rank 1 at a random moment, and the goodput records' share
(`LaunchCounters.step`). Method: the benchmarks page, "Preemption: the stop-request agreement at its defaults".

    python bench/preempt_bench.py --reps 11        # -> results/preempt.json"""
from __future__ import annotations
import os, sys, time, random, signal, argparse, statistics, tempfile, shutil, threading, warnings
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, write_json, now, command, machine

def learner(steps:int, path:str, pad_s:float):
    "A fastai Learner of a tiny MLP on random data, `steps` batches per rank, each training step padded with `pad_s` s of busy work after the forward pass"
    from torch import nn
    from torch.utils.data import TensorDataset
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from fastai.callback.core import Callback
    from fastai.callback.progress import ProgressCallback
    class Pad(Callback):
        order = -5
        def after_pred(self):
            t = time.perf_counter() + pad_s
            while self.training and time.perf_counter() < t: pass
    g, bs = torch.Generator().manual_seed(0), 16
    x, y = torch.randn(steps*bs*2, 32, generator=g), torch.randn(steps*bs*2, 1, generator=g)      # 2 ranks
    dls = DataLoaders.from_dsets(TensorDataset(x, y), TensorDataset(x[:bs*2], y[:bs*2]), bs=bs, device='cpu', path=path, num_workers=0)
    torch.manual_seed(0)
    learn = Learner(dls, nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)), loss_func=nn.MSELoss(), path=path, cbs=Pad())
    learn.remove_cbs([cb for cb in learn.cbs if isinstance(cb, ProgressCallback)])
    learn.logger = lambda *a, **k: None
    return learn

def step_timer(warmup:int):
    "A callback stamping every training step's end (after `CheckpointCallback`'s); `on_warm` is called once the warm-up steps are done"
    from fastai.callback.core import Callback
    class StepTimer(Callback):
        order, on_warm = 70, None
        def before_fit(self): self.times = []
        def after_batch(self):
            if not self.training: return
            self.times.append(time.perf_counter())
            if len(self.times) == warmup and self.on_warm: self.on_warm()
        def rate(self):
            t = self.times[warmup:]
            return (len(t) - 1)/(t[-1] - t[0]), statistics.median(b - a for a, b in zip(t, t[1:]))
    return StepTimer()

def timing(f, into:list):
    "`f`, adding the seconds of each call to `into`"
    def timed(*args, **kw):
        t = time.perf_counter()
        try: return f(*args, **kw)
        finally: into.append(time.perf_counter() - t)
    return timed

def one_run(steps:int, pad_s:float, callback:bool, warmup:int, signal_after:float|None=None) -> dict:
    """One DDP fit of `steps` padded steps, with `CheckpointCallback` at its defaults (saving nothing during training) or
    without; with `signal_after`, rank 1 sends itself SIGTERM that long after the warm-up, and the run records when it
    was sent, when each rank began the signal's checkpoint and at which step"""
    import torch.distributed as dist
    from ddpsafe.callback.checkpoint import CheckpointCallback
    from ddpsafe.callback.preempt import StopRequests; from ddpsafe.callback.interval import LaunchCounters
    folder = tempfile.mkdtemp(prefix='ddpsafe-preempt-bench-')
    learn, timer, seen, inside, in_poll, in_rec = learner(steps, folder, pad_s), step_timer(warmup), {}, [], [], []
    cbs = [timer]
    if callback:
        cb = CheckpointCallback(every_epoch=None, every_steps=None, resume=False, exit_code=None)
        def save(reason='request', **kw):
            if reason == 'signal': seen.update(saved_at=time.monotonic(), step=cb.position()['global_step'])
            return CheckpointCallback.save(cb, reason, **kw)
        cb.save, cb.after_batch = save, timing(cb.after_batch, inside)    # the callback's own time at each step's end
        cbs.append(cb)
    if signal_after is not None and dist.get_rank() == 1:
        def send(): seen['sent_at'] = time.monotonic(); os.kill(os.getpid(), signal.SIGTERM)
        timer.on_warm = lambda: threading.Timer(signal_after, send).start()
    (stock_poll, StopRequests.poll), (stock_rec, LaunchCounters.step) = (StopRequests.poll, timing(StopRequests.poll, in_poll)), (LaunchCounters.step, timing(LaunchCounters.step, in_rec))   # of which the agreement, the records
    try:
        with learn.distrib_ctx(): learn.fit(1, 1e-3, cbs=cbs)
    finally: StopRequests.poll, LaunchCounters.step = stock_poll, stock_rec; shutil.rmtree(folder, ignore_errors=True)
    out = dict(steps=len(timer.times), **seen)
    if signal_after is None: out.update(zip(('steps_per_s', 'median_step_s'), timer.rate()))
    if signal_after is None and callback:
        out.update(callback_share_of_step=statistics.mean(inside[warmup:])*out['steps_per_s'],
                   poll_share_of_step=statistics.mean(in_poll[warmup:len(inside)])*out['steps_per_s'], records_share_of_step=statistics.mean(in_rec[warmup:])*out['steps_per_s'], records_median_share_of_step=statistics.median(in_rec[warmup:])*out['steps_per_s'])
    return out

def rank_main(step_ms:tuple, reps:int, warmup:int, run_s:float, seed:int) -> dict:
    "On one rank: the unpadded step measured, then per repetition and step length the pair (order alternated) and a signal run"
    import torch.distributed as dist
    import fastai.distributed, ddpsafe.all
    warnings.filterwarnings('ignore')
    t = torch.tensor([min(one_run(40, 0., False, warmup)['median_step_s'] for _ in range(3))])   # a load spike is not the step
    dist.all_reduce(t, op=dist.ReduceOp.MAX); base = float(t)
    rng = random.Random(seed)                                                      # the same draws on both ranks
    out = dict(base_step_s=base, pads={ms: max(0., ms/1e3 - base) for ms in step_ms}, runs={ms: [] for ms in step_ms}, signals={ms: [] for ms in step_ms})
    for rep in range(reps):
        for ms in step_ms:
            steps, res = warmup + max(60, int(run_s/max(ms/1e3, base))), {}     # a loaded machine may not reach the shortest step
            for v in (['plain', 'callback'] if rep % 2 == 0 else ['callback', 'plain']):
                dist.barrier(); res[v] = one_run(steps, out['pads'][ms], v == 'callback', warmup)
            out['runs'][ms].append(res)
            after = rng.uniform(0.2, 0.8)                                          # seconds after the warm-up
            dist.barrier()
            out['signals'][ms].append(dict(signal_after=after, **one_run(warmup + int(3/(ms/1e3)) + 50, out['pads'][ms], True, warmup, after)))
    return out

def bootstrap(xs:list, n:int=2000, seed:int=0) -> list:
    "A percentile bootstrap 95% interval of the median of `xs`"
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return [meds[int(0.025*n)], meds[int(0.975*n) - 1]]

def summarize(ranks:list, step_ms:tuple, poll_seconds:float) -> dict:
    "Per step length: the step-time ratio with / without the callback per repetition (the slower rank's), its shares of the step, the SIGTERM delays"
    out = {}
    for ms in step_ms:
        reps, sig = list(zip(*[r['runs'][ms] for r in ranks])), list(zip(*[r['signals'][ms] for r in ranks]))
        step = statistics.median(max(x['plain']['median_step_s'] for x in rep) for rep in reps)
        ratio = [min(x['plain']['steps_per_s'] for x in rep) / min(x['callback']['steps_per_s'] for x in rep) for rep in reps]
        share = [100*max(x['callback']['callback_share_of_step'] for x in rep) for rep in reps]   # the rank that spends most in it
        polls, records, typical = ([100*max(x['callback'][k] for x in rep) for rep in reps] for k in ('poll_share_of_step', 'records_share_of_step', 'records_median_share_of_step'))   # the mean counts the GIL hand-offs that land in a call; the median, a call
        delays = [max(x['saved_at'] for x in rep) - rep[1]['sent_at'] for rep in sig if all('saved_at' in x for x in rep)]
        bound = max(poll_seconds, step) + step
        out[str(ms)] = dict(target_step_ms=ms, plain_median_step_ms=step*1e3, reps=len(ratio), goal='ratio <= 1.01',
                            ratio_per_rep=ratio, ratio_median=statistics.median(ratio), ratio_min=min(ratio), ratio_max=max(ratio),
                            ratio_ci95=bootstrap(ratio), met=bool(statistics.median(ratio) <= 1.01),
                            in_callback_pct_per_rep=share, in_callback_pct_median=statistics.median(share),
                            in_poll_pct_per_rep=polls, in_poll_pct_median=statistics.median(polls), in_poll_pct_min=min(polls), in_poll_pct_max=max(polls),
                            records_pct_per_rep=records, records_pct_median=statistics.median(records), records_pct_max=max(records), records_goal='<= 0.1%', records_median_call_pct=statistics.median(typical),
                            signal_runs=len(sig), delay_s_per_run=delays, delay_bound_s=bound, delays_within_bound=sum(d <= bound for d in delays),
                            delay_s_median=statistics.median(delays) if delays else None, delay_s_max=max(delays, default=None),
                            signal_saved_on_every_rank_at_one_step=sum(len({x.get('step') for x in rep}) == 1 and all('saved_at' in x for x in rep) for rep in sig))
    return out

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--reps', type=int, default=11, help='repetitions; each runs every step length with and without the callback, and a signal run')
    p.add_argument('--step-ms', default='4,10,50', help='the step lengths, ms, comma separated')
    p.add_argument('--warmup', type=int, default=5, help='steps left out at the start of every run')
    p.add_argument('--run-seconds', type=float, default=2.5, help='seconds of timed steps per run (at least 60 steps)')
    p.add_argument('--seed', type=int, default=0, help='the seed of the signal times')
    p.add_argument('--out', default=str(HERE/'results'/'preempt.json'))
    a = p.parse_args(argv)
    import inspect
    from ddpsafe.testing import run_ranks
    from ddpsafe.callback.checkpoint import CheckpointCallback
    poll = inspect.signature(CheckpointCallback).parameters['poll_seconds'].default
    step_ms, t0, load_before = tuple(int(x) for x in a.step_ms.split(',')), time.time(), os.getloadavg()
    ranks = run_ranks(rank_main, n=2, args=(step_ms, a.reps, a.warmup, a.run_seconds, a.seed), timeout=3000)
    res = dict(benchmark='preempt', date=now(utc=True), command=command('preempt_bench.py', argv), machine=machine(),
               load_before=load_before, load_after=os.getloadavg(), ranks=2, backend='gloo', poll_seconds=poll, reps=a.reps,
               warmup_steps=a.warmup, run_seconds=a.run_seconds, step_lengths=summarize(ranks, step_ms, poll), raw=ranks, seconds=time.time() - t0)
    write_json(a.out, res)
    for ms, r in res['step_lengths'].items():
        print(f"{ms} ms ({r['plain_median_step_ms']:.1f} measured): with / without the callback {r['ratio_median']:.3f} "
              f"({r['ratio_min']:.2f}-{r['ratio_max']:.2f}); in its after_batch {r['in_callback_pct_median']:.2f}% of a step, in poll() "
              f"{r['in_poll_pct_median']:.2f}%, in the goodput records {r['records_pct_median']:.4f}% (max {r['records_pct_max']:.4f}%; a median call {r['records_median_call_pct']:.4f}%); SIGTERM to the save: median {r['delay_s_median']:.3f} s, max {r['delay_s_max']:.3f} s "
              f"({r['delays_within_bound']}/{len(r['delay_s_per_run'])} within {r['delay_bound_s']:.3f} s)")
    print(f"wrote {a.out} in {res['seconds']:.0f} s")

if __name__ == '__main__': main()
