"""One rank of `startup_bench.py`: `Learner.fit(1)` of a small MLP in `learn.distrib_ctx(cpu=True)`, `stock` (fastai alone,
its `DistributedDL._broadcast` without `.cuda()`) or `ddpsafe` (`import ddpsafe.all`, `CheckpointCallback(every_epoch=1)`).

    torchrun --nproc_per_node 2 --standalone bench/startup_train.py --variant stock|ddpsafe --path DIR --out DIR [--no-attribute]

Each rank writes `OUT/rank{r}.json`: `stamps` (`time.time()` at each of startup_bench's `POINTS`) and, with ddpsafe,
`pieces` (calls, seconds and first call of ddpsafe's start-up functions, timed by wrappers: see `PIECES`)."""
import time
T_START = time.time()            # before any import: the launcher and the interpreter's start end here

import os, sys, json, argparse, functools
from pathlib import Path

STAMPS = {'start': T_START}
def stamp(name: str):
    STAMPS.setdefault(name, time.time())

import atexit
REC = {}
def _write_at_exit():
    "Registered first, so run last of the atexit handlers (ddpsafe's among them): stamp `exit_hooks_done`, write the rank's record"
    if not REC: return
    stamp('exit_hooks_done')
    Path(REC['file']).write_text(json.dumps(dict(REC['rec'], stamps=STAMPS), indent=1))
atexit.register(_write_at_exit)

# ddpsafe's start-up work, timed with wrappers: (module, attribute) -> name. A function is replaced in every ddpsafe
# module that holds it (they `from .core import *`, which holds `ddpsafe.watch`'s too). Nesting: `side_group` starts the heartbeat (`start_heartbeat`) and
# makes a gloo group; `claim_checkpoints` runs `claim_folder` on rank 0 through `on_main`, whose broadcast is the first
# use of the side group when `check_deciding_callbacks` has not made it; `fit_saver` holds the claim; `before_fit` holds
# `fit_saver`, `StopRequests.install` and `_resume` (`resume_checkpoint`: rank 0 lists the folder, `on_main`).
PIECES = [('ddpsafe.learner', 'start_process_group', 'process_group'),        # ddpsafe starts the group, not accelerate
          ('ddpsafe.core', 'bound_process_group', 'bound_process_group'),     # timeout + heartbeat start
          ('ddpsafe.watch', 'start_heartbeat', 'heartbeat'),                   # store clones, the beat thread
          ('ddpsafe.core', 'side_group', 'side_group'),                       # dist.new_group(gloo), first call
          ('ddpsafe.callbacks', 'check_deciding_callbacks', 'check_callbacks'),  # all_ranks of the deciding callbacks' names
          ('ddpsafe.saver', 'fit_saver', 'fit_saver'),                        # storage, folder made, claim, memory tier
          ('ddpsafe.saver', 'claim_checkpoints', 'claim'),                    # on_main(claim_folder)
          ('ddpsafe.owner', 'claim_folder', 'claim_folder'),                  # rank 0: owner record, its heartbeat thread
          ('ddpsafe.checkpoint', 'resume_checkpoint', 'resume_lookup'),       # rank 0 looks for a checkpoint; on_main
          ('ddpsafe.checkpoint', 'setup_signature', 'setup_signature'),       # model/optimizer/fit signature
          ('ddpsafe.checkpoint', 'TrainingState', 'training_state'),          # the registry of parts
          ('ddpsafe.watch', 'release_side_group', 'release_side_group'),      # atexit: the heartbeat stopped, the side groups destroyed
          ('ddpsafe.watch', 'stop_heartbeat', 'stop_heartbeat'),              # the heartbeat thread joined
          ('ddpsafe.watch', '_say_ended', 'say_ended')]                       # atexit: this rank's end written to the store
METHODS = [('ddpsafe.checkpoint', 'CheckpointCallback', 'before_fit', 'before_fit'),
           ('ddpsafe.checkpoint', 'CheckpointCallback', '_resume', 'resume'),
           ('ddpsafe.checkpoint', 'CheckpointCallback', 'after_batch', 'after_batch'),
           ('ddpsafe.checkpoint', 'CheckpointCallback', 'after_fit', 'after_fit'),
           ('ddpsafe.checkpoint', 'CheckpointCallback', 'save', 'save'),
           ('ddpsafe.preempt', 'StopRequests', 'install', 'stop_requests'),
           ('ddpsafe.owner', 'FolderClaim', 'release', 'claim_release')]     # as the fit closes (and atexit): the owner thread joined

