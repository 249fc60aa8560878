"""Proof (issue 4): `CheckpointCallback` resumes bit for bit, refuses what it must refuse, rotates on rank 0 alone, and
survives a full disk.

Every run here is `tests/scripts/train_ckpt.py` started on N ranks as `torchrun` would (`ddpsafe.testing.launch_ranks`),
with a harness timeout that turns a hang into `RanksFailed`, and `pytest.mark.timeout` as a backstop.

    python -m pytest tests/test_checkpoint.py -s                  # short: the stop points listed below (~2 min idle)
    DDPSAFE_FULL=1 python -m pytest tests/test_checkpoint.py -s   # also the tests marked slow: more stop points, 4 ranks

The synthetic run: 48 training items, batch size 8, 2 ranks -> 3 optimizer steps per epoch per rank; 4 epochs -> 12 steps.
A stop requested after step g (switch file created, or a signal raised, in step g's `after_batch`) is agreed one
step late: every rank saves step g+1 and stops."""
from __future__ import annotations
import os, sys, shutil, subprocess, tempfile, importlib.util
from pathlib import Path
import pytest
from ddpsafe.storage.manifest import checkpoints, checkpoint_step, newest_complete, check_checkpoint, read_manifest, checkpoint_name, MANIFEST
from ddpsafe.callback.preempt import REQUEUE_EXIT_CODE
from ddpsafe.callback.interval import LAUNCHES, COUNTERS
HISTORY = (LAUNCHES, COUNTERS)   # the launch history the callback keeps beside the checkpoints (`ddpsafe-goodput` reads it)

from conftest import train_ckpt, fail_msg, batches, resumed_on
tc = train_ckpt()
BIN = Path(sys.executable).parent
N_EPOCH, STEPS = 4, 12          # one_cycle / fit: 4 epochs of 3 steps; fine_tune(3, freeze_epochs=1): 3 + 9 steps

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-ckpt-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)

