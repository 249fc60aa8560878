"""One rank of the fastai job that `goodput_bench.py`, `startup_bench.py` and `hang_bench.py` launch under `torchrun`: an
MLP on random data, `fit` in `learn.distrib_ctx(cpu=True)` (gloo), with ddpsafe's `CheckpointCallback` (`--variant
ddpsafe`) or as stock fastai runs it on a CPU (`--variant stock`: only `DistributedDL._broadcast` without its `.cuda()`).

    BENCH_LOG=DIR BENCH_LAUNCH=N torchrun --nproc_per_node 2 bench/torchrun_fit.py PATH [--every-seconds 30|auto|none]
        [--every-epoch N] [--memory-every-steps N [--memory-path DIR]] [--variant stock] [--epochs N] [--batches N] [--hidden N] [--workers N]

Each rank appends a JSON line per event (`ev`, `t` = `time.time()`) to `DIR/launch{N}.rank{r}.jsonl`: `proc`, `py_start`,
`import_torch`, `import_fastai`, `import_ddpsafe` (stock: after its patch), `learner`, `ctx` (the process group up),
`before_fit` (the first callback's), `ddp_wrapped`, `fit_start`, `resume_start`, `resume_end` (`step`), `fit_ready` (the
last callback's `before_fit`), `first_step`, `epoch` (`n`), `save_start`/`save_end` (`step`, `reason`, `saved`), `interval`
(rank 0, `auto`) and `step` (`g`) from the callback, `fit_end`, and `exit`, the last of the process's exit handlers."""
import time; T_PY = time.time()                       # noqa: E702  the first thing this process does
import os, json, atexit, argparse

RANK, LAUNCH, LOG = int(os.environ.get('RANK', '0')), os.environ.get('BENCH_LAUNCH', '0'), os.environ.get('BENCH_LOG')
_out = open(os.path.join(LOG, f'launch{LAUNCH}.rank{RANK}.jsonl'), 'a', buffering=1) if LOG else None

def ev(name:str, t:float|None=None, **kw):
    "Append one event line"
    if _out is None: return
    _out.write(json.dumps(dict(ev=name, t=time.time() if t is None else t, **kw)) + '\n')

def proc_start() -> float:
    "This process's start time (epoch seconds), from /proc/self/stat's start time in clock ticks since boot"
    try:
        ticks = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks/os.sysconf('SC_CLK_TCK'))
    except (OSError, ValueError, IndexError): return T_PY

ev('proc', proc_start(), pid=os.getpid())
ev('py_start', T_PY)
atexit.register(lambda: ev('exit'))                  # registered first, so run last: after ddpsafe's own handlers

def seconds(s:str): return None if s == 'none' else s if s == 'auto' else float(s)

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('path')
    p.add_argument('--variant', choices=['ddpsafe', 'stock'], default='ddpsafe')
    p.add_argument('--every-seconds', type=seconds, default=30., help="CheckpointCallback's every_seconds: seconds, 'auto' or 'none'")
    p.add_argument('--every-epoch', type=int, default=None, help="CheckpointCallback's every_epoch (default: none)")
    p.add_argument('--memory-every-steps', type=int, default=None, help="CheckpointCallback's memory_every_steps (default: no memory tier)")
    p.add_argument('--memory-path', default=None, help="CheckpointCallback's memory_path (default: one of the run's own in /dev/shm)")
    p.add_argument('--hidden', type=int, default=512, help='width of the two hidden layers')
    p.add_argument('--batches', type=int, default=400, help='training batches per rank and epoch')
    p.add_argument('--epochs', type=int, default=10000)
    p.add_argument('--workers', type=int, default=0, help="DataLoader workers per rank (fastai's num_workers)")
    return p.parse_args(argv)

