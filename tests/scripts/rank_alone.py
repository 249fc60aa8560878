"""Code that runs on one rank, written as users write it (issue 40): one scenario a launch, under the real `torchrun`.
`python rank_alone.py FOLDER SCENARIO [--stock]`: with `--stock`, plain fastai; else `from ddpsafe.all import *` after fastai.
Each rank prints `BRANCH rank=R at=T` as it comes to the code that branches on the rank, `RESULT rank=R files=[...] seconds=S`
at the end of the script, and `ERROR rank=R Type: message` if the script raised."""
import os, sys, time
t0 = time.time()
import torch, torch.distributed as dist
from fastai.basics import *
from fastai.callback.all import *
from fastai.distributed import *
folder, scenario, stock = Path(sys.argv[1]), sys.argv[2], '--stock' in sys.argv
if not stock: from ddpsafe.all import *
else:   # stock fastai's `DistributedDL` broadcasts with `.cuda()`: the same call on the CPU, nothing else changed
    def _broadcast(self, t, rank):
        t = LongTensor(t); torch.distributed.broadcast(t, rank); return t.tolist()
    DistributedDL._broadcast = _broadcast
os.environ.setdefault('ACCELERATE_USE_CPU', '1')   # stock fastai needs it on CPU; ddpsafe does not
folder.mkdir(parents=True, exist_ok=True); os.chdir(folder)

dist.init_process_group('gloo')                  # the script owns the group, as in PyTorch's DDP tutorial
rank = dist.get_rank()
torch.manual_seed(0)
x = torch.randn(64, 4); y = x @ torch.tensor([1., 2., 3., 4.]) + 0.5
items = [(a, b[None]) for a, b in zip(x, y)]
dsets = Datasets(items, [[ItemGetter(0)], [ItemGetter(1)]], splits=[list(range(48)), list(range(48, 64))])
dls = dsets.dataloaders(bs=8, num_workers=2)
learn = Learner(dls, nn.Linear(4, 1), loss_func=MSELossFlat(), path='.')

def say(line): os.write(1, (line + '\n').encode())   # one write a line: the two ranks share the output, never within a line
def branch(): say(f'BRANCH rank={rank} at={time.time():.3f}')   # where the script branches on the rank

def run():
    if scenario == 'save-in-ctx':
        with learn.distrib_ctx():
            learn.fit(1, 1e-2)
            branch()
            if rank == 0: learn.save('m')
            dist.barrier()
    elif scenario == 'save-after-ctx':
        with learn.distrib_ctx(): learn.fit(1, 1e-2)
        branch()
        if rank == 0: learn.save('m')
        dist.barrier()
    elif scenario == 'save_model':
        with learn.distrib_ctx(): learn.fit(1, 1e-2)
        branch()
        if rank == 0: save_model('plain.pth', learn.model, learn.opt)
        dist.barrier()
    elif scenario == 'csvlogger':
        with learn.distrib_ctx():
            branch()
            learn.fit(2, 1e-2, cbs=[CSVLogger()] if rank == 0 else [])
        dist.barrier()
    elif scenario == 'export':
        with learn.distrib_ctx(): learn.fit(1, 1e-2)
        branch()
        if rank == 0: learn.export('export.pkl')
        dist.barrier()
    elif scenario == 'savemodelcb':
        with learn.distrib_ctx():
            branch()
            learn.fit(2, 1e-2, cbs=[SaveModelCallback()] if rank == 0 else [])
        dist.barrier()
    elif scenario == 'predict':
        with learn.distrib_ctx():
            learn.fit(1, 1e-2)
            branch()
            if rank == 0: learn.get_preds()
            dist.barrier()
    elif scenario == 'load-in-ctx':
        with learn.distrib_ctx():
            learn.fit(1, 1e-2)
            learn.save('m')
            branch()
            if rank == 0: learn.load('m')
            dist.barrier()
    elif scenario == 'load-then-end':
        with learn.distrib_ctx(): learn.fit(1, 1e-2)
        learn.save('m')
        branch()
        if rank == 0: learn.load('m')      # rank 1 has nothing more to do: its script ends
    elif scenario == 'load_learner':
        with learn.distrib_ctx(): learn.fit(1, 1e-2)
        learn.export('export.pkl')
        branch()
        if rank == 0: load_learner('export.pkl')
        dist.barrier()
    else: raise SystemExit(f'unknown scenario {scenario}')

try: run()
except Exception as e:
    say(f'ERROR rank={rank} {type(e).__name__}: ' + ' '.join(str(e).split()))
    raise
files = sorted(str(p) for p in Path('.').rglob('*') if p.is_file() and not p.name.startswith('.'))
say(f'RESULT rank={rank} files={files} seconds={time.time()-t0:.1f}')
dist.destroy_process_group()
