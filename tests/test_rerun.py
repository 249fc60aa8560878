"""A rerun replays the script as it ran (issue 60), through `torchrun` on 2 gloo ranks.

A requeue runs the same script again from its first line. For scripts of several fits (`fit`, `save`, `fit`;
`fine_tune`; `fit_one_cycle`, `unfreeze`, `fit_one_cycle`), each run to the end and each preempted in its second fit,
the rerun must leave the learner between the fits as the first run did: the same weights, optimizer state, recorder and
frozen groups as each fit begins, the same bytes in the file the script saves between the fits, the same
`validate()` loss there, and the same final state. ddpsafe 0.3.0 left the untrained weights between the fits, and the
script's `learn.save('stage-1')` then overwrote the right file.

And `distrib_ctx` never trains undistributed in silence: with accelerate's state made before it without `cpu=True`
(as accelerate's docs show), a 2-rank job fails on every rank within seconds, naming the cause, instead of training
two models."""
from __future__ import annotations
import json, shutil, subprocess, sys, time
from pathlib import Path
import pytest
from conftest import Launch, env, torchrun_cmd, needs_torchrun, tools, TORCHRUN   # noqa: F401 (`tools` is a fixture)

SCRIPT = Path(__file__).parent/'scripts'/'rerun_train.py'
pytestmark = needs_torchrun

def launch(tools, run:Path, script:str, name:str, *extra, n:int=2) -> tuple:
    "One bounded torchrun launch of `rerun_train.py` on `n` ranks: (its exit code, what each rank said)"
    run.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(run/'marks', ignore_errors=True)          # this launch's markers alone
    l = Launch([str(TORCHRUN), '--nproc_per_node', str(n), str(SCRIPT), str(run), script, *extra], run, tools, name, n=n)
    code = l.wait(240)
    return code, [said(l, r) for r in range(n)], l.output()

def said(l:Launch, r:int) -> dict:
    "Rank `r`'s markers: the state as each fit began, between the fits, and at the end"
    out = dict(fits=[], between=None, end=None)
    for line in l.marks(r):
        kind, _, rest = line.partition(' ')
        if kind == 'FIT': out['fits'].append(json.loads(rest.partition(' ')[2]))
        elif kind == 'BETWEEN': out['between'] = json.loads(rest)
        elif kind == 'RESULT': out['end'] = json.loads(rest)['end']
    return out

def check_replayed(first:list, again:list, out:str, label:str):
    "Every rank of the rerun began each fit, and saw between the fits, what the first run's did; both ranks alike"
    for r in range(len(first)):
        assert again[r]['fits'] == first[r]['fits'], f'{label}, rank {r}: the learner as each fit began differs from the first run\n{out[-3000:]}'
        assert again[r]['between'] == first[r]['between'], f'{label}, rank {r}: save/validate between the fits differ\n{out[-3000:]}'
    assert all(a['fits'] == again[0]['fits'] for a in again), f'{label}: the ranks began the fits with different states'

SCRIPTS = [('fit-save-fit', 13), ('fine_tune', 13), pytest.param('unfreeze', 13, marks=pytest.mark.slow)]   # the optimizer steps before the kill (6 in the first fit, 12 in the second): the second fit's middle
# unfreeze is slow (DDPSAFE_FULL=1): fine_tune is the same freeze, fit, unfreeze, fit, and CI's 50 minutes are spent

