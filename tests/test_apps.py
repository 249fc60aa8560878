"""Proof (issue 27): fastai's applications resume bit for bit under the real `torchrun`, preempted mid-epoch.

Each run is `torchrun --nproc_per_node 2 tests/scripts/apps_train.py APP RUN` (2 epochs of `fit_one_cycle` inside
`learn.distrib_ctx()`, two DataLoader workers per rank, `CheckpointCallback` from `ddpsafe.all`), for:

- vision: `ImageDataLoaders.from_folder` on PNGs this test writes, `Resize(32)`, `aug_transforms()`,
  `vision_learner(dls, resnet18, pretrained=False)` (BatchNorm, trained with `sync_bn` off on CPU); then `learn.export()`
  and `load_learner` + `predict` in a fresh process where ddpsafe is not imported;
- tabular: `tabular_learner` on a generated DataFrame with categorical and continuous columns (`Categorify`,
  `FillMissing`, `Normalize`);
- collab: `collab_learner` on generated ratings (`CollabDataLoaders.from_df`).

For each: run A, uninterrupted, to the end; run B, the same command, with SIGTERM sent to torchrun's own pid once rank 0
has logged the 1st training batch of the second epoch: every rank exits 75, torchrun 1, `ddpsafe-status` 75, and the
newest checkpoint was saved for the signal inside epoch 1; then the same command again, to the end. Stopping in the
second epoch, not the first, is what makes the test able to fail: a resume inside epoch 0 that restored no random state
and no loader position at all would still replay epoch 0 as run A drew it, from the script's `set_seed(0)`. Every tensor of the final `state_dict` (the
weights and the BatchNorm buffers) of B equals A's, on each rank, with `torch.equal`. Every launch is bounded: one that
does not end in time fails, naming the ranks that reported no result.

fastai.vision needs torchvision, which does not import beside the CPU torch of `.venv`: the vision runs use `.venv-vision`
(a torch build of torchvision's own release, and torchvision), which `tools/setup_vision.sh` creates (`tools/test.sh` runs it). Without it the vision test
fails, saying so.

    python -m pytest tests/test_apps.py -s        # about 3 minutes on 2 cores"""
from __future__ import annotations
import os, re, json, signal, subprocess
from pathlib import Path
import pytest, torch
from ddpsafe.testing import wait_until, WaitTimeout
from ddpsafe.callback.preempt import REQUEUE_EXIT_CODE
from ddpsafe.storage.manifest import newest_complete, read_manifest
from ddpsafe.patches.learner import BN_ON_CPU_NOTE
from conftest import Launch, env, status, report, ROOT, BIN

SCRIPT = ROOT/'tests'/'scripts'/'apps_train.py'
VISION_BIN = ROOT/'.venv-vision'/'bin'
BATCHES = dict(vision=6, tabular=12, collab=15)     # training batches of each rank in an epoch
def signal_after(app:str) -> int: return BATCHES[app] + 1   # rank 0's batches done when torchrun gets SIGTERM: inside epoch 1

def bin_for(app:str) -> Path:
    "The folder of the torchrun and python that run `app`: `.venv-vision`'s for vision, else this one's"
    if app != 'vision': return BIN
    if not (VISION_BIN/'torchrun').exists():
        pytest.fail(f'{VISION_BIN}/torchrun is missing: the vision test runs fastai.vision with torchvision in .venv-vision. '
                    'Create it with `bash tools/setup_vision.sh` (about 90 s and 5 GB: torch and torchvision of one release)', pytrace=False)
    return VISION_BIN

def command(app:str, run:Path, *extra) -> list:
    return [str(bin_for(app)/'torchrun'), '--nproc_per_node', '2', str(SCRIPT), app, str(run), '--marks', str(run/'marks'),
            '--out', str(run/'w'), *map(str, extra)]

def write_images(folder:Path, n:int=64, size=(40, 36)):
    "`n` PNGs in `folder/dark/` and `folder/light/`: noise around two brightness levels, the same every time"
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for i in range(n):
        label = ('dark', 'light')[i % 2]
        (folder/label).mkdir(parents=True, exist_ok=True)
        px = rng.normal(80 if label == 'dark' else 170, 40, (size[1], size[0], 3)).clip(0, 255).astype('uint8')
        Image.fromarray(px).save(folder/label/f'{i:03d}.png')

def final_state(run:Path) -> list: return [torch.load(f'{run}/w.rank{r}', weights_only=True) for r in range(2)]

def differences(a:dict, b:dict) -> list:
    "The names of the tensors that are not bit-identical in state dicts `a` and `b` (or that one lacks)"
    return sorted(set(a) ^ set(b)) + [k for k in a if k in b and not torch.equal(a[k], b[k])]

def finished(l:Launch, timeout:float=240) -> Launch:
    "`l`, after it ended with exit code 0 on every rank"
    code = l.wait(timeout)
    assert code == 0 and [r and r['code'] for r in l.results()] == [0]*l.n, f'{l.name}: exit {code}\n{l.output()[-4000:]}'
    return l

