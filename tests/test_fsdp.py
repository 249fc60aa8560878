"""Proof (issue 16, first part): FSDP2 through `learn.fsdp_ctx()`, checkpointed by `CheckpointCallback`, with real processes.

Every run is `tests/scripts/train_ckpt.py --fsdp` started on N ranks as `torchrun` would (`ddpsafe.testing.launch_ranks`),
training an MLP of about 13,000 parameters (`--model-mb 0.05`) whose weights FSDP2 shards over the ranks.

    python -m pytest tests/test_fsdp.py -s

- SIGTERM to one rank of a sharded run: every rank saves the same step and exits 75; the rerun resumes sharded and
  ends bit-identical to an uninterrupted sharded run; `ddpsafe-export` of its last checkpoint is the final weights.
- The checkpoint of epoch 2 of 4 resumed on 1 and 4 ranks, and a DDP checkpoint resumed sharded: every rank starts
  from exactly the saved weights and optimizer state, and the run finishes with equal weights on every rank.
- A sharded checkpoint of another model: an error naming the file, on every rank.
- Checkpoints in shards: each rank's file holds its own pieces of every tensor; kill -9 of one rank while the shards of a
  checkpoint are written leaves the previous checkpoint, which verifies and resumes, and a temporary folder that no resume
  reads; a missing or changed shard file is named by `ddpsafe-verify` and by the warning of every rank, which resumes
  from the checkpoint before, and `ddpsafe-export` refuses it."""
from __future__ import annotations
import sys, time, signal, shutil, subprocess, tempfile
from pathlib import Path
import pytest, torch
import safetensors.torch as st
from ddpsafe.storage.manifest import newest_complete, checkpoint_name, check_checkpoint, read_manifest, checkpoints, MANIFEST
from ddpsafe.state.sharded import read_shard_index
from ddpsafe.callback.preempt import REQUEUE_EXIT_CODE

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
@pytest.mark.parametrize('mode', ['sync', 'async'])
def test_sigterm_and_resume_sharded(folder, mode):
    whole = tc.baseline(N_EPOCH, *FSDP)
    assert all(tc.same(w, whole[0]) for w in whole), 'the ranks of the uninterrupted sharded run ended apart'
    saving = ('--async-save',) if mode == 'async' else ()
    codes, outs, res = tc.run(folder, N_EPOCH, *FSDP, *saving, '--kill', 'SIGTERM:1:4')
    assert codes == [REQUEUE_EXIT_CODE]*2 and [o['steps'] for o in res] == [5, 5], f'exit codes {codes}\n' + fail_msg(outs)
    ck = newest_complete(folder/'checkpoints')
    assert ck.name == checkpoint_name(5) and read_manifest(ck)['reason'] == 'signal' and check_checkpoint(ck) == []
    assert {'__0_0.distcp', '__1_0.distcp', '.metadata'} <= set(read_manifest(ck)['files']), f'{ck} is not in shards'
    codes, outs, res = tc.run(folder, N_EPOCH, *FSDP, *saving, '--out', folder/'w')
    assert codes == [0, 0], f'exit codes {codes}\n' + fail_msg(outs)
    assert f'ddpsafe: resumed from {ck} ' in outs[0], outs[0][-3000:]
    assert all(tc.same(w, whole[0]) for w in tc.weights(folder/'w')), 'the resumed sharded run differs from the uninterrupted one'
    last = newest_complete(folder/'checkpoints')
    ex = subprocess.run([str(BIN/'ddpsafe-export'), str(last), '--out', str(folder/'model.safetensors')], capture_output=True, text=True, timeout=120)
    assert ex.returncode == 0, ex.stdout + ex.stderr
    got = st.load_file(folder/'model.safetensors')
    assert got.keys() == whole[0].keys() and all(torch.equal(got[k], whole[0][k]) for k in got), 'the export differs from the final weights'
    print(f'\n[fsdp {mode}] SIGTERM to rank 1 after step 4: both ranks saved step 5 in shards and exited 75; the rerun resumed sharded and ended '
          f'bit-identical to the uninterrupted sharded run; ddpsafe-export of {last.name} equals the final weights ({len(got)} tensors)')

@pytest.mark.timeout(600)
@pytest.mark.parametrize('saved, n', [('fsdp', 1), pytest.param('fsdp', 4, marks=pytest.mark.slow), ('ddp', 2)])   # 4 ranks on 2 cores: slow; 1 reshards too
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
        assert err.startswith('CheckpointMismatch') and f'{folder/"checkpoints"/name}/.metadata does not fit this model' in err, f'rank {r}: {err}'
    assert check_checkpoint(folder/'checkpoints'/name) == []          # refused, not damaged
    print(f'\n[fsdp] another model: every rank raised {" ".join(res[0]["error"].split())[:300]}')

# ---------------------------------------------------------------------------------------------------------------
# Checkpoints in shards: what each rank writes, a rank killed while writing, damaged shard files

def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN/args[0]), *map(str, args[1:])], capture_output=True, text=True, timeout=120)

