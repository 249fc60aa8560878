"""Every resume is the user's own (issue 69): scripts as users write them, run, preempted and run again.

- A 3-fold cross-validation with a new `Learner` per fold on the default folder, through `torchrun` on 2 gloo ranks: the first
  run, the same script again, and a run preempted in the second fold then run again all leave every fold's weights, saved
  file and `validate()` loss equal to stock fastai's. ddpsafe 0.3.1 resumed folds 2 and 3 from fold 1's finished checkpoint
  and trained nothing.
- Two models of one architecture fitted one after the other (an ensemble), in one process: the second trains; preempted in
  the second, the rerun gives both models as stock fastai does.
- A plain `fit` run again with another learning rate is refused, naming both; with `accept_changes='fit'` it trains at the
  new one. Another batch size is said, with what the resume does about the position.
- A user's callback with state and no `state_dict` is named as the fit resumes.
- A roll-back left in the script (`resume=12`) is carried out once: the same command after the rolled-back run finished, or
  after it was preempted, neither crashes nor rolls back again, and loses no step."""
from __future__ import annotations
import re, json, shutil, subprocess, sys
from pathlib import Path
import pytest
from conftest import Launch, env, needs_torchrun, tools, TORCHRUN   # noqa: F401 (`tools` is a fixture)

SCRIPT = Path(__file__).parent/'scripts'/'own_resume_train.py'
TIMEOUT = 240

def said(marks:list) -> dict:
    "A rank's markers: each fold's (or model's) result, and the end"
    out = dict(folds={}, end=None)
    for line in marks:
        kind, _, rest = line.partition(' ')
        if kind == 'FOLD': k, _, js = rest.partition(' '); out['folds'][int(k)] = json.loads(js)
        elif kind == 'RESULT': out['end'] = json.loads(rest)
    return out

def saved_steps(run:Path) -> list:
    "The steps of the checkpoints in `run/checkpoints`"
    return sorted(int(p.name[5:]) for p in (run/'checkpoints').glob('step-*'))

def launch(tools, run:Path, name:str, *args, n:int=2) -> tuple:
    "One bounded `torchrun` launch of the script on `n` ranks: (exit code, what each rank said, output)"
    run.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(run/'marks', ignore_errors=True)
    l = Launch([str(TORCHRUN), '--nproc_per_node', str(n), str(SCRIPT), str(run), *args], run, tools, name, n=n)
    code = l.wait(TIMEOUT)
    return code, [said(l.marks(r)) for r in range(n)], l.output()

def alone(tools, run:Path, *args) -> tuple:
    "One bounded launch of the script in one process: (exit code, what it said, output)"
    run.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(run/'marks', ignore_errors=True)
    try: p = subprocess.run([sys.executable, str(SCRIPT), str(run), *args], capture_output=True, text=True, timeout=TIMEOUT, env=env(tools), cwd=run.parent)
    except subprocess.TimeoutExpired as e: pytest.fail(f'{args}: the process did not exit within {TIMEOUT}s\n{(e.stdout or b"")[-3000:]}')
    marks = (run/'marks'/'rank0.log').read_text().splitlines() if (run/'marks'/'rank0.log').exists() else []
    return p.returncode, said(marks), p.stdout + p.stderr

@needs_torchrun
def test_kfold_default_folder(tools, tmp_path):
    "Every fold trains in a first run; a rerun, whole or after a SIGTERM in fold 2, gives every fold as stock fastai does"
    code, stock, out = launch(tools, tmp_path/'stock', 'stock', 'kfold', '--stock')
    assert code == 0 and all(len(s['folds']) == 3 for s in stock), out[-4000:]
    assert len({s['folds'][k]['weights'] for k in range(3) for s in stock[:1]}) == 3, 'stock folds should differ'
    def same_as_stock(ranks, label, out):
        for r, (a, b) in enumerate(zip(ranks, stock)):
            assert a['folds'] == b['folds'], f'{label}, rank {r}: the folds differ from stock fastai\'s\n{a["folds"]}\n{b["folds"]}\n{out[-3000:]}'
    code, first, out = launch(tools, tmp_path/'whole', 'first', 'kfold')
    assert code == 0, out[-4000:]
    same_as_stock(first, 'first run', out)
    assert 'already finished' not in out, out[-4000:]          # 0.3.1: "this fit already finished" for folds 2 and 3
    code, again, out = launch(tools, tmp_path/'whole', 'again', 'kfold')
    assert code == 0, out[-4000:]
    same_as_stock(again, 'the same script again', out)
    assert out.count('this fit already finished') == 3, out[-4000:]   # each fold restored as it ended (rank 0 says it)

    code, stopped, out = launch(tools, tmp_path/'stopped', 'stopped', 'kfold', '--kill', '18')   # fold 1: 12 steps; fold 2's second epoch
    stop = re.search(r'stopping at step (\d+)', out)
    assert code != 0 and stop and 12 < int(stop[1]) < 24, out[-4000:]   # in fold 2, whose steps are 13 to 24 of the folder
    assert all(sorted(s['folds']) == [0] for s in stopped), out[-4000:]
    code, resumed, out = launch(tools, tmp_path/'stopped', 'resumed', 'kfold')
    assert code == 0, out[-4000:]
    same_as_stock(resumed, 'preempted in fold 2, then the same script again', out)
    assert 'resumed from' in out and out.count('this fit already finished') == 1, out[-4000:]