def timed(name: str, f, pieces: dict):
    def wrapper(*a, **k):
        rec = pieces.setdefault(name, dict(calls=0, seconds=0., first=None))
        t0 = time.perf_counter()
        if rec['first'] is None: rec['first'] = time.time()
        try: return f(*a, **k)
        finally: rec['calls'] += 1; rec['seconds'] += time.perf_counter() - t0
    return wrapper if isinstance(f, type) else functools.wraps(f)(wrapper)

def attribute(pieces: dict):
    "Wrap ddpsafe's start-up functions with timers, wherever a ddpsafe module holds them"
    import importlib
    for mod, attr, name in PIECES:
        f = getattr(importlib.import_module(mod), attr)
        w = timed(name, f, pieces)
        if isinstance(f, type): setattr(sys.modules[mod], attr, w); continue   # a class: replaced where it is called from only
        for m in [m for n, m in list(sys.modules.items()) if n.split('.')[0] == 'ddpsafe' and m is not None]:
            if getattr(m, attr, None) is f: setattr(m, attr, w)
    for mod, cls, meth, name in METHODS:
        c = getattr(importlib.import_module(mod), cls)
        setattr(c, meth, timed(name, getattr(c, meth), pieces))

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--variant', choices=['stock', 'ddpsafe'], required=True)
    p.add_argument('--path', required=True, help="the learner's path (checkpoints go to PATH/checkpoints); a fresh folder")
    p.add_argument('--out', required=True, help='folder for rank{r}.json')
    p.add_argument('--no-attribute', action='store_true', help='do not wrap ddpsafe functions with timers')
    p.add_argument('--batches', type=int, default=8, help='training batches per rank')
    a = p.parse_args(argv)

    import torch
    from torch import nn
    from torch.utils.data import TensorDataset, DataLoader
    from fastai.learner import Learner
    from fastai.data.core import DataLoaders
    from fastai.callback.core import Callback
    import fastai.distributed as fd     # distrib_ctx
    stamp('fastai_imported')
    pieces, cbs = {}, []
    if a.variant == 'ddpsafe':
        import ddpsafe.all
        from ddpsafe.checkpoint import CheckpointCallback
        stamp('imported')
        if not a.no_attribute: attribute(pieces)
        cbs.append(CheckpointCallback(every_epoch=1))
    else:
        def _broadcast(self, t, rank):      # fastai 2.8.12's, without `.cuda()`: gloo on CPU (the only change to stock fastai)
            t = torch.LongTensor(t)
            torch.distributed.broadcast(t, rank)
            return t.cpu().tolist()
        fd.DistributedDL._broadcast = _broadcast
        stamp('imported')

    class At(Callback):
        "Stamp `name` at `before_fit` (and the first training `after_batch`) with this order"
        def __init__(self, order, fit_name, batch_name=None): self.order, self.fit_name, self.batch_name = order, fit_name, batch_name
        def before_fit(self): stamp(self.fit_name)
        def after_batch(self):
            if self.batch_name and self.training: stamp(self.batch_name)

    torch.manual_seed(0)
    bs, world = 16, int(os.environ.get('WORLD_SIZE', 1))
    n = bs*a.batches*world
    x, y = torch.randn(n, 32), torch.randn(n, 1)
    dls = DataLoaders(DataLoader(TensorDataset(x, y), batch_size=bs, shuffle=True),
                      DataLoader(TensorDataset(x[:4*bs], y[:4*bs]), batch_size=bs), device=torch.device('cpu'))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    learn = Learner(dls, model, loss_func=nn.MSELoss(), path=a.path)
    stamps_cbs = [At(-1000, 'fit_start'), At(12, 'ddp_wrapped'), At(1000, 'fit_ready', 'first_step')]
    with learn.no_bar(), learn.no_logging():
        with learn.distrib_ctx(cpu=True):
            stamp('ctx')
            learn.fit(1, 1e-3, cbs=cbs + stamps_cbs)
        stamp('fit_end')
    r = int(os.environ.get('RANK', 0))
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    REC.update(file=str(out/f'rank{r}.json'), rec=dict(rank=r, world=world, variant=a.variant, pid=os.getpid(), pieces=pieces,
               ckpts=sorted(p.name for p in (Path(a.path)/'checkpoints').glob('step-*')) if a.variant == 'ddpsafe' else None))
    stamp('end')     # the record is written at exit, by the last atexit handler (`_write_at_exit`)

if __name__ == '__main__':
    main()
