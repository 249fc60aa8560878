"""A fastai training script that fails on one rank, as users' scripts do, for `tests/test_failures.py`.

    torchrun --nproc_per_node 2 failing_train.py RUN MODE [--loader fastai|torch] [--fail-rank R]
    python failing_train.py RUN MODE ...                       # one process, no DDP

MODE `worker`: in epoch 1 the 5th item a DataLoader worker of rank R loads raises `ValueError('corrupt sample I')`.
MODE `lm`: fastai's language model (`language_model_learner`, AWD_LSTM) on 200 generated texts: fastai's LM DataLoader,
split across ranks by fastai's own `DistributedDL.get_idxs`, fails in `fa_collate` on one rank (a stock fastai failure
under DDP, which `ddpsafe.patches.text` fixes; the script puts fastai's split back to have a failure to name).
MODE `block`: in epoch 1 the 5th item a worker of rank R loads never comes back (it sleeps); MODE `lock`: a user callback
on rank R waits at step 9 for a lock nobody releases. MODE `none`: no fault (the reference run; `--out` keeps the weights).
MODE `callback`: a user callback raises `ValueError('bad callback at step 9')` on rank R right after the checkpoint of
step 8 was handed to the background writer (`async_save=True`; the write is slowed by 2 s so that it is in flight).
`--slow-close S`: rank 0's fit takes S seconds more to close, after `CheckpointCallback` has given the signals their
handlers back (a stand-in for a slow close: a DataLoader worker, a file system); a launcher's SIGTERM then ends rank 0.
Every process that touches the data (ranks and their workers) writes its pid to `RUN/pids/`; each rank prints
`RESULT ...` if its fit returns. `CheckpointCallback` is attached with its defaults (signals blocked in the workers)."""
from __future__ import annotations
import os, sys, time, signal, argparse, threading
from pathlib import Path

