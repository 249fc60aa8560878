"""One rank of a small fit for `tests/test_goodput.py` (issue 72): a requeue loop through faults at known steps.

    python goodput_train.py RUN [--fault none|sigterm|killrank|killjob] [--at STEP] [--epochs N] [--pad SECONDS]

A regression on 96 training items, batches of 8 on 2 ranks (6 optimizer steps an epoch), `--epochs` epochs (5), each
step padded to about `--pad` s (0.03); `CheckpointCallback(every_steps=5, every_epoch=None, poll_seconds=0)` in RUN/checkpoints.
Marker lines go to RUN/marks/rank{r}.log (rank 0's are the test's log):

    PID pid               as the script starts
    SAVE step             rank 0, each checkpoint saved to disk (signal's and end's too)
    STEP step seconds t   rank 0, each optimizer step: its global step, the seconds from its batch's start to its end, the end's time
    FAULT kind step       just before the fault, at the end of global step `--at`
    RESULT {json}         last, on a launch that ends its fit: the step reached, the time

Faults: `sigterm`, rank 0 sends SIGTERM to torchrun, as a scheduler does; `killrank`, rank 1 SIGKILLs itself;
`killjob`, rank 0 SIGKILLs torchrun, rank 1 and itself (a node lost: nothing runs on)."""
import os, sys, json, time, signal, argparse
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
from marks import marker_log

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument('--epochs', type=int, default=5); p.add_argument('--pad', type=float, default=0.03)
p.add_argument('run'); p.add_argument('--fault', default='none', choices=['none', 'sigterm', 'killrank', 'killjob']); p.add_argument('--at', type=int, default=0)
args = p.parse_args()
N_EPOCH, PAD = args.epochs, args.pad

import torch
from torch import nn
from fastai.basics import *
from fastai.distributed import *
from ddpsafe.all import *
import torch.distributed as dist

run, r = Path(args.run), int(os.environ['RANK'])
say = marker_log(run/'marks', r)
say(f'PID {os.getpid()}')

def data():
    "A known linear regression: 128 items, a quarter for validation, batches of 8"
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 4, generator=g); y = x @ torch.tensor([1., 2., 3., 4.]) + 0.5 + 0.1*torch.randn(128, generator=g)
    items = [(a, b[None]) for a, b in zip(x, y)]
    dsets = Datasets(items, [[ItemGetter(0)], [ItemGetter(1)]], splits=[list(range(96)), list(range(96, 128))])
    return dsets.dataloaders(bs=8, device='cpu', num_workers=0)

class Logged(CheckpointCallback):
    "`CheckpointCallback` that says each save to disk on rank 0"
    def save(self, reason='request', **kw):
        done = super().save(reason, **kw)
        if done and kw.get('to') is None and r == 0: say(f'SAVE {self.position()["global_step"]}')
        return done

class Faults(Callback):
    "Pads each training step, says it, and brings the fault at the end of global step `--at` (after the checkpoint callback's turn)"
    order = 70
    def before_fit(self): self.pids = [None]*dist.get_world_size(); dist.all_gather_object(self.pids, os.getpid())
    def before_batch(self): self.began = time.time()
    def after_batch(self):
        if not self.training: return
        self.step = step = self.ck.progress.global_step
        if r == 0: now = time.time(); say(f'STEP {step} {now - self.began:.6f} {now:.6f}')
        if step != args.at or args.fault == 'none': return
        if args.fault == 'sigterm' and r == 0: say(f'FAULT sigterm {step}'); os.kill(os.getppid(), signal.SIGTERM)
        if args.fault == 'killrank' and r == 1: say(f'FAULT killrank {step}'); os.kill(os.getpid(), signal.SIGKILL)
        if args.fault == 'killjob' and r == 0:
            say(f'FAULT killjob {step}')
            for pid in (os.getppid(), *self.pids[1:], os.getpid()): os.kill(pid, signal.SIGKILL)
    def after_pred(self):
        t = time.perf_counter() + PAD
        while self.training and time.perf_counter() < t: time.sleep(0.002)

torch.manual_seed(0)
ck = Logged(every_steps=5, every_epoch=None, poll_seconds=0, keep=100)
faults = Faults(); faults.ck = ck
learn = Learner(data(), nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1)), loss_func=MSELossFlat(), path=run, cbs=[ck, faults])
with learn.distrib_ctx(), learn.no_bar(), learn.no_logging(): learn.fit(N_EPOCH, 1e-2)
say('RESULT ' + json.dumps(dict(step=faults.step, t=time.time())))   # when the run ended: what follows is the launcher's shut-down
