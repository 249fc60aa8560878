"""fastai's applications trained as their users write them, with `CheckpointCallback` from `ddpsafe.all`, for `tests/test_apps.py`.

    torchrun --nproc_per_node 2 apps_train.py vision|tabular|collab PATH [--marks DIR] [--out FILE] [--slow SECS] [--export]
    python apps_train.py predict EXPORT_PKL IMAGE                        # vision: load_learner + predict, without ddpsafe

- vision: `ImageDataLoaders.from_folder(PATH/'images')` (the test writes them: a folder per class; 40x36 pixels, so
  that `Resize(32)` crops at a random place, in the DataLoader workers), batches of 4, `item_tfms=Resize(32)`, `batch_tfms=aug_transforms()`,
  `vision_learner(dls, resnet18, pretrained=False)`: BatchNorm in the body and the head; `--export` then `learn.export()`
  and the prediction of the trained learner for the first image, to compare with a fresh process's.
- tabular: `TabularDataLoaders.from_df` on a generated DataFrame (2 categorical columns, 2 continuous ones with missing
  values, a class to predict) with `Categorify`, `FillMissing`, `Normalize`; `tabular_learner` (BatchNorm too).
- collab: `CollabDataLoaders.from_df` on generated ratings; `collab_learner` (dot product with biases).

Every DataLoader has 2 worker processes; each application is 2 epochs of `fit_one_cycle` inside `learn.distrib_ctx()`,
with `CheckpointCallback(every_epoch=1)`, saving to `PATH/checkpoints`. With `--marks DIR` every rank appends, flushed at
once, `PID p`, `STEP n` (training batches done in this process) and `RESULT {json}` to `DIR/rank{r}.log`; `--slow` sleeps
after each training batch so that a signal lands mid-epoch; `--out FILE` writes the final `state_dict` (weights and
BatchNorm buffers) of a finished run to `FILE.rank{r}`. The exit code is the callback's: 75 after a preemption signal."""
from __future__ import annotations
import os, sys, json, time, argparse
from pathlib import Path

WORKERS, N_EPOCH = 2, 2
LR = dict(vision=1e-3, tabular=1e-2, collab=1e-2)   # fit_one_cycle's: vision's keeps a resnet18 from scratch on 48 images sane

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('app', choices=['vision', 'tabular', 'collab', 'predict'])
    p.add_argument('path'); p.add_argument('image', nargs='?', help='predict: the image to predict from')
    p.add_argument('--marks'); p.add_argument('--out')
    p.add_argument('--slow', type=float, default=0., help='seconds to sleep after every training batch')
    p.add_argument('--export', action='store_true', help='vision: export the trained learner, and predict the first image')
    return p.parse_args(argv)

def vision(path:Path):
    from fastai.vision.all import ImageDataLoaders, Resize, aug_transforms, vision_learner, resnet18, accuracy
    dls = ImageDataLoaders.from_folder(path/'images', valid_pct=0.25, seed=42, item_tfms=Resize(32), batch_tfms=aug_transforms(),
                                       bs=4, num_workers=WORKERS)
    return vision_learner(dls, resnet18, pretrained=False, metrics=accuracy, path=path)

def tabular_df(n:int=512):
    "A DataFrame of `n` rows: categorical `cut`, `colour` (not `shape`: `TabularPandas` gives its columns as attributes, and fastai's `find_bs` reads `.shape`); continuous `width`, `height` (a tenth missing); the class `big`"
    import numpy as np, pandas as pd
    rng = np.random.default_rng(0)
    df = pd.DataFrame(dict(cut=rng.choice(['round', 'square', 'star'], n), colour=rng.choice(['red', 'green', 'blue', 'grey'], n),
                           width=rng.normal(10, 3, n), height=rng.normal(5, 2, n)))
    df['big'] = np.where(df.width*df.height + 8*(df.cut == 'star') > 55, 'yes', 'no')
    df.loc[rng.random(n) < 0.1, 'height'] = np.nan
    return df

