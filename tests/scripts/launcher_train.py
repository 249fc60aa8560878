"""A small fastai training script as a user writes it, for the launcher tests (`tests/test_launchers.py`) and the recipes in `examples/`.

    torchrun --nproc_per_node 2 launcher_train.py PATH N_EPOCH [--every-steps N] [--workers N] [--slow SECS]
                                                  [--loader fastai|torch|stateful|batches] [--dropout P] [--persistent-workers]
                                                  [--out FILE] [--marks DIR] [--hang-first-fork RANK]
                                                  [--memory-every-steps N] [--memory-path DIR]

The data is `y = x @ [1,2,3,4] + 0.5` plus noise (like `ddpsafe.testing.synth_dls`) through fastai `DataLoaders` with
`--workers` DataLoader worker processes (2 by default, as fastai's default gives on a 2-core machine), or through the
loaders a PyTorch user hands to `DataLoaders(train, valid)` (`--loader`, for `tests/test_own_loaders.py`): torch's
`DataLoader(shuffle=True)`, torchdata's `StatefulDataLoader(shuffle=True)`, or `TensorBatches`, an iterable of batches
that ddpsafe knows nothing about; the model is a `Linear(4,1)` (after a `Dropout(P)` with `--dropout P`); the run is `fit_one_cycle` inside `learn.distrib_ctx()` with `CheckpointCallback(every_steps=...)` saving
to `PATH/checkpoints`. It sleeps `--slow` seconds after every optimizer step so that a signal lands mid-run.

Launcher-agnostic: it reads the rank from the environment that `torchrun` or `accelerate launch` sets. With `--marks DIR`
every rank appends marker lines, flushed at once, to `DIR/rank{r}.log` (`PID p`, `STEP g`, `SAVE g reason`, `RESULT
{json}`). `--out FILE` writes the final weights of a finished run to `FILE.rank{r}`. The exit code is the
callback's: 75 after a preemption signal, 0 at the end. `--hang-first-fork R` makes the first DataLoader worker that rank R
forks stop before it runs anything (a fork handler that never returns), as a worker deadlocked after fork does
(CPython gh-112275); `--worker-start-seconds` sets how long ddpsafe waits for a forked worker to start.
`--memory-every-steps N` adds the memory tier (a checkpoint every N steps in `/dev/shm`, or in `--memory-path`); its
saves are logged `SAVE g memory`."""
from __future__ import annotations
import os, sys, json, time, argparse
from pathlib import Path

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('path'); p.add_argument('n_epoch', type=int)
    p.add_argument('--every-steps', type=int, default=2)
    p.add_argument('--workers', type=int, default=2, help='DataLoader worker processes per rank')
    p.add_argument('--slow', type=float, default=0.05, help='seconds to sleep after every optimizer step')
    p.add_argument('--items', type=int, default=128, help='items in all, a quarter for validation')
    p.add_argument('--loader', default='fastai', choices=['fastai', 'torch', 'stateful', 'batches'], help='what the data comes through')
    p.add_argument('--dropout', type=float, default=0., help='a Dropout of this probability before the Linear layer')
    p.add_argument('--persistent-workers', action='store_true', help="--loader torch or stateful: the loaders' persistent_workers")
    p.add_argument('--out', default=None); p.add_argument('--marks', default=None)
    p.add_argument('--hang-first-fork', type=int, default=None, help='rank whose first forked worker never starts')
    p.add_argument('--worker-start-seconds', type=float, default=None)
    p.add_argument('--memory-every-steps', type=int, default=None, help='also save to the memory tier every N steps')
    p.add_argument('--memory-path', default=None, help="the memory tier's folder; default: one of the run's own in /dev/shm")
    p.add_argument('--async-save', action='store_true', help='async_save=True: saves sealed in slots, written by the writer process')
    return p.parse_args(argv)

