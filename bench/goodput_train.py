"""One rank of the job `goodput_bench.py` preempts: an MLP on random data, `fit` in `learn.distrib_ctx()` (gloo, CPU) with
`CheckpointCallback(every_epoch=None, every_seconds=S|auto)` and optionally the memory tier.

    GOODPUT_LOG=DIR GOODPUT_LAUNCH=N torchrun --nproc_per_node 2 bench/goodput_train.py PATH [--every-seconds 30|auto]
        [--memory-every-steps N [--memory-path DIR]] [--hidden 512]

Each rank appends a JSON line per event (`ev`, `t` = `time.time()`) to `DIR/launch{N}.rank{r}.jsonl`: `proc`, `py_start`,
`import_torch`, `import_fastai`, `import_ddpsafe`, `learner`, `fit_start`, `resume_start`, `resume_end` (`step`),
`fit_ready`, `save_start`/`save_end` (`step`, `reason`, `saved`), `interval` (rank 0, `auto`), `step` (`g`), `fit_end`, `exit`."""
import time; T_PY = time.time()                       # noqa: E702  the first thing this process does
import os, sys, json, atexit, argparse

RANK, LAUNCH, LOG = int(os.environ.get('RANK', '0')), os.environ.get('GOODPUT_LAUNCH', '0'), os.environ.get('GOODPUT_LOG')
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
atexit.register(lambda: ev('exit'))

def seconds_or_auto(s:str): return s if s == 'auto' else float(s)

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('path')
    p.add_argument('--every-seconds', '--save-every-seconds', dest='every_seconds', type=seconds_or_auto, default=30.,
                   help="CheckpointCallback's every_seconds: seconds, or 'auto'")
    p.add_argument('--memory-every-steps', type=int, default=None, help="CheckpointCallback's memory_every_steps (default: no memory tier)")
    p.add_argument('--memory-path', default=None, help="CheckpointCallback's memory_path (default: one of the run's own in /dev/shm)")
    p.add_argument('--hidden', type=int, default=512, help='width of the two hidden layers')
    p.add_argument('--batches', type=int, default=400, help='training batches per rank and epoch')
    p.add_argument('--epochs', type=int, default=10000)
    return p.parse_args(argv)

def main(argv=None):
    a = parse_args(argv)
    import torch
    ev('import_torch')
    from torch import nn
    from torch.utils.data import TensorDataset
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from fastai.callback.progress import ProgressCallback
    import fastai.distributed
    ev('import_fastai')
    import ddpsafe.all                                    # the fastai patches (DDP on CPU included)
    from ddpsafe.checkpoint import CheckpointCallback
    ev('import_ddpsafe')

    from ddpsafe.interval import SaveTimer, interval_note
    choose = SaveTimer._choose
    def logged_choose(timer):
        "Each interval `every_seconds='auto'` chooses, as an event"
        choose(timer)
        w = timer.why
        ev('interval', seconds=timer.interval, rule=w['rule'], c=w['c'], m=w['m'], r=w['r'], failures=w['failures'],
           launches=w['launches'], note=interval_note(w))
    SaveTimer._choose = logged_choose

    class TimedCheckpoint(CheckpointCallback):
        "`CheckpointCallback`, with events around its set-up, resume and saves and after each optimizer step"
        def before_fit(self):
            ev('fit_start')
            super().before_fit()
            ev('fit_ready')
        def _resume(self):
            ev('resume_start')
            try: super()._resume()
            finally: ev('resume_end', step=self.progress.global_step)
        def save(self, reason='request', stop=False, finished=False, to=None):
            g = self.progress.global_step
            ev('save_start', step=g, reason=reason)
            saved = super().save(reason, stop=stop, finished=finished, to=to)
            ev('save_end', step=g, reason=reason, saved=saved)
            return saved
        def after_batch(self):
            before = self.progress.fit_steps
            try: super().after_batch()
            finally:
                if self.progress.fit_steps != before: ev('step', g=self.progress.global_step)

    n_in, bs = 256, 64
    g = torch.Generator().manual_seed(0)
    n = a.batches*bs*2                                    # 2 ranks
    x, y = torch.randn(n, n_in, generator=g), torch.randn(n, 1, generator=g)
    dls = DataLoaders.from_dsets(TensorDataset(x, y), TensorDataset(x[:bs*2], y[:bs*2]), bs=bs, device='cpu', path=a.path, num_workers=0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(n_in, a.hidden), nn.ReLU(), nn.Linear(a.hidden, a.hidden), nn.ReLU(), nn.Linear(a.hidden, 1))
    learn = Learner(dls, model, loss_func=nn.MSELoss(), path=a.path)
    learn.remove_cbs([cb for cb in learn.cbs if isinstance(cb, ProgressCallback)])
    learn.logger = lambda *a, **k: None
    ev('learner')
    try:
        with learn.distrib_ctx():
            learn.fit(a.epochs, 1e-4, cbs=TimedCheckpoint(every_epoch=None, every_seconds=a.every_seconds,
                                                          memory_every_steps=a.memory_every_steps, memory_path=a.memory_path))
    finally: ev('fit_end')

if __name__ == '__main__': main()
