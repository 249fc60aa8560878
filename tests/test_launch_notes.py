"""Issue 69: what a launch and a resume print, as a user sees it in real processes.

1. A callback of the user's own that counts batches in `self.n` and has no `state_dict`: a fit in one process is
   preempted (SIGTERM to itself mid-fit, exit 75), then rerun. The rerun resumes and rank 0 names the callback, once,
   with what to do; the first launch, which resumes nothing, says nothing of it. A fit with only fastai's callbacks and
   a user callback without state of its own (methods and class attributes) resumes the same way and prints no such line.
2. A 2-rank `torchrun` fit on CPU of a BatchNorm model with `num_workers=2`: rank 0 prints the BatchNorm note and (on a
   Python with CPython gh-112275) the note on forked workers once each, saying what ddpsafe did and that there is
   nothing to do, never "training with sync_bn=False ... silence this note"."""
from __future__ import annotations
import os, sys, subprocess, textwrap
from pathlib import Path
import pytest
from ddpsafe.callback.preempt import fork_deadlock_prone
from ddpsafe.storage.manifest import REQUEUE_EXIT_CODE

SCRIPT = textwrap.dedent('''
    import os, sys, signal
    from pathlib import Path
    import torch
    from torch import nn
    from fastai.basics import *
    from fastai.callback.all import *
    from fastai.distributed import *
    from ddpsafe.all import *

    run, cbs, kill, bn, workers = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == 'bn', int(sys.argv[5])

    class Batches(Callback):
        "Counts the training batches it sees: state of its own, no state_dict"
        def __init__(self): self.n = 0
        def after_batch(self): self.n += self.training

    class Preempt(Callback):
        "Methods and class attributes only: SIGTERM to this process after optimizer step `kill` of this launch"
        steps = 0
        def after_step(self):
            Preempt.steps += 1
            if Preempt.steps == kill: os.kill(os.getpid(), signal.SIGTERM)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 4, generator=g); y = x @ torch.tensor([1., 2., 3., 4.]) + 0.5
    dsets = Datasets([(a, b[None]) for a, b in zip(x, y)], [[ItemGetter(0)], [ItemGetter(1)]], splits=[list(range(96)), list(range(96, 128))])
    set_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1)) if bn else nn.Linear(4, 1)
    extra = dict(own=[Batches(), Preempt()], fastai=[Preempt(), EarlyStoppingCallback(patience=10), SaveModelCallback()], none=[])[cbs]
    learn = Learner(dsets.dataloaders(bs=8, num_workers=workers), model, loss_func=MSELossFlat(), lr=1e-2, path=run,
                    cbs=[CheckpointCallback(every_steps=2, poll_seconds=0), *extra])
    learn.remove_cb(ProgressCallback)
    with learn.distrib_ctx(): learn.fit(2)
''')

NOTE = 'has state of its own and no state_dict()'

def launch(tmp_path, *args, ranks=1) -> tuple:
    "The script on `ranks` processes (one: plain python; more: torchrun): (exit code, output)"
    script = tmp_path/'train.py'
    if not script.exists(): script.write_text(SCRIPT)
    torchrun = [str(Path(sys.executable).parent/'torchrun'), '--nproc_per_node', str(ranks)] if ranks > 1 else [sys.executable]
    r = subprocess.run([*torchrun, str(script), str(tmp_path/'run'), *map(str, args)], capture_output=True, text=True, timeout=240,
                       env={**os.environ, 'OMP_NUM_THREADS': '1'})
    return r.returncode, r.stdout + r.stderr

def preempted_then_resumed(tmp_path, cbs) -> str:
    "Launch, SIGTERM mid-fit (exit 75), rerun to the end: the rerun's output"
    code, first = launch(tmp_path, cbs, 5, 'linear', 0)
    assert code == REQUEUE_EXIT_CODE, f'the preempted launch exited {code}\n{first[-3000:]}'
    assert NOTE not in first, f'a launch that resumes nothing spoke of callback state\n{first[-3000:]}'
    code, out = launch(tmp_path, cbs, 0, 'linear', 0)
    assert code == 0 and 'resumed from' in out, f'the rerun exited {code}\n{out[-3000:]}'
    return out

@pytest.mark.timeout(300)
def test_resume_names_a_callback_whose_state_starts_afresh(tmp_path):
    out = preempted_then_resumed(tmp_path, 'own')
    lines = [l for l in out.splitlines() if NOTE in l]
    assert len(lines) == 1, f'{len(lines)} lines on callback state, not one\n{out[-3000:]}'
    line = lines[0]
    assert line.startswith('ddpsafe: callback Batches (self.n) has state of its own'), line
    assert 'starts afresh' in line and 'state_dict() and load_state_dict()' in line and 'CheckpointCallback(extra=' in line, line
    assert 'Preempt' not in line, f'a callback without state of its own is named\n{line}'

@pytest.mark.timeout(300)
def test_resume_with_fastai_callbacks_and_stateless_ones_says_nothing(tmp_path):
    out = preempted_then_resumed(tmp_path, 'fastai')
    assert NOTE not in out and 'starts afresh' not in out, out[-3000:]

@pytest.mark.timeout(300)
def test_launch_notes_say_what_ddpsafe_did(tmp_path):
    "A 2-rank CPU fit of a BatchNorm model with DataLoader workers: each note once, on rank 0, and nothing for the user to do"
    code, out = launch(tmp_path, 'none', 0, 'bn', 2, ranks=2)
    assert code == 0, f'torchrun exited {code}\n{out[-3000:]}'
    out = out.replace('\r', '\n')
    assert 'silence this note' not in out and 'training with sync_bn=False' not in out, out[-3000:]
    bn = [l for l in out.splitlines() if 'BatchNorm layers' in l]
    assert len(bn) == 1 and bn[0].startswith('ddpsafe: the model has BatchNorm layers and this machine no CUDA'), bn or out[-3000:]
    assert 'Nothing to do; pass sync_bn=False yourself' in bn[0], bn[0]
    fork = [l[l.index('ddpsafe: Python'):] for l in out.splitlines() if 'ddpsafe: Python' in l]
    assert len(fork) == (1 if fork_deadlock_prone() else 0), fork or out[-3000:]
    if fork: assert 'gh-112275' in fork[0] and 'Nothing to do (Python' in fork[0], fork[0]