class TensorBatches:
    "Batches of a `TensorDataset`, in an order drawn from torch's global generator each epoch: an iterable ddpsafe knows nothing about"
    def __init__(self, ds, bs=8, shuffle=False): (self.x, self.y), self.bs, self.shuffle = ds.tensors, bs, shuffle
    def __len__(self): return -(-len(self.x) // self.bs)
    def __iter__(self):
        import torch
        idx = torch.randperm(len(self.x)) if self.shuffle else torch.arange(len(self.x))
        return ((self.x[i], self.y[i]) for i in idx.split(self.bs))

def own_loaders(kind:str, train, valid, workers:int, persistent:bool=False) -> tuple:
    "A training and a validation loader of `kind` ('torch', 'stateful' or 'batches') over two `TensorDataset`s"
    if kind == 'batches': return TensorBatches(train, shuffle=True), TensorBatches(valid)
    if kind == 'torch': from torch.utils.data import DataLoader
    else: from torchdata.stateful_dataloader import StatefulDataLoader as DataLoader
    kw = dict(batch_size=8, num_workers=workers, persistent_workers=persistent)
    return DataLoader(train, shuffle=True, **kw), DataLoader(valid, **kw)

def main(argv=None) -> int:
    a = parse_args(argv)
    r = int(os.environ.get('RANK', '0'))
    from marks import marker_log   # beside this script
    say = marker_log(a.marks, r)
    say(f'PID {os.getpid()}')
    t0 = time.time()
    import torch
    from fastai.data.core import Datasets
    from fastai.data.transforms import ItemGetter
    from fastai.learner import Learner
    from fastai.losses import MSELossFlat
    from fastai.torch_core import set_seed
    from fastai.callback.progress import ProgressCallback
    import fastai.callback.schedule, fastai.distributed
    from ddpsafe.callback.checkpoint import CheckpointCallback

    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.items, 4, generator=g)
    y = x @ torch.tensor([1.,2.,3.,4.]) + 0.5 + 0.1*torch.randn(a.items, generator=g)
    items, split = [(u, v[None]) for u, v in zip(x, y)], a.items - a.items//4
    dsets = Datasets(items, [[ItemGetter(0)], [ItemGetter(1)]], splits=[list(range(split)), list(range(split, a.items))])
    set_seed(0)
    if a.loader == 'fastai': dls = dsets.dataloaders(bs=8, device='cpu', path=a.path, num_workers=a.workers)
    else:
        from torch.utils.data import TensorDataset
        from fastai.data.core import DataLoaders
        dls = DataLoaders(*own_loaders(a.loader, TensorDataset(x[:split], y[:split, None]), TensorDataset(x[split:], y[split:, None]), a.workers,
                                      a.persistent_workers),
                          path=a.path)
    model = torch.nn.Sequential(torch.nn.Dropout(a.dropout), torch.nn.Linear(4, 1)) if a.dropout else torch.nn.Linear(4, 1)
    learn = Learner(dls, model, loss_func=MSELossFlat(), lr=1e-2, path=a.path)
    learn.remove_cb(ProgressCallback)

    class Markers(CheckpointCallback):
        "`CheckpointCallback` that logs its saves and sleeps after each step"
        def after_batch(self):
            if self.training: say(f'STEP {self.progress.steps_before + self.train_iter}')
            try: super().after_batch()
            finally:
                if self.training and a.slow: time.sleep(a.slow)
        def save(self, *args, **kwargs):
            done = super().save(*args, **kwargs)
            reason = args[0] if args else kwargs.get('reason', '?')
            if done: say(f'SAVE {self.position()["global_step"]} {reason}')
            return done

    if a.worker_start_seconds is not None:
        import ddpsafe.callback.preempt; ddpsafe.callback.preempt.WORKER_START_SECONDS = a.worker_start_seconds
    if a.hang_first_fork == r:
        hung = [False]
        def stuck_child():
            if not hung[0]:
                hung[0] = True; say('HANG in a forked worker'); time.sleep(3600)
        os.register_at_fork(after_in_child=stuck_child)   # every later child inherits hung=[True]: the parent's copy is set in before_fork
        os.register_at_fork(after_in_parent=lambda: hung.__setitem__(0, True))

    cb = Markers(every_steps=a.every_steps, every_epoch=None, keep=3, memory_every_steps=a.memory_every_steps, memory_path=a.memory_path,
                 async_save=a.async_save)
    code = 0
    try:
        with learn.distrib_ctx(): learn.fit_one_cycle(a.n_epoch, 1e-2, cbs=cb)
    except SystemExit as e: code = e.code if isinstance(e.code, int) else 1
    if a.out and code == 0: torch.save({k: v.detach().clone() for k, v in learn.model.state_dict().items()}, f'{a.out}.rank{r}')
    say('RESULT ' + json.dumps(dict(rank=r, code=code, stopped_by=cb.stopped_by, seconds=round(time.time()-t0, 2))))
    return code

if __name__ == '__main__': sys.exit(main())