def test_two_learners_one_after_the_other(tools, tmp_path):
    "An ensemble of two models fitted in turn: the second trains, and a rerun after a SIGTERM in it gives both as stock fastai"
    code, stock, out = alone(tools, tmp_path/'stock', 'ensemble', '--stock')
    assert code == 0 and len(stock['folds']) == 2, out[-4000:]
    code, first, out = alone(tools, tmp_path/'run', 'ensemble')
    assert code == 0 and first['folds'] == stock['folds'], f'{first["folds"]}\n{stock["folds"]}\n{out[-3000:]}'
    code, stopped, out = alone(tools, tmp_path/'stopped', 'ensemble', '--kill', '30')   # 9 steps an epoch: the second model's second epoch
    assert code == 75 and sorted(stopped['folds']) == [0], out[-4000:]
    code, resumed, out = alone(tools, tmp_path/'stopped', 'ensemble')
    assert code == 0 and resumed['folds'] == stock['folds'], f'{resumed["folds"]}\n{stock["folds"]}\n{out[-3000:]}'

@pytest.fixture(scope='module')
def preempted(tools, tmp_path_factory) -> Path:
    "The plain script's folder, preempted at step 10 (of 27), once for the tests below: each resumes a copy"
    run = tmp_path_factory.mktemp('preempted')/'run'
    code, _, out = alone(tools, run, 'plain', '--kill', '10')
    assert code == 75, out[-4000:]
    return run

def resumable(preempted:Path, tmp_path:Path) -> Path:
    "A copy of the preempted folder, for one test to resume"
    shutil.copytree(preempted, tmp_path/'run', ignore=shutil.ignore_patterns('marks'))
    return tmp_path/'run'

def test_plain_fit_with_another_lr(tools, tmp_path, preempted):
    "A plain fit run again with another lr: refused, naming both; accepted, it trains at the new one"
    run = resumable(preempted, tmp_path)
    code, _, out = alone(tools, run, 'plain', '--lr', '0.03')
    assert code != 0 and 'CheckpointMismatch' in out and 'lr 0.01 in the checkpoint' in out and 'lr 0.03 now' in out, out[-4000:]
    code, res, out = alone(tools, run, 'plain', '--lr', '0.03', '--accept', 'fit')
    assert code == 0 and 'with the changes you accepted: fit: fit without a schedule, lr 0.01 -> fit without a schedule, lr 0.03' in out, out[-4000:]
    assert res['end']['lr'] == pytest.approx(0.03), res
    code, whole, out = alone(tools, tmp_path/'whole', 'plain')
    assert code == 0 and whole['end']['weights'] != res['end']['weights'], 'the accepted lr did not change the training'

def test_batch_size_change_said(tools, tmp_path, preempted):
    "A rerun with another batch size resumes at the same share of the epoch, and says so in one line"
    run = resumable(preempted, tmp_path)
    code, _, out = alone(tools, run, 'plain', '--bs', '16')
    lines = [l for l in out.splitlines() if 'was saved with 9 training batches of 8 an epoch per rank' in l]
    assert code == 0 and len(lines) == 1, out[-4000:]     # 72 items: 9 batches of 8, 4 of 16 (fastai drops the last, partial one)
    assert 'this run has 4 training batches of 16 an epoch' in lines[0] and ' as saved), the same share of the epoch' in lines[0], lines[0]

def test_stateful_callback_named(tools, tmp_path, preempted):
    "A user's callback with state and no state_dict is named once as the fit resumes"
    run = resumable(preempted, tmp_path)
    code, res, out = alone(tools, run, 'plain')
    assert code == 0, out[-4000:]
    assert out.count('CountBatches') == 1, out[-4000:]

def test_rollback_carried_out_once(tools, tmp_path):
    "resume=12 left in the script: the same command after the rolled-back run finished, and after it was preempted"
    run = tmp_path/'run'
    code, whole, out = alone(tools, run, 'plain')
    assert code == 0, out[-4000:]
    code, rolled, out = alone(tools, run, 'plain', '--resume', '12')
    assert code == 0 and 'resuming from' in out and 'rolled-back-step-00000027' in out, out[-4000:]   # 9 steps an epoch, 3 epochs
    assert rolled['end']['weights'] == whole['end']['weights'], 'the rolled-back run did not end as the whole one'
    code, again, out = alone(tools, run, 'plain', '--resume', '12')
    assert code == 0, f'the same command after the rolled-back run finished\n{out[-4000:]}'
    assert 'was carried out by an earlier launch' in out and 'this fit already finished' in out and 'renamed' not in out, out[-4000:]
    assert again['end']['weights'] == whole['end']['weights']
    steps = [s for s in saved_steps(run) if s > 12]
    assert sorted(p.name for p in (run/'checkpoints').glob('rolled-back-*')) == [f'rolled-back-step-{s:08d}' for s in steps], 'rolled back twice'

    run = tmp_path/'stopped'
    code, _, out = alone(tools, run, 'plain')
    assert code == 0, out[-4000:]
    code, _, out = alone(tools, run, 'plain', '--resume', '12', '--kill', '10')   # preempted in the rolled-back run's step 22
    stop = re.search(r'stopping at step (\d+)', out)
    assert code == 75 and stop and int(stop[1]) >= 22, out[-4000:]
    code, res, out = alone(tools, run, 'plain', '--resume', '12')                # the requeue: the same command
    assert code == 0 and 'was carried out by an earlier launch' in out, out[-4000:]
    assert f'resumed from {run}/checkpoints/step-{int(stop[1]):08d}' in out, f'the steps after 12 were lost\n{out[-4000:]}'
    assert res['end']['weights'] == whole['end']['weights'], 'the requeued rolled-back run ended elsewhere'
    assert not any(p.name.startswith('rolled-back-2-') for p in (run/'checkpoints').iterdir()), 'rolled back twice'