def tabular(path:Path):
    from fastai.tabular.all import TabularDataLoaders, Categorify, FillMissing, Normalize, tabular_learner, accuracy
    df = tabular_df()
    dls = TabularDataLoaders.from_df(df, path=path, procs=[Categorify, FillMissing, Normalize], cat_names=['cut', 'colour'],
                                     cont_names=['width', 'height'], y_names='big', valid_idx=list(range(384, 512)), bs=16,
                                     num_workers=WORKERS)
    return tabular_learner(dls, layers=[32, 16], metrics=accuracy)

def ratings_df(users:int=40, items:int=30, n:int=640):
    "`n` ratings from 1 to 5 of `items` films by `users` users, from hidden tastes"
    import numpy as np, pandas as pd
    rng = np.random.default_rng(0)
    u, i = rng.integers(0, users, n), rng.integers(0, items, n)
    taste, kind = rng.normal(size=(users, 3)), rng.normal(size=(items, 3))
    score = 3 + (taste[u]*kind[i]).sum(1) + 0.3*rng.normal(size=n)
    return pd.DataFrame(dict(user=u, film=[f'film{j}' for j in i], rating=score.clip(1, 5).round(1)))

def collab(path:Path):
    from fastai.collab import CollabDataLoaders, collab_learner
    dls = CollabDataLoaders.from_df(ratings_df(), valid_pct=0.25, seed=42, bs=16, num_workers=WORKERS, path=path)
    return collab_learner(dls, n_factors=8, y_range=(0.5, 5.5))

def predict(export:str, image:str) -> int:
    "Load an exported learner where ddpsafe is not imported, predict `image`; print the probabilities as JSON"
    from fastai.learner import load_learner
    import fastai.vision.all
    learn = load_learner(export)
    with learn.no_bar(): _, _, probs = learn.predict(image)
    assert not [m for m in sys.modules if m.startswith('ddpsafe')], 'load_learner imported ddpsafe'
    print('PROBS ' + json.dumps(probs.tolist()))
    return 0

def main(argv=None) -> int:
    a = parse_args(argv)
    if a.app == 'predict': return predict(a.path, a.image)
    r, path = int(os.environ.get('RANK', '0')), Path(a.path)
    from marks import marker_log   # beside this script
    say = marker_log(a.marks, r)
    say(f'PID {os.getpid()}')
    t0 = time.time()
    import torch
    from fastai.callback.core import Callback
    from fastai.callback.progress import ProgressCallback
    import fastai.distributed                              # Learner.distrib_ctx
    from fastai.torch_core import set_seed
    from ddpsafe.all import CheckpointCallback

    set_seed(0)
    learn = dict(vision=vision, tabular=tabular, collab=collab)[a.app](path)
    learn.remove_cb(ProgressCallback)

    class Marks(Callback):
        "Log each training batch done, then sleep `--slow` seconds"
        order, done = 100, 0
        def after_batch(self):
            if not self.training: return
            Marks.done += 1; say(f'STEP {Marks.done}')
            if a.slow: time.sleep(a.slow)

    cb = CheckpointCallback(every_epoch=1)
    code = 0
    try:
        with learn.distrib_ctx(): learn.fit_one_cycle(N_EPOCH, LR[a.app], cbs=[cb, Marks()])
    except SystemExit as e: code = e.code if isinstance(e.code, int) else 1
    if code == 0:
        if a.out: torch.save({k: v.detach().clone() for k, v in learn.model.state_dict().items()}, f'{a.out}.rank{r}')
        if a.export:
            learn.export()                                   # rank 0 writes path/export.pkl; every rank returns once it is there
            image = sorted((path/'images').rglob('*.png'))[0]
            with learn.no_bar(): say('PROBS ' + json.dumps(learn.predict(image)[2].tolist()))
    say('RESULT ' + json.dumps(dict(rank=r, code=code, stopped_by=cb.stopped_by, seconds=round(time.time()-t0, 2))))
    return code

if __name__ == '__main__': sys.exit(main())
