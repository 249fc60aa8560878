"""fastai's text application as a user runs it, on generated text, for `tests/test_text.py`.

    torchrun --nproc_per_node 2 text_train.py RUN [--signal-at FIT:STEP] [--lm-only] [--marks DIR] [--out DIR]
    python text_train.py RUN --predict EXPORT          # a fresh process: fastai's `load_learner`, then `predict`

One script, two fits, as in fastai's text tutorial: a language model (`language_model_learner(dls_lm, AWD_LSTM,
pretrained=False)`, fastai's LM DataLoader, 2 workers per rank) fit for `--epochs` epochs with `CheckpointCallback`
in `RUN/lm_checkpoints`, its encoder saved with `save_encoder('enc')`; then a classifier (`text_classifier_learner`,
same vocabulary) that loads it with `load_encoder('enc')`, fit with `CheckpointCallback` in `RUN/clas_checkpoints`,
then exported (`learn.export()`, to `RUN/export.pkl`). Sizes are tiny (`emb_sz` 16, `n_hid` 24, 2 layers; 16 words).
Run again after a preemption, the same command resumes the fit that was stopped (a finished fit's final checkpoint
gives the same weights back) and goes on. `--lm-only` stops after the language model.

`--signal-at lm:5` (or `clas:5`): once it has logged `STEP lm 5` every rank waits, at most 60 s, until its stop signal
has arrived (sent by the test to `torchrun`, which passes it on). ddpsafe agrees on a stop request one step after it
arrived, so the run always stops with the checkpoint of step 6: the test chooses the exact batch.
With `--marks DIR` every rank appends flushed marker lines to `DIR/rank{r}.log`: `PID p`, `STEP fit g`,
`RESULT {json}` (exit code, each fit's batches per epoch on this rank). `--out DIR` writes each finished fit's final
weights to `DIR/{fit}.rank{r}`, and rank 0's `predict` of a sentence to `DIR/predict.pt`.
The exit code is the callback's: 75 after a preemption signal, 0 at the end."""
from __future__ import annotations
import os, sys, json, time, random, argparse
from pathlib import Path

WORDS = 'the a cat dog sat ran on under mat log big small red blue fast slow'.split()
SENTENCE = 'the big cat sat on the red mat'

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('run')
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--texts', type=int, default=120, help='generated texts, a fifth of them for validation')
    p.add_argument('--signal-at', default=None, help='FIT:STEP, FIT lm or clas: wait there for the stop signal')
    p.add_argument('--lm-only', action='store_true', help='stop after the language model')
    p.add_argument('--marks', default=None); p.add_argument('--out', default=None)
    p.add_argument('--predict', default=None, help='an exported learner: load it, predict, print the result (one process)')
    return p.parse_args(argv)

def texts(n:int):
    "`n` generated texts of 4 to 24 words, labelled by whether 'cat' comes before 'dog'"
    import pandas as pd
    rnd = random.Random(0)
    txt = [' '.join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 24))) for _ in range(n)]
    label = ['cat' if (t+' cat').index('cat') < (t+' dog').index('dog') else 'dog' for t in txt]
    return pd.DataFrame(dict(text=txt, label=label))

def predict(export:str):
    "fastai alone, in a fresh process: the exported classifier's prediction"
    import torch
    from fastai.learner import load_learner
    import fastai.text.all   # the classes the exported file names
    pred = load_learner(export).predict(SENTENCE)
    print('PREDICTED ' + json.dumps(dict(label=str(pred[0]), probs=pred[2].tolist())), flush=True)
    return pred

def main(argv=None) -> int:
    a = parse_args(argv)
    if a.predict: predict(a.predict); return 0
    r, run = int(os.environ.get('RANK', '0')), Path(a.run)
    from marks import marker_log   # beside this script
    say = marker_log(a.marks, r)
    say(f'PID {os.getpid()}')
    t0 = time.time()
    import torch
    from fastai.text.all import (TextDataLoaders, BaseTokenizer, language_model_learner, text_classifier_learner, AWD_LSTM,
                                 awd_lstm_lm_config, awd_lstm_clas_config, ProgressCallback, set_seed, accuracy)
    import fastai.distributed               # learn.distrib_ctx()
    from ddpsafe.all import CheckpointCallback
    stop_fit, stop_step = (a.signal_at.split(':')[0], int(a.signal_at.split(':')[1])) if a.signal_at else (None, None)

    class Markers(CheckpointCallback):
        "`CheckpointCallback` that logs each step, and waits at `--signal-at` until the stop signal has arrived"
        def __init__(self, fit, **kwargs): super().__init__(**kwargs); self.fit_name = fit
        def after_batch(self):
            if self.training:
                batches[self.fit_name] = self.n_iter
                step = self.progress.steps_before + self.train_iter
                say(f'STEP {self.fit_name} {step}')
                if (self.fit_name, step) == (stop_fit, stop_step):
                    t = time.monotonic()
                    while not self.stops.signalled:
                        if time.monotonic() - t > 60: raise TimeoutError(f'rank {r}: no stop signal within 60 s of step {step}')
                        time.sleep(0.01)
            super().after_batch()

    df, code, batches = texts(a.texts), 0, {}
    def fit(learn, name):
        "Fit `learn` under DDP with a checkpoint callback; `False` if a stop signal ended it"
        nonlocal code
        learn.remove_cb(ProgressCallback)
        try:
            with learn.distrib_ctx(sync_bn=False):   # on CPU: DDP refuses SyncBatchNorm (the classifier has BatchNorm)
                learn.fit(a.epochs, 1e-2, cbs=Markers(name, path=f'{name}_checkpoints', every_epoch=1, poll_seconds=0))   # a round every step: the test names the step the stop lands on
        except SystemExit as e: code = e.code if isinstance(e.code, int) else 1
        if code == 0 and a.out:
            Path(a.out).mkdir(parents=True, exist_ok=True)
            torch.save({k: v.detach().clone() for k, v in learn.model.state_dict().items()}, f'{a.out}/{name}.rank{r}')
        return code == 0

    set_seed(0)
    dls_lm = TextDataLoaders.from_df(df, text_col='text', is_lm=True, tok_tfm=BaseTokenizer(), bs=8, seq_len=12, valid_pct=0.2,
                                     seed=0, num_workers=2, path=run)
    config = dict(awd_lstm_lm_config, emb_sz=16, n_hid=24, n_layers=2)
    learn = language_model_learner(dls_lm, AWD_LSTM, config=config, pretrained=False, path=run)
    if fit(learn, 'lm') and not a.lm_only:
        learn.save_encoder('enc')
        set_seed(1)
        dls = TextDataLoaders.from_df(df, text_col='text', label_col='label', text_vocab=dls_lm.vocab, tok_tfm=BaseTokenizer(),
                                      bs=8, seq_len=12, valid_pct=0.2, seed=0, num_workers=2, path=run)
        config = dict(awd_lstm_clas_config, emb_sz=16, n_hid=24, n_layers=2)
        learn = text_classifier_learner(dls, AWD_LSTM, config=config, pretrained=False, metrics=accuracy, path=run)
        learn.load_encoder('enc')
        if fit(learn, 'clas'):
            learn.export()
            probs = learn.predict(SENTENCE)[2]      # on every rank: fastai gathers the predictions across ranks
            if r == 0 and a.out: torch.save(probs, f'{a.out}/predict.pt')
    say('RESULT ' + json.dumps(dict(rank=r, code=code, batches=batches, seconds=round(time.time()-t0, 2))))
    return code

if __name__ == '__main__': sys.exit(main())
