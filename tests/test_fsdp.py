"""Proof (issue 16, first part): FSDP2 through `learn.fsdp_ctx()`, checkpointed by `CheckpointCallback`, with real processes.

Every run is `tests/scripts/train_ckpt.py --fsdp` started on N ranks as `torchrun` would (`ddpsafe.testing.launch_ranks`),
training an MLP of about 13,000 parameters (`--model-mb 0.05`) whose weights FSDP2 shards over the ranks.

    python -m pytest tests/test_fsdp.py -s

- SIGTERM to one rank of a sharded run: every rank saves the same step and exits 75; the rerun resumes sharded and
  ends bit-identical to an uninterrupted sharded run; `ddpsafe-export` of its last checkpoint is the final weights.
- The checkpoint of epoch 2 of 4 resumed on 1 and 4 ranks, and a DDP checkpoint resumed sharded: every rank starts
  from exactly the saved weights and optimizer state, and the run finishes with equal weights on every rank.
- A sharded checkpoint of another model: an error naming the file, on every rank."""
from __future__ import annotations
import sys, shutil, subprocess, tempfile
from pathlib import Path
import pytest, torch
import safetensors.torch as st
from ddpsafe.manifest import newest_complete, checkpoint_name, check_checkpoint, read_manifest

from conftest import train_ckpt, fail_msg, batches, resumed_on
tc = train_ckpt()
BIN = Path(sys.executable).parent
N_EPOCH, MLP = 4, ('--model-mb', '0.05')
FSDP = ('--fsdp', *MLP)

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-fsdp-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)

@pytest.mark.timeout(600)
def test_sigterm_and_resume_sharded(folder):
    whole = tc.baseline(N_EPOCH, *FSDP)
    assert all(tc.same(w, whole[0]) for w in whole), 'the ranks of the uninterrupted sharded run ended apart'
    codes, outs, res = tc.run(folder, N_EPOCH, *FSDP, '--kill', 'SIGTERM:1:4')
    assert codes == [75, 75] and [o['steps'] for o in res] == [5, 5], f'exit codes {codes}\n' + fail_msg(outs)
    ck = newest_complete(folder/'checkpoints')
    assert ck.name == checkpoint_name(5) and read_manifest(ck)['reason'] == 'signal' and check_checkpoint(ck) == []
    codes, outs, res = tc.run(folder, N_EPOCH, *FSDP, '--out', folder/'w')
    assert codes == [0, 0], f'exit codes {codes}\n' + fail_msg(outs)
    assert f'ddpsafe: resumed from {ck} ' in outs[0], outs[0][-3000:]
    assert all(tc.same(w, whole[0]) for w in tc.weights(folder/'w')), 'the resumed sharded run differs from the uninterrupted one'
    last = newest_complete(folder/'checkpoints')
    ex = subprocess.run([str(BIN/'ddpsafe-export'), str(last), '--out', str(folder/'model.safetensors')], capture_output=True, text=True, timeout=120)
    assert ex.returncode == 0, ex.stdout + ex.stderr
    got = st.load_file(folder/'model.safetensors')
    assert got.keys() == whole[0].keys() and all(torch.equal(got[k], whole[0][k]) for k in got), 'the export differs from the final weights'
    print(f'\n[fsdp] SIGTERM to rank 1 after step 4: both ranks saved step 5 and exited 75; the rerun resumed sharded and ended '
          f'bit-identical to the uninterrupted sharded run; ddpsafe-export of {last.name} equals the final weights ({len(got)} tensors)')

@pytest.mark.timeout(600)
@pytest.mark.parametrize('saved, n', [('fsdp', 1), ('fsdp', 4), ('ddp', 2)])
def test_resume_on_other_ranks(folder, saved, n):
    "The checkpoint of epoch 2 of 4 (step 6), saved sharded or by DDP on 2 ranks, resumed sharded on n ranks"
    name = checkpoint_name(6)
    src = tc.baseline_run(N_EPOCH, *(FSDP if saved == 'fsdp' else MLP))['path']/'checkpoints'/name
    shutil.copytree(src, folder/'checkpoints'/name)
    codes, outs, res = resumed_on(folder, N_EPOCH, n, *FSDP)
    per, _ = batches(n)
    assert [o['steps'] for o in res] == [6 + 2*per]*n, f'steps {[o["steps"] for o in res]}, want {6 + 2*per}'
    print(f'\n[fsdp] the {saved.upper()} checkpoint of step 6 (2 ranks) resumed sharded on {n} rank(s): every rank started from its '
          f'exact weights and optimizer state and finished 2 more epochs of {per} steps, with equal weights')

@pytest.mark.timeout(300)
def test_other_model(folder):
    name = checkpoint_name(6)
    shutil.copytree(tc.baseline_run(N_EPOCH, *FSDP)['path']/'checkpoints'/name, folder/'checkpoints'/name)
    codes, outs, res = tc.run(folder, N_EPOCH, '--fsdp', '--model-mb', '0.02')
    assert codes == [1, 1], fail_msg(outs)
    for r in range(2):
        err = res[r]['error']
        assert err.startswith('CheckpointMismatch') and f'{folder/"checkpoints"/name}/model.safetensors does not fit this model' in err, f'rank {r}: {err}'
    assert check_checkpoint(folder/'checkpoints'/name) == []          # refused, not damaged
    print(f'\n[fsdp] another model: every rank raised {" ".join(res[0]["error"].split())[:300]}')