def test_each_rank_writes_its_shards():
    ck = tc.baseline_run(N_EPOCH, *FSDP)['path']/'checkpoints'/checkpoint_name(6)
    files = read_manifest(ck)['files']
    assert sorted(files) == ['.metadata', '__0_0.distcp', '__1_0.distcp', 'optimizer.pt', 'rng.pt', 'state.pt'], sorted(files)
    index = read_shard_index(ck)
    whole = {k: v.size.numel() * v.properties.dtype.itemsize for k, v in index.state_dict_metadata.items()}
    held = {0: 0, 1: 0}
    for idx, info in index.storage_data.items():        # which file holds which rows of which tensor
        r = int(info.relative_path.split('_')[2])
        size = index.state_dict_metadata[idx.fqn].size
        if len(size) and size[0] > 1:                     # a sharded tensor: rank r holds rows [r*n/2, (r+1)*n/2)
            half = -(-size[0] // 2)
            assert idx.offset[0] == r*half, f'{info.relative_path} holds rows from {idx.offset[0]} of {idx.fqn}, not rank {r}\'s'
            held[r] += info.length
    total = sum(whole.values())
    for r in (0, 1): assert 0.4*total < held[r] < 0.6*total, f'rank {r} holds {held[r]} of {total} bytes of sharded tensors'
    print(f'\n[shards] step 6 of the 2-rank sharded run ({total} bytes of weights and optimizer state): '
          f'__0_0.distcp {files["__0_0.distcp"]["size"]} bytes, __1_0.distcp {files["__1_0.distcp"]["size"]} bytes, '
          f'.metadata {files[".metadata"]["size"]} bytes; each holds its own rows of every tensor')

@pytest.mark.timeout(600)
def test_kill9_while_shards_written(folder):
    whole = tc.baseline(N_EPOCH, *FSDP)
    root = folder/'checkpoints'
    procs = tc.launch(folder, N_EPOCH, *FSDP, '--stall-shards', '6')
    try:
        assert tc.wait_for(procs, 1, r'SHARDS-WRITTEN 6', timeout=240), 'rank 1 never wrote its shards of step 6\n' + procs.output(1)[-3000:]
        procs.signal(1, signal.SIGKILL)
        time.sleep(0.5)
    finally: procs.kill()                        # rank 0 waits for the dead rank 1, until the launcher ends it
    codes, outs, res = tc.finish(procs, 60)
    assert codes[1] == -signal.SIGKILL, codes
    temps = list(root.glob(f'.{checkpoint_name(6)}.tmp-*'))
    assert len(temps) == 1 and (temps[0]/'__1_0.distcp').exists() and not (temps[0]/MANIFEST).exists(), temps
    held = sorted(p.name for p in temps[0].iterdir())
    assert [p.name for p in checkpoints(root)] == [checkpoint_name(3)] and check_checkpoint(root/checkpoint_name(3)) == []
    v = cli('ddpsafe-verify', root)
    assert v.returncode == 0 and 'leftover of a save that never finished' in v.stdout, v.stdout + v.stderr
    codes, outs, res = tc.run(folder, N_EPOCH, *FSDP, '--out', folder/'w')
    assert codes == [0, 0], f'exit codes {codes}\n' + fail_msg(outs)
    assert f'ddpsafe: resumed from {root/checkpoint_name(3)} ' in outs[0], outs[0][-3000:]
    assert not list(root.glob('.step-*')), 'the resume left the temporary folder'
    assert all(tc.same(w, whole[0]) for w in tc.weights(folder/'w')), 'the resumed run differs from the uninterrupted one'
    print(f'\n[shards] kill -9 of rank 1 with its shards of step 6 written, before the manifest: {temps[0].name} held '
          f'{held} and no manifest; step 3 verified, was resumed, and the run ended '
          'bit-identical to the uninterrupted one; the temporary folder was removed')

def flip_byte(f, at:int=-100):
    b = bytearray(f.read_bytes()); b[at] ^= 0xFF; f.write_bytes(bytes(b))

@pytest.mark.timeout(600)
def test_damaged_shards(folder):
    "Step 9 with a flipped byte in rank 0's shard file, step 6 without rank 1's: both named, both skipped, step 3 resumed"
    whole = tc.baseline(N_EPOCH, *FSDP)
    root = folder/'checkpoints'
    for s in (3, 6, 9):
        shutil.copytree(tc.baseline_run(N_EPOCH, *FSDP)['path']/'checkpoints'/checkpoint_name(s), root/checkpoint_name(s))
    (root/checkpoint_name(6)/'__1_0.distcp').unlink(); flip_byte(root/checkpoint_name(9)/'__0_0.distcp')
    damaged = {root/checkpoint_name(6): f'{root/checkpoint_name(6)}/__1_0.distcp: listed in the manifest, missing on disk',
               root/checkpoint_name(9): f'{root/checkpoint_name(9)}/__0_0.distcp: checksum differs from the manifest'}
    v = cli('ddpsafe-verify', root)
    assert v.returncode == 1 and all(msg in v.stdout for msg in damaged.values()), v.stdout + v.stderr
    for ck, msg in damaged.items():
        ex = cli('ddpsafe-export', ck, '--out', folder/'w.safetensors')
        assert ex.returncode == 1 and msg in ex.stderr and not (folder/'w.safetensors').exists(), ex.stdout + ex.stderr
    codes, outs, res = tc.run(folder, N_EPOCH, *FSDP, '--out', folder/'w')
    assert codes == [0, 0], f'exit codes {codes}\n' + fail_msg(outs)
    for r, o in enumerate(outs):
        for ck, msg in damaged.items(): assert f'skipping checkpoint {ck}' in o and msg in o, f'rank {r} did not name {msg!r}:\n{o[-3000:]}'
    assert f'ddpsafe: resumed from {root/checkpoint_name(3)} ' in outs[0], outs[0][-3000:]
    assert all(tc.same(w, whole[0]) for w in tc.weights(folder/'w')), 'the resumed run differs from the uninterrupted one'
    print(f'\n[shards] a missing shard file in step 6 and a flipped byte in step 9: ddpsafe-verify and ddpsafe-export name them '
          f'({"; ".join(damaged.values())}); both ranks warned about both, resumed from step 3 and ended bit-identical to the uninterrupted run')