def cli(cmd:str, path) -> subprocess.CompletedProcess:
    "Run an installed command (`ddpsafe-ls`, `ddpsafe-verify`) on `path`"
    return subprocess.run([str(BIN/cmd), str(path)], capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------------------------------------------------
# Resume after stopping at several steps: final weights equal the uninterrupted run's, bit for bit, on both ranks

def stop_args(stop:tuple) -> list:
    "('touch', g): create stop-now after step g; ('kill', r, g): SIGTERM to rank r after step g"
    return ['--touch', f'stop-now:{stop[1]}'] if stop[0] == 'touch' else ['--kill', f'SIGTERM:{stop[1]}:{stop[2]}']

def run_chain(folder, fit:str, stops:list, n_epoch:int=N_EPOCH) -> list:
    "Stop at each of `stops` in turn, resuming each time, then resume to the end; every rank's final weights"
    path, log = folder/'run', []
    for stop in stops:
        g = stop[-1]
        codes, outs, res = tc.run(path, n_epoch, '--fit', fit, *stop_args(stop))
        want = 0 if stop[0] == 'touch' else REQUEUE_EXIT_CODE
        assert codes == [want, want], f'stop {stop}: exit codes {codes}\n' + fail_msg(outs)
        assert [o['steps'] for o in res] == [g+1, g+1], f'stop {stop}: stopped at {[o["steps"] for o in res]}, not {g+1}\n' + fail_msg(outs)
        ck = newest_complete(path/'checkpoints')
        assert ck.name == checkpoint_name(g+1) and check_checkpoint(ck) == []
        m = read_manifest(ck)
        assert m['reason'] == ('switch' if stop[0] == 'touch' else 'signal')
        log.append(f'step {g+1} (epoch {m["epoch"]}, batch {m["iter"]}/3, {stop[0]}, exit {want})')
    codes, outs, res = tc.run(path, n_epoch, '--fit', fit, '--out', folder/'w')
    assert codes == [0, 0], fail_msg(outs)
    assert 'ddpsafe: resumed from' in outs[0]
    print(f'\n[resume] {fit}: stopped at ' + ', '.join(log))
    return tc.weights(folder/'w')

# (fit, stops): the stop at step g+1 is asked for after step g, by the stop switch ('touch', g) or SIGTERM to rank r ('kill', r, g)
SHORT_CHAINS = [('one_cycle', [('touch', 2), ('kill', 1, 6)]),    # stops at 3: last batch of epoch 0 (an epoch boundary);
                ('fit', [('kill', 0, 4)])]                         # 7: first batch of epoch 2, asked before epoch 1's validation; 5: mid-epoch
FULL_CHAINS = [('one_cycle', [('kill', 1, 1), ('touch', 4), ('kill', 0, 8), ('touch', 11)]),   # 2, 5, 9, 12 (the last step)
               ('one_cycle', [('kill', 1, 3), ('kill', 0, 10)]),                                # 4, 11
               ('fit', [('touch', 1), ('kill', 1, 5), ('kill', 0, 9)])]                         # 2, 6, 10

@pytest.mark.timeout(420)
@pytest.mark.parametrize('fit,stops', SHORT_CHAINS + [pytest.param(*c, marks=[pytest.mark.slow, pytest.mark.timeout(900)]) for c in FULL_CHAINS],
                         ids=lambda o: o if isinstance(o, str) else 'stops-' + '-'.join(str(s[-1]+1) for s in o))
def test_resume_bit_identical(folder, fit, stops):
    whole = tc.baseline(N_EPOCH, '--fit', fit)
    resumed = run_chain(folder, fit, stops)
    assert all(tc.same(w, whole[0]) for w in resumed + whole[1:]), 'resumed run differs from the uninterrupted one'
    print(f'[resume] {fit}: {len(stops)} stops, both ranks bit-identical to the uninterrupted run')

@pytest.mark.timeout(600)
def test_resume_fine_tune_first_fit(folder):
    "fine_tune = fit 0 (frozen, 1 epoch) + fit 1 (3 epochs): a stop in fit 0 resumes fit 0, then runs fit 1"
    whole = tc.baseline(3, '--fit', 'fine_tune')
    resumed = run_chain(folder, 'fine_tune', [('kill', 1, 1)], n_epoch=3)
    assert all(tc.same(w, whole[0]) for w in resumed), 'resumed fine_tune differs from the uninterrupted one'

@pytest.mark.timeout(600)
def test_resume_fine_tune_second_fit(folder):
    "A stop in fit 1 of fine_tune: the resumed script must skip fit 0 and resume fit 1"
    whole = tc.baseline(3, '--fit', 'fine_tune')
    resumed = run_chain(folder, 'fine_tune', [('kill', 0, 7)], n_epoch=3)
    assert all(tc.same(w, whole[0]) for w in resumed), 'resumed fine_tune differs from the uninterrupted one'

@pytest.mark.timeout(300)
def test_stop_switch_ends_fine_tune(folder):
    codes, outs, res = tc.run(folder, 3, '--fit', 'fine_tune', '--touch', 'stop-now:1')
    assert codes == [0, 0], fail_msg(outs)
    print(f'\n[stop-now in fine_tune fit 0] steps trained: {[o["steps"] for o in res]}, fits started: {[o["fits"] for o in res]}')
    assert [o['steps'] for o in res] == [2, 2], 'the run trained on after stop-now'
    assert all('FIT 1 START' not in o for o in outs), "fine_tune's second fit ran after stop-now"

# ---------------------------------------------------------------------------------------------------------------
# Damaged checkpoints: skipped by resume with a warning, flagged by ddpsafe-verify and ddpsafe-ls

def flip_byte(f:Path, at:int=-100):
    b = bytearray(f.read_bytes()); b[at] ^= 0xFF; f.write_bytes(bytes(b))

def damage(ck:Path, kind:str) -> str:
    "Damage checkpoint `ck` ('flip': one byte of the weights, 'delete': the optimizer file, 'no-manifest'); what verify must say"
    if kind == 'flip': flip_byte(ck/'model.safetensors'); return f'{ck}/model.safetensors: checksum differs'
    if kind == 'delete': (ck/'optimizer.pt').unlink(); return f'{ck}/optimizer.pt: listed in the manifest, missing on disk'
    (ck/MANIFEST).unlink(); return f'{ck}: no {MANIFEST}'

def damaged_resume(folder, kinds:dict, resume_step:int):
    """Copy the uninterrupted run's checkpoints (steps 3, 6, 9, 12), damage some (step -> kind); ddpsafe-verify must flag each,
    ddpsafe-ls show it, resume skip it with a warning on every rank and take `resume_step`, and end bit-identical"""
    whole = tc.baseline(N_EPOCH, '--fit', 'one_cycle')
    root = folder/'run'/'checkpoints'
    shutil.copytree(tc.baseline_run(N_EPOCH, '--fit', 'one_cycle')['path']/'checkpoints', root)
    assert [p.name for p in checkpoints(root)] == [checkpoint_name(s) for s in (3, 6, 9, 12)]
    damaged = {root/checkpoint_name(s): damage(root/checkpoint_name(s), k) for s, k in kinds.items()}

    v = cli('ddpsafe-verify', root)
    assert v.returncode != 0 and 'Traceback' not in v.stderr, v.stdout + v.stderr
    for ck, msg in damaged.items():
        assert msg in v.stdout, f'ddpsafe-verify does not name {msg!r}:\n{v.stdout}'
        one = cli('ddpsafe-verify', ck)
        assert one.returncode != 0 and msg in one.stdout, one.stdout + one.stderr
    assert cli('ddpsafe-verify', root/checkpoint_name(resume_step)).returncode == 0

    ls = cli('ddpsafe-ls', root)
    assert ls.returncode == 0, ls.stderr
    status = {l.split()[0]: l for l in ls.stdout.splitlines()[1:]}
    for s, k in kinds.items():
        line = status[checkpoint_name(s)]
        # ddpsafe-ls checks sizes only (documented): a flipped byte of the same size shows as 'complete' there
        if k != 'flip': assert ('incomplete' if k == 'no-manifest' else 'corrupt') in line.split(), ls.stdout
    print(f'\n[damaged] {kinds}: ddpsafe-verify exit {v.returncode}, names every damaged file; ddpsafe-ls:\n{ls.stdout}')

    codes, outs, res = tc.run(folder/'run', N_EPOCH, '--out', folder/'w')
    assert codes == [0, 0], fail_msg(outs)
    for r, o in enumerate(outs):
        for ck, msg in damaged.items():
            assert f'skipping checkpoint {ck}' in o and msg in o, f'rank {r} did not warn about {ck}:\n{o[-3000:]}'
    assert f'ddpsafe: resumed from {root/checkpoint_name(resume_step)} ' in outs[0], outs[0][-3000:]
    assert all(tc.same(w, whole[0]) for w in tc.weights(folder/'w')), 'resumed run differs from the uninterrupted one'
    print(f'[damaged] resume warned about {sorted(checkpoint_step(p) for p in damaged)} on both ranks, took step {resume_step}, '
          'ended bit-identical to the uninterrupted run')

@pytest.mark.timeout(600)
def test_damaged_checkpoints(folder):
    damaged_resume(folder, {12: 'flip', 9: 'delete'}, resume_step=6)

@pytest.mark.timeout(600)
def test_checkpoint_without_manifest(folder):
    damaged_resume(folder, {12: 'no-manifest'}, resume_step=9)

# ---------------------------------------------------------------------------------------------------------------
# A checkpoint from another world size resumes from exactly its weights and optimizer state, and the run finishes

@pytest.mark.timeout(600)
@pytest.mark.parametrize('n', [1, pytest.param(4, marks=pytest.mark.slow)])   # 4 ranks on 2 cores: slow; 1 is another world size too
def test_other_world_size(folder, n):
    "The checkpoint of epoch 2 of 4, saved on 2 ranks (3 steps an epoch), resumed on n ranks"
    name = checkpoint_name(6)
    shutil.copytree(tc.baseline_run(N_EPOCH, '--fit', 'one_cycle')['path']/'checkpoints'/name, folder/'checkpoints'/name)
    codes, outs, res = resumed_on(folder, N_EPOCH, n)
    per, _ = batches(n)
    assert [o['steps'] for o in res] == [6 + 2*per]*n, f'steps {[o["steps"] for o in res]}, want {6 + 2*per}'
    last = newest_complete(folder/'checkpoints')
    assert checkpoint_step(last) == 6 + 2*per and read_manifest(last)['world_size'] == n and check_checkpoint(last) == []
    print(f'\n[world size] 2-rank checkpoint of step 6 resumed on {n} rank(s): every rank started from its exact weights and '
          f'optimizer state, trained 2 epochs of {per} steps, replicas equal; rank 0 said: {outs[0].split("this run has")[1].splitlines()[0][:300]}')

@pytest.mark.timeout(600)
@pytest.mark.parametrize('n', [1, pytest.param(4, marks=pytest.mark.slow)])   # 4 ranks on 2 cores: slow
def test_other_world_size_mid_epoch(folder, n):
    "Stopped on 2 ranks at step 4 (epoch 1, after batch 1 of 3), resumed on n ranks at the same fraction of the epoch"
    codes, outs, res = tc.run(folder, N_EPOCH, '--touch', 'stop-now:3')
    assert codes == [0, 0] and [o['steps'] for o in res] == [4, 4], f'exit codes {codes}\n' + fail_msg(outs)
    codes, outs, res = resumed_on(folder, N_EPOCH, n)
    per, n_len = batches(n); at = -(-n_len // 3)      # batch 1 of 3, rounded up to a batch of this run
    assert f'at epoch 1, after training batch {at} of {n_len} (step 4)' in outs[0], outs[0][-3000:]
    assert [o['steps'] for o in res] == [4 + max(per - at, 0) + 2*per]*n, f'steps {[o["steps"] for o in res]}'
    print(f'\n[world size] stopped on 2 ranks after batch 1 of 3, resumed on {n} after batch {at} of {n_len}; finished')

@pytest.mark.timeout(300)
def test_other_model(folder):
    tc.baseline(N_EPOCH, '--fit', 'one_cycle')
    shutil.copytree(tc.baseline_run(N_EPOCH, '--fit', 'one_cycle')['path']/'checkpoints', folder/'checkpoints')
    ck = folder/'checkpoints'/checkpoint_name(STEPS)
    codes, outs, res = tc.run(folder, N_EPOCH, '--model-mb', '0.01')
    assert codes == [1, 1], fail_msg(outs)
    for r in range(2):
        err = res[r]['error']
        assert err.startswith('CheckpointMismatch') and f'{ck}/model.safetensors does not fit this model' in err, f'rank {r}: {err}'
    print(f'\n[other model] every rank raised {" ".join(res[0]["error"].split())[:300]}')

# ---------------------------------------------------------------------------------------------------------------
# keep=2: the newest 2 complete checkpoints and the best remain; rank 0 alone deletes

@pytest.mark.timeout(300)
def test_keep(folder):
    codes, outs, res = tc.run(folder, N_EPOCH, '--every-steps', '1', '--keep', '2', '--best-max', '--trace-fs')
    assert codes == [0, 0], fail_msg(outs)
    names = res[0]['metric_names']
    vl = [row[names.index('valid_loss')] for row in res[0]['values']]
    best = 3*(max(range(len(vl)), key=lambda e: vl[e]) + 1)          # --best-max: the epoch with the highest valid_loss
    want = sorted({STEPS-1, STEPS, best})
    left = sorted(p.name for p in (folder/'checkpoints').iterdir() if p.name not in HISTORY)
    assert left == [checkpoint_name(s) for s in want], f'left {left}, want steps {want} (valid_loss by epoch {vl})'
    assert all(check_checkpoint(folder/'checkpoints'/checkpoint_name(s)) == [] for s in want)
    rm = [[l for l in o.splitlines() if l.startswith('RMTREE')] for o in outs]
    assert rm[0] and not rm[1], f'deletions by rank: {[len(x) for x in rm]}\n{rm[1][:5]}'
    assert 'Error' not in outs[1] and 'Traceback' not in outs[1], outs[1][-3000:]
    saves = sum(1 for l in outs[0].splitlines() if l.startswith('SAVE-END') and l.split()[3] == 'saved')
    print(f'\n[keep=2] {saves} saves; left {left} (newest 2 + best at step {best}); '
          f'rank 0 deleted {len(rm[0])} folders, rank 1 none, no error on rank 1')

# ---------------------------------------------------------------------------------------------------------------
# A full disk during a save: raised on every rank within seconds, the previous checkpoint intact, no temporary folder

@pytest.mark.timeout(300)
def test_full_disk(tmpfs):
    small_disk = tmpfs('10m')
    # an MLP of ~2 MB: a checkpoint is ~6 MB (weights + Adam's two moments), so step 1's fits in 10 MB and step 2's does not
    codes, outs, res = tc.run(small_disk, N_EPOCH, '--model-mb', '2', '--every-steps', '1', '--keep', '1')
    assert codes == [1, 1], f'exit codes {codes}\n' + fail_msg(outs)
    root = small_disk/'checkpoints'
    for r in range(2):
        begins = {int(s): float(t) for s, why, t in tc.markers(outs[r], 'SAVE-BEGIN')}
        err = res[r]['error'] or ''
        assert max(begins) == 2, f'rank {r}: {err}, saves begun {sorted(begins)}'
        assert res[r]['error_time'] - begins[2] < 10, f'rank {r} raised {res[r]["error_time"] - begins[2]:.1f}s after the save began'
        assert 'No space left on device' in err and f'could not write checkpoint {root/checkpoint_name(2)}' in err, f'rank {r}: {err}'
    assert res[0]['error'] == res[1]['error'], [o['error'] for o in res]
    assert abs(res[0]['error_time'] - res[1]['error_time']) < 5
    assert sorted(p.name for p in root.iterdir() if p.name not in HISTORY) == [checkpoint_name(1)], f'left behind: {sorted(p.name for p in root.iterdir())}'
    assert check_checkpoint(root/checkpoint_name(1)) == [] and newest_complete(root).name == checkpoint_name(1)
    assert cli('ddpsafe-verify', root).returncode == 0
    print(f'\n[full disk] both ranks raised within {abs(res[0]["error_time"]-res[1]["error_time"]):.2f}s of each other, '
          f'{res[0]["error_time"]-begins[2]:.2f}s after the save of step 2 began: {res[0]["error"]!r}; '
          'step 1 intact and verifies, no temporary folder')