def steps(l:Launch) -> int:
    "Training batches rank 0 has logged in `l`'s run folder so far (its marker file: the ranks' output lines can interleave)"
    return sum(m.startswith('STEP ') for m in l.marks(0))

def stop_and_resume(tools, tmp_path:Path, app:str, *extra) -> tuple:
    "Run A to the end; run B, SIGTERM to torchrun inside epoch 1, check the stop, run B again to the end; compare"
    whole = finished(Launch(command(app, tmp_path/'whole', *extra), tmp_path/'whole', tools, 'whole'))
    assert steps(whole) == 2*BATCHES[app], f'{app}: rank 0 trained {steps(whole)} batches in 2 epochs, not 2x{BATCHES[app]}'
    run = tmp_path/'run'
    l = Launch(command(app, run, *extra, '--slow', 0.3), run, tools, 'preempted')
    mark = f'STEP {signal_after(app)}'
    try: wait_until(lambda: mark in l.marks(0) or l.proc.poll() is not None, 240, mark, rank=0, every=0.02)
    except WaitTimeout: l.kill(); pytest.fail(f'{app}: rank 0 never logged {mark}\n{l.output()[-4000:]}')
    os.kill(l.proc.pid, signal.SIGTERM)                  # torchrun's own pid, as Kubernetes and SLURM signal the launcher
    code = l.wait(120)
    res, before = l.results(), steps(l)
    assert [r and r['code'] for r in res] == [REQUEUE_EXIT_CODE]*2 and [r['stopped_by'] for r in res] == ['signal']*2, \
        f'{app}: rank results {res}, torchrun exit {code}\n{l.output()[-4000:]}'
    assert code == 1, f'torchrun exited {code}: it exits 1 after a forwarded SIGTERM'
    assert 'killed by signal' not in l.output() and 'exited unexpectedly' not in l.output(), l.output()[-4000:]
    ck = newest_complete(run/'checkpoints')
    assert ck is not None, f'{app}: no complete checkpoint in {run/"checkpoints"} after the stop'
    man = read_manifest(ck)
    assert (man['reason'], man['epoch'], man['epoch_done']) == ('signal', 1, False), f'{app}: not saved for the signal inside epoch 1: {man}'
    assert status(tools, run/'checkpoints') == REQUEUE_EXIT_CODE
    again = finished(Launch(command(app, run, *extra), run, tools, 'resumed'))
    assert status(tools, run/'checkpoints') == 0
    assert 0 < steps(again) - before < steps(whole), f'{app}: the rerun trained {steps(again) - before} batches, run A {steps(whole)}: no resume?'
    report(app=app, stopped_at=dict(epoch=man['epoch'], step=man['step']), seconds=[whole.seconds, l.seconds, again.seconds])
    for r, (a, b) in enumerate(zip(final_state(tmp_path/'whole'), final_state(run))):
        assert not (diff := differences(a, b)), f'{app}, rank {r}: the resumed run ends with other tensors than the uninterrupted one: {diff}'
    return whole, l, again

@pytest.mark.timeout(600)
def test_vision(tools, tmp_path):
    "resnet18 with BatchNorm, `aug_transforms`, random crops in the workers; then export, and predict in a fresh process"
    bin_for('vision')
    for run in ['whole', 'run']: write_images(tmp_path/run/'images')
    whole, _, again = stop_and_resume(tools, tmp_path, 'vision', '--export')
    for l in [whole, again]:
        notes = l.output().count(BN_ON_CPU_NOTE)
        assert notes == 1, f'{l.name}: the note on sync_bn was printed {notes} times, not once (rank 0)\n{l.output()[-3000:]}'
    probs = [json.loads(m[6:]) for m in again.marks(0) if m.startswith('PROBS ')]
    image = sorted((tmp_path/'run'/'images').rglob('*.png'))[0]
    try: out = subprocess.run([str(VISION_BIN/'python'), str(SCRIPT), 'predict', str(tmp_path/'run'/'export.pkl'), str(image)],
                              capture_output=True, text=True, timeout=120, env=env(tools))
    except subprocess.TimeoutExpired: pytest.fail('load_learner + predict in a fresh process did not end within 120s')
    fresh = [json.loads(l[6:]) for l in out.stdout.splitlines() if l.startswith('PROBS ')]
    assert out.returncode == 0 and fresh, f'predict in a fresh process failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}'
    assert probs and fresh[0] == probs[-1], f'the fresh process predicts {fresh[0]}, the trained learner {probs}'

@pytest.mark.timeout(420)
def test_tabular(tools, tmp_path):
    "Categorical and continuous columns, missing values; BatchNorm in the model"
    stop_and_resume(tools, tmp_path, 'tabular')

