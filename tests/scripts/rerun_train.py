"""One rank of a script of several fits, written as users write them, for `tests/test_rerun.py` (issue 60): a rerun replays it.

    python rerun_train.py RUN SCRIPT [--kill STEP] [--workers N] [--cuda]

SCRIPT is one of
- `fit-save-fit`: `fit(1)`, `learn.save('stage-1')` and `validate()`, `fit(2)`; a `CheckpointCallback` and a
  `SaveModelCallback` given to each fit;
- `fine_tune`: `fine_tune(2)` on a model of two parameter groups, the `CheckpointCallback` on `Learner(cbs=...)`;
- `unfreeze`: `freeze()`, `fit_one_cycle(1)`, `learn.save('stage-1')` and `validate()`, `unfreeze()`, `fit_one_cycle(2)`,
  the `CheckpointCallback` on the `Learner`.

Every checkpoint callback saves every 2 optimizer steps. The learner's path is RUN; marker lines go to RUN/marks/rank{r}.log:

    PID pid                     as the script starts
    FIT i {json}                as fit i of the script begins (`validate` too), before any resume: what the learner holds then (digests of
                                the weights and the optimizer state, the recorder's values, the frozen groups)
    BETWEEN {json}              after the first fit's `save` and `validate`: the saved file's sha256 and the loss
    RESULT {json}               last: the digest of the final weights and optimizer state

`--kill STEP`: the last rank sends itself SIGTERM after that many optimizer steps of this launch (a preemption).
`--workers N`: the DataLoaders fork N worker processes each (fastai's default on a machine with cores).
`--cuda`: the batches, and so the model, on `cuda:LOCAL_RANK`."""
import os, sys, json, signal, hashlib, argparse
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
from marks import marker_log

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument('run'); p.add_argument('script', choices=['fit-save-fit', 'fine_tune', 'unfreeze'])
p.add_argument('--kill', type=int, default=None); p.add_argument('--workers', type=int, default=0); p.add_argument('--cuda', action='store_true')
args = p.parse_args()

import torch
from torch import nn
from fastai.basics import *
from fastai.callback.all import *
from fastai.distributed import *
from ddpsafe.all import *
from ddpsafe.state.training_state import state_digest

run, r, last = Path(args.run), int(os.environ['RANK']), int(os.environ['WORLD_SIZE']) - 1
say = marker_log(run/'marks', r)
say(f'PID {os.getpid()}')

def data():
    "A known linear regression: 128 items, a quarter for validation, batches of 8"
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 4, generator=g); y = x @ torch.tensor([1., 2., 3., 4.]) + 0.5 + 0.1*torch.randn(128, generator=g)
    items = [(a, b[None]) for a, b in zip(x, y)]
    dsets = Datasets(items, [[ItemGetter(0)], [ItemGetter(1)]], splits=[list(range(96)), list(range(96, 128))])
    return dsets.dataloaders(bs=8, device=f"cuda:{os.environ['LOCAL_RANK']}" if args.cuda else 'cpu', num_workers=args.workers)

def two_groups(m): return [list(m[0].parameters()), list(m[2].parameters())]

class Marks(Callback):
    "Says what the learner holds as each fit of the script begins; sends the preemption signal"
    order, steps, fits = -10, 0, 0
    def before_fit(self):
        opt = self.learn.opt
        say(f'FIT {self.fits} ' + json.dumps(dict(model=state_digest(get_model(self.learn.model).state_dict()),
                                                   opt=None if opt is None else state_digest(opt.state_dict()),
                                                   values=[[None if v is None else float(v) for v in vs] for vs in getattr(self.learn.recorder, 'values', [])],
                                                   frozen=None if opt is None else opt.frozen_idx)))
        self.fits += 1
    def after_step(self):
        Marks.steps += 1
        if r == last and args.kill is not None and Marks.steps == args.kill: os.kill(os.getpid(), signal.SIGTERM)

def between(learn):
    "The first fit's `save` and `validate`, as the script does them between its fits"
    saved = learn.save('stage-1')
    loss = learn.validate()[0]
    say('BETWEEN ' + json.dumps(dict(sha=hashlib.sha256(saved.read_bytes()).hexdigest(), loss=float(loss))))

ckpt = lambda: CheckpointCallback(every_steps=2, poll_seconds=0)
set_seed(0)   # the data order, the first weights
if args.script == 'fit-save-fit':
    learn = Learner(data(), nn.Linear(4, 1), loss_func=MSELossFlat(), lr=1e-2, path=run, cbs=Marks())
    every = lambda: [ckpt(), SaveModelCallback(monitor='valid_loss')]
else:
    learn = Learner(data(), nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)), loss_func=MSELossFlat(), lr=1e-2,
                    path=run, splitter=two_groups, cbs=[Marks(), ckpt()])
    every = lambda: None
learn.remove_cb(ProgressCallback)
with learn.distrib_ctx():
    if args.script == 'fit-save-fit':
        learn.fit(1, cbs=every()); between(learn); learn.fit(2, cbs=every())
    elif args.script == 'fine_tune':
        learn.fine_tune(2, 1e-2)
    else:
        learn.freeze(); learn.fit_one_cycle(1, 1e-2); between(learn)
        learn.unfreeze(); learn.fit_one_cycle(2, slice(1e-4, 1e-2))
say('RESULT ' + json.dumps(dict(rank=r, end=dict(model=state_digest(get_model(learn.model).state_dict()), opt=state_digest(learn.opt.state_dict()),
                                                  values=[[None if v is None else float(v) for v in vs] for vs in learn.recorder.values]))))