@pytest.mark.parametrize('script,kill', SCRIPTS, ids=['fit-save-fit', 'fine_tune', 'unfreeze'])
def test_rerun_replays_the_script(tools, tmp_path, script, kill):
    "Run to the end, then again; preempted in the second fit, then again: the same learner between the fits, the same end"
    code, first, out = launch(tools, tmp_path/'whole', script, 'first')
    assert code == 0 and all(f['end'] for f in first), out[-4000:]
    assert len(first[0]['fits']) >= 2 and first[0]['fits'][0] != first[0]['fits'][-1]   # validate() begins as a fit does: said too
    code, again, out = launch(tools, tmp_path/'whole', script, 'again')
    assert code == 0, out[-4000:]
    check_replayed(first, again, out, f'{script}, run to the end then again')
    assert [a['end'] for a in again] == [f['end'] for f in first], out[-3000:]

    code, stopped, out = launch(tools, tmp_path/'stopped', script, 'stopped', '--kill', str(kill))
    assert code != 0 and not any(s['end'] for s in stopped), f'{script}: the preemption did not stop the run\n{out[-4000:]}'
    assert 'stopping at step' in out, out[-4000:]
    code, resumed, out = launch(tools, tmp_path/'stopped', script, 'resumed')
    assert code == 0, out[-4000:]
    check_replayed(first, resumed, out, f'{script}, preempted in its second fit then again')
    assert [a['end'] for a in resumed] == [f['end'] for f in first], f'{script}: the resumed run ended elsewhere\n{out[-3000:]}'
    assert 'this fit already finished' in out

def test_rerun_with_loader_workers(tools, tmp_path):
    "The same, with fastai's DataLoaders forking 2 workers each, preempted in the second fit"
    code, first, out = launch(tools, tmp_path/'whole', 'unfreeze', 'first', '--workers', '2')
    assert code == 0, out[-4000:]
    code, _, out = launch(tools, tmp_path/'stopped', 'unfreeze', 'stopped', '--workers', '2', '--kill', '13')
    assert code != 0 and 'stopping at step' in out, out[-4000:]
    code, resumed, out = launch(tools, tmp_path/'stopped', 'unfreeze', 'resumed', '--workers', '2')
    assert code == 0, out[-4000:]
    check_replayed(first, resumed, out, 'unfreeze with loader workers')
    assert [a['end'] for a in resumed] == [f['end'] for f in first]

ACCELERATE_FIRST = """
import os, sys
from accelerate import PartialState
state = PartialState(cpu=sys.argv[1] == 'cpu')       # as accelerate's docs show: cpu=True only in the fixed script
from fastai.basics import *
from fastai.callback.progress import ProgressCallback
from fastai.distributed import *
from ddpsafe.all import *
from ddpsafe.testing import synth_learner
from ddpsafe.state.training_state import state_digest
learn = synth_learner(path=sys.argv[2], n=256)
learn.remove_cb(ProgressCallback)
with learn.distrib_ctx():
    learn.fit(1, cbs=CheckpointCallback())
os.write(1, f"WEIGHTS {os.environ['RANK']} {state_digest(learn.model.state_dict())}\\n".encode())   # one write (print makes two): two ranks share the pipe
"""

def test_partial_state_before_distrib_ctx(tools, tmp_path):
    "accelerate's `PartialState()` made before `distrib_ctx` without cpu=True: an error on every rank within seconds, not two models"
    (tmp_path/'script.py').write_text(ACCELERATE_FIRST)
    t0 = time.monotonic()
    p = subprocess.run(torchrun_cmd() + [str(tmp_path/'script.py'), 'default', str(tmp_path/'a')], env=env(tools),
                       capture_output=True, text=True, timeout=180)
    seconds, out = time.monotonic() - t0, p.stdout + p.stderr
    assert p.returncode != 0, f'the job trained and exited 0:\n{out[-3000:]}'
    for r in range(2): assert f'[rank{r}]: ddpsafe.patches.learner.NotDistributed' in out, f'rank {r} did not raise NotDistributed\n{out[-4000:]}'
    assert 'PartialState(cpu=True)' in out and 'WEIGHTS' not in out
    assert seconds < 60, f'the error took {seconds:.0f}s'
    p = subprocess.run(torchrun_cmd() + [str(tmp_path/'script.py'), 'cpu', str(tmp_path/'b')], env=env(tools),
                       capture_output=True, text=True, timeout=180)   # the fix the message names: DDP, one model
    weights = sorted(l.split()[1:] for l in p.stdout.splitlines() if l.startswith('WEIGHTS'))
    assert p.returncode == 0 and len(weights) == 2 and weights[0][1] == weights[1][1], (p.stdout + p.stderr)[-4000:]