def main():
    p = argparse.ArgumentParser(); p.add_argument('run'); p.add_argument('mode', choices=['none', 'worker', 'block', 'lock', 'callback', 'lm'])
    p.add_argument('--loader', choices=['fastai', 'torch'], default='fastai'); p.add_argument('--fail-rank', type=int, default=1)
    p.add_argument('--out', default=None, help="write a finished run's weights to OUT.rank{r}")
    p.add_argument('--slow-close', type=float, default=0, help="rank 0's fit takes this many seconds more to close")
    a = p.parse_args()
    r, run = int(os.environ.get('RANK', 0)), Path(a.run)
    (run/'pids').mkdir(parents=True, exist_ok=True)
    (run/'pids'/f'{os.getpid()}').write_text(f'rank {r}')
    if a.mode == 'lm': return language_model(run)
    import torch
    from fastai.data.core import DataLoaders
    from fastai.data.load import DataLoader
    from fastai.learner import Learner
    from fastai.losses import MSELossFlat
    from fastai.callback.core import Callback
    from fastai.callback.progress import ProgressCallback
    import fastai.distributed
    from ddpsafe.callback.checkpoint import CheckpointCallback

    class Items(torch.utils.data.Dataset):
        "y = x @ [1,2,3,4]; the 5th item one of rank R's workers loads in epoch 1 is corrupt"
        def __init__(self, n): self.n, self.epoch, self.seen = n, 0, 0
        def __len__(self): return self.n
        def __getitem__(self, i):
            if self.seen == 0: (run/'pids'/f'{os.getpid()}').write_text(f'rank {r}')
            self.seen += 1
            if self.epoch == 1 and r == a.fail_rank and self.seen == 5:
                if a.mode == 'worker': raise ValueError(f'corrupt sample {i}')
                if a.mode == 'block': time.sleep(3600)
            x = torch.randn(4, generator=torch.Generator().manual_seed(i))
            return x, (x @ torch.tensor([1., 2., 3., 4.]))[None]

    from fastai.torch_core import set_seed
    set_seed(0)
    train, valid = Items(96), Items(32)
    if a.loader == 'torch':
        dls = DataLoaders(torch.utils.data.DataLoader(train, batch_size=8, shuffle=True, num_workers=2),
                          torch.utils.data.DataLoader(valid, batch_size=8, num_workers=2), device='cpu')
    else: dls = DataLoaders(DataLoader(train, bs=8, shuffle=True, num_workers=2), DataLoader(valid, bs=8, num_workers=2), device='cpu')

    class Epochs(Callback):
        "Tell the datasets the epoch, before the workers are forked"
        def before_epoch(self): train.epoch = valid.epoch = self.epoch
    class Boom(Callback):
        "A user's callback with a bug on rank R at step 9"
        order = 70
        def after_batch(self):
            if a.mode in ('callback', 'lock') and self.training and r == a.fail_rank and self.train_iter == 9:
                if a.mode == 'lock': import threading; lock = threading.Lock(); lock.acquire(); lock.acquire()
                raise ValueError('bad callback at step 9')
    class SlowClose(Callback):
        "Rank 0's fit closes `--slow-close` seconds later, after the checkpoint callback's own close"
        order = 70
        def before_fit(self):
            from ddpsafe.callback.trackers import at_fit_end   # the fit's close, which runs however the fit ends
            if r == 0 and a.slow_close: at_fit_end(self.learn, lambda: time.sleep(a.slow_close))
    from ddpsafe.write.saver import Saver
    class SlowWrites(CheckpointCallback):
        "Its background writes take 2 s longer: rank 0's writer process stopped for 2 s as each save is handed over"
        def before_fit(self):
            super().before_fit()
            pipe = self.saver.pipe
            if pipe is None or pipe.writer is None: return   # the other ranks: rank 0 writes
            hand = pipe.hand
            def slow(*args, **kwargs):
                out = hand(*args, **kwargs)
                if pipe.writer is not None:
                    print(f'rank {r}: writing a checkpoint in the background', flush=True)
                    pid = pipe.writer.pid; os.kill(pid, signal.SIGSTOP); threading.Timer(2, os.kill, (pid, signal.SIGCONT)).start()
                return out
            pipe.hand = slow

    learn = Learner(dls, torch.nn.Linear(4, 1), loss_func=MSELossFlat(), lr=1e-2, path=run, cbs=[Epochs(), Boom(), SlowClose()])
    learn.remove_cb(ProgressCallback)
    ckpt = SlowWrites(every_steps=2, async_save=True) if a.mode == 'callback' else CheckpointCallback()
    if int(os.environ.get('WORLD_SIZE', 1)) > 1:
        with learn.distrib_ctx(): learn.fit(4, cbs=ckpt)
    else: learn.fit(4, cbs=ckpt)
    if a.out: torch.save({k: v.detach().clone() for k, v in learn.model.state_dict().items()}, f'{a.out}.rank{r}')
    print(f'RESULT rank {r} finished', flush=True)

def language_model(run:Path):
    "fastai's text workflow, step one, under DDP"
    import random, pandas as pd
    from fastai.text.all import TextDataLoaders, BaseTokenizer, language_model_learner, AWD_LSTM, ProgressCallback
    import fastai.distributed
    from ddpsafe.callback.checkpoint import CheckpointCallback
    from ddpsafe.patches.learner import fastai_stock
    fd = sys.modules['fastai.distributed']
    fd.DistributedDL.get_idxs = fastai_stock.get('DistributedDL.get_idxs', fd.DistributedDL.get_idxs)   # fastai's own split
    words, rnd = 'the a cat dog sat ran on under mat log big small red blue fast slow'.split(), random.Random(0)
    df = pd.DataFrame(dict(text=[' '.join(rnd.choice(words) for _ in range(rnd.randint(5, 40))) for _ in range(200)]))
    dls = TextDataLoaders.from_df(df, text_col='text', is_lm=True, tok_tfm=BaseTokenizer(), bs=16, seq_len=20, path=run,
                                  num_workers=2, valid_pct=0.2, seed=0)
    learn = language_model_learner(dls, AWD_LSTM, pretrained=False, path=run)
    learn.remove_cb(ProgressCallback)
    with learn.distrib_ctx(): learn.fit(2, cbs=CheckpointCallback())
    print(f'RESULT rank {os.environ.get("RANK", 0)} finished', flush=True)

if __name__ == '__main__': main()
