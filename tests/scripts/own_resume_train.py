"""Scripts written as users write them, for `tests/test_own_resume.py` (issue 69): every resume is the user's own.

    python own_resume_train.py RUN SCRIPT [--kill STEP] [--stock] [--workers N] [--lr LR] [--bs BS] [--resume R] [--accept WHAT]
    torchrun --nproc_per_node 2 own_resume_train.py RUN kfold ...

SCRIPT is one of
- `kfold`: a 3-fold cross-validation, a new `Learner` and `fit_one_cycle(3)` per fold, each with a `CheckpointCallback()` on the
  default folder (`RUN/checkpoints` for every fold), then `learn.save(f'fold{k}')` and `validate()`;
- `ensemble`: two models of the same architecture from other seeds, each its own `Learner` and `fit(2)`, one after the other, on
  the default folder;
- `plain`: one `fit(3, LR)` with batches of BS and a `CheckpointCallback(every_steps=6, keep=10, resume=R, accept_changes=WHAT)`,
  and a user's callback that counts its batches in an attribute of its own.

The learners' path is RUN; marker lines go to RUN/marks/rank{r}.log:

    PID pid                   as the script starts
    FOLD k {json}             after fold (or model) k: the digest of its weights, its `validate()` loss
    RESULT {json}             last: the final weights' digest, the optimizer's lr, the user's callback's count

`--kill STEP`: the last rank sends itself SIGTERM after that many optimizer steps of this launch (a preemption).
`--stock`: fastai alone: no ddpsafe import and no `CheckpointCallback` (on 2 CPU ranks, fastai's broadcast without `.cuda()`)."""
import os, sys, json, signal, hashlib, argparse, contextlib
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
from marks import marker_log

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument('run'); p.add_argument('script', choices=['kfold', 'ensemble', 'plain'])
p.add_argument('--kill', type=int, default=None); p.add_argument('--stock', action='store_true')
p.add_argument('--workers', type=int, default=0); p.add_argument('--lr', type=float, default=1e-2); p.add_argument('--bs', type=int, default=8)
p.add_argument('--resume', default='true'); p.add_argument('--accept', default='')
args = p.parse_args()

import torch
from torch import nn
from fastai.basics import *
from fastai.callback.all import *
from fastai.distributed import *
if args.stock:
    import fastai.distributed as fd
    def _broadcast(self, t, rank):                    # fastai's, without `.cuda()`: gloo on a CPU
        t = torch.LongTensor(t); torch.distributed.broadcast(t, rank); return t.cpu().tolist()
    fd.DistributedDL._broadcast = _broadcast
else:
    from ddpsafe.all import *

run, r = Path(args.run), int(os.environ.get('RANK', 0))
last, distributed = int(os.environ.get('WORLD_SIZE', 1)) - 1, 'RANK' in os.environ
say = marker_log(run/'marks', r)
say(f'PID {os.getpid()}')
digest = lambda sd: hashlib.sha256(b''.join(v.detach().cpu().numpy().tobytes() for v in sd.values())).hexdigest()[:16]

g = torch.Generator().manual_seed(0)
x = torch.randn(96, 4, generator=g); y = x @ torch.tensor([1., 2., 3., 4.]) + 0.5 + 0.1*torch.randn(96, generator=g)
items = [(a, b[None]) for a, b in zip(x, y)]

def data(valid:list):
    "The items, `valid` held out"
    train = [i for i in range(len(items)) if i not in set(valid)]
    dsets = Datasets(items, [[ItemGetter(0)], [ItemGetter(1)]], splits=[train, valid])
    return dsets.dataloaders(bs=args.bs, device='cpu', num_workers=args.workers)

class Steps(Callback):
    "Counts this launch's optimizer steps, over every learner; sends the preemption signal"
    order, n = -10, 0
    def after_step(self):
        Steps.n += 1
        if r == last and args.kill is not None and Steps.n == args.kill: os.kill(os.getpid(), signal.SIGTERM)

class CountBatches(Callback):
    "A user's callback with state of its own and no `state_dict`: the batches it saw"
    def __init__(self): self.n = 0
    def after_batch(self):
        if self.training: self.n += 1

def checkpoints(**kw): return [] if args.stock else [CheckpointCallback(poll_seconds=0, **kw)]   # a stop agreed at the next step

def learner(dls, seed:int, cbs=()):
    torch.manual_seed(seed)
    learn = Learner(dls, nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)), loss_func=MSELossFlat(), path=run, cbs=[Steps(), *cbs])
    learn.remove_cb(ProgressCallback)
    return learn

def ctx(learn): return learn.distrib_ctx(cpu=True) if args.stock else learn.distrib_ctx() if distributed else contextlib.nullcontext()

def report(k, learn):
    "Fold `k`'s weights and its `validate()` loss"
    say(f'FOLD {k} ' + json.dumps(dict(weights=digest(get_model(learn.model).state_dict()), loss=float(learn.validate()[0]))))

set_seed(0)
if args.script == 'kfold':
    for k in range(3):
        learn = learner(data(list(range(k, 96, 3))), seed=k)
        with ctx(learn): learn.fit_one_cycle(3, 1e-2, cbs=checkpoints())
        learn.save(f'fold{k}'); report(k, learn)
elif args.script == 'ensemble':
    dls = data(list(range(72, 96)))
    for k in range(2):
        learn = learner(dls, seed=10 + k)
        with ctx(learn): learn.fit(2, 1e-2, cbs=checkpoints())
        report(k, learn)
else:
    resume = True if args.resume == 'true' else int(args.resume)
    counter = CountBatches()
    learn = learner(data(list(range(72, 96))), seed=0, cbs=[counter])
    kw = dict(every_steps=6, keep=10, resume=resume, accept_changes=tuple(a for a in args.accept.split(',') if a))
    with ctx(learn): learn.fit(3, args.lr, cbs=checkpoints(**kw))
    report(0, learn)
say('RESULT ' + json.dumps(dict(weights=digest(get_model(learn.model).state_dict()), lr=learn.opt.hypers[0]['lr'],
                                batches=getattr(learn, 'count_batches', None) and learn.count_batches.n)))
if args.stock and torch.distributed.is_initialized(): torch.distributed.destroy_process_group()   # fastai leaves accelerate's group