def checkpoint_callback(a):
    "`CheckpointCallback`, with events around its set-up, resume and saves and after each optimizer step"
    from ddpsafe.callback.checkpoint import CheckpointCallback
    from ddpsafe.callback.interval import SaveTimer, interval_note
    choose = SaveTimer._choose
    def logged_choose(timer):
        "Each interval `every_seconds='auto'` chooses, as an event"
        choose(timer)
        w = timer.why
        ev('interval', seconds=timer.interval, rule=w['rule'], c=w['c'], m=w['m'], r=w['r'], failures=w['failures'],
           launches=w['launches'], note=interval_note(w))
    SaveTimer._choose = logged_choose
    class TimedCheckpoint(CheckpointCallback):
        def before_fit(self): ev('fit_start'); super().before_fit()
        def _resume(self):
            ev('resume_start')
            try: super()._resume()
            finally: ev('resume_end', step=self.progress.global_step)
        def save(self, reason='request', **kw):
            g = self.progress.global_step
            ev('save_start', step=g, reason=reason)
            saved = super().save(reason, **kw)
            ev('save_end', step=g, reason=reason, saved=saved)
            return saved
        def after_batch(self):
            before = self.progress.fit_steps
            try: super().after_batch()
            finally:
                if self.progress.fit_steps != before: ev('step', g=self.progress.global_step)
    return TimedCheckpoint(every_epoch=a.every_epoch, every_seconds=a.every_seconds, memory_every_steps=a.memory_every_steps, memory_path=a.memory_path)

def main(argv=None):
    a = parse_args(argv)
    import torch
    ev('import_torch')
    from torch import nn
    from torch.utils.data import TensorDataset
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from fastai.callback.core import Callback
    from fastai.callback.progress import ProgressCallback
    import fastai.distributed as fd
    ev('import_fastai')
    if a.variant == 'ddpsafe':
        import ddpsafe.all                                # noqa: F401  the fastai patches (DDP on CPU included)
        cbs = [checkpoint_callback(a)]
    else:
        def _broadcast(self, t, rank):                    # fastai's, without `.cuda()`: gloo on a CPU
            t = torch.LongTensor(t); torch.distributed.broadcast(t, rank); return t.cpu().tolist()
        fd.DistributedDL._broadcast, cbs = _broadcast, []
    ev('import_ddpsafe')

    class At(Callback):
        "An event at `before_fit`, at this `order` among the callbacks; `last`: also at the first training step's end and after each epoch"
        def __init__(self, order, at_fit, last=False): self.order, self.at_fit, self.last, self.stepped = order, at_fit, last, False
        def before_fit(self): ev(self.at_fit)
        def after_batch(self):
            if self.last and self.training and not self.stepped: ev('first_step'); self.stepped = True
        def after_epoch(self):
            if self.last: ev('epoch', n=self.epoch)
    cbs += [At(-1000, 'before_fit'), At(12, 'ddp_wrapped'), At(1000, 'fit_ready', last=True)]   # DistributedTrainer: order 11

    n_in, bs = 256, 64
    g = torch.Generator().manual_seed(0)
    n = a.batches*bs*int(os.environ.get('WORLD_SIZE', 1))
    x, y = torch.randn(n, n_in, generator=g), torch.randn(n, 1, generator=g)
    dls = DataLoaders.from_dsets(TensorDataset(x, y), TensorDataset(x[:bs*2], y[:bs*2]), bs=bs, device='cpu', path=a.path, num_workers=a.workers)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(n_in, a.hidden), nn.ReLU(), nn.Linear(a.hidden, a.hidden), nn.ReLU(), nn.Linear(a.hidden, 1))
    learn = Learner(dls, model, loss_func=nn.MSELoss(), path=a.path)
    learn.remove_cbs([cb for cb in learn.cbs if isinstance(cb, ProgressCallback)])
    learn.logger = lambda *a, **k: None
    ev('learner')
    try:
        with learn.distrib_ctx(cpu=True):
            ev('ctx')
            learn.fit(a.epochs, 1e-4, cbs=cbs)
        if a.variant == 'stock': torch.distributed.destroy_process_group()   # fastai leaves accelerate's group, and gloo may abort at exit
    finally: ev('fit_end')

if __name__ == '__main__': main()