@pytest.mark.slow   # a tabular model with embeddings: test_tabular runs the same loaders and resume in CI
@pytest.mark.timeout(420)
def test_collab(tools, tmp_path):
    "Users, films and ratings; embeddings with biases"
    stop_and_resume(tools, tmp_path, 'collab')

# ---------------------------------------------------------------------------------------------------------------
# The landing page's script, as written, through the requeue recipe

def landing_script() -> str:
    "The `train.py` the landing page (nbs/index.ipynb) shows, exactly as a reader copies it"
    nb = json.loads((ROOT/'nbs'/'index.ipynb').read_text())
    for c in nb['cells']:
        if c['cell_type'] == 'markdown' and '# train.py' in (src := ''.join(c['source'])):
            return re.search(r'```python\n(# train\.py\n.*?)```', src, re.S).group(1)
    pytest.fail('nbs/index.ipynb shows no `# train.py` script', pytrace=False)

PREPARE = '''
import sys, numpy as np, torch, torchvision
from pathlib import Path
from PIL import Image
from torch.hub import get_dir
data, n_train, n_valid = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
for split, n in (('train', n_train), ('valid', n_valid)):         # MNIST_SAMPLE's layout: train/3, train/7, valid/3, valid/7
    for i in range(n):
        label = ('3', '7')[i % 2]
        (data/split/label).mkdir(parents=True, exist_ok=True)
        px = rng.normal(70 if label == '3' else 180, 40, (28, 28)).clip(0, 255).astype('uint8')
        Image.fromarray(px, mode='L').save(data/split/label/f'{i:04d}.png')
# the "pretrained" weights, in torch hub's cache where torchvision looks before downloading: random ones, made here
url = torchvision.models.ResNet18_Weights.DEFAULT.url
dest = Path(get_dir())/'checkpoints'/url.rsplit('/', 1)[1]
dest.parent.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0); torch.save(torchvision.models.resnet18().state_dict(), dest)
'''

@pytest.mark.timeout(600)
def test_landing_script_through_requeue(tools, tmp_path):
    "The landing page's train.py, as written, under examples/requeue.sh with torchrun; SIGTERM to torchrun: requeued, resumed, finished"
    bin_for('vision')
    job = tmp_path/'job'                                 # the working directory, as a user's job folder
    job.mkdir()
    script = landing_script()
    assert 'untar_data, URLs.MNIST_SAMPLE' in script and "path='.'" in script, script
    (job/'train.py').write_text(script)
    # nothing can be downloaded here: fastai's data folder and torch hub's cache already hold what the script asks for
    extra = dict(FASTAI_HOME=tmp_path/'fastai', TORCH_HOME=tmp_path/'torch')
    prep = subprocess.run([str(VISION_BIN/'python'), '-c', PREPARE, str(tmp_path/'fastai'/'data'/'mnist_sample'), '320', '64'],
                          capture_output=True, text=True, timeout=120, env=env(tools, **extra))
    assert prep.returncode == 0, prep.stderr[-3000:]
    vision_tools = dict(tools, PATH=f'{VISION_BIN}:{tools["PATH"]}')   # torchrun and ddpsafe-status of .venv-vision
    l = Launch(['bash', str(ROOT/'examples'/'requeue.sh'), 'checkpoints', 'torchrun', '--nproc_per_node', '2', 'train.py'],
               job/'run', vision_tools, 'loop', MAX_RUNS=3, **extra)
    try: wait_until(lambda: newest_complete(job/'checkpoints') is not None or l.proc.poll() is not None, 300, 'a first checkpoint', rank=0, every=0.05)
    except WaitTimeout: l.kill(); pytest.fail(f'no checkpoint in {job/"checkpoints"} after 300 s\n{l.output()[-4000:]}')
    assert l.proc.poll() is None, f'the loop ended before the signal:\n{l.output()[-4000:]}'
    torchrun = int(subprocess.run(['pgrep', '-P', str(l.proc.pid)], capture_output=True, text=True).stdout.split()[0])
    os.kill(torchrun, signal.SIGTERM)                    # as a scheduler preempts the job: the launcher's own pid
    code = l.wait(400)
    out = l.output()
    runs = re.findall(r'requeue.sh: run (\d+): launcher exit (-?\d+), ddpsafe-status (\d+)', out)
    report(launch='landing script, requeue.sh + torchrun', loop_exit=code, runs=runs, seconds=l.seconds)
    assert code == 0 and [(r, s) for r, _, s in runs] == [('1', str(REQUEUE_EXIT_CODE)), ('2', '0')], (code, runs, out[-4000:])
    assert f'ddpsafe: checkpoints in {job/"checkpoints"}' in out, out[-4000:]        # rank 0 says where, and it is where the loop looks
    assert 'ddpsafe: resumed from' in out and 'requeue.sh: finished' in out, out[-4000:]
    assert status(tools, job/'checkpoints') == 0 and read_manifest(newest_complete(job/'checkpoints'))['finished']
