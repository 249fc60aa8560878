"""On CUDA: what CI's CPU machines cannot run. Skipped where torch sees no GPU (CI, this project's own machines); run by
hand on a GPU machine: `python -m pytest tests/test_cuda.py -ra`.

- Copies into pinned host buffers (`StateBuffers`, the asynchronous save's snapshot): pinned, equal to the GPU tensors at
  the moment of the copy, untouched by later in-place steps on the GPU.
- 2 ranks on one GPU (gloo, CUDA tensors; NCCL refuses two ranks on one device), fastai's DDP on `cuda:0`: stopped by
  SIGTERM mid-epoch and resumed, with synchronous and asynchronous saves and with `to_fp16()` (a CUDA `GradScaler`, saved
  as the `scaler` part): final weights bit-identical to the uninterrupted run's, on both ranks.
- The real `torchrun` with one process on the GPU and the NCCL backend (ddpsafe starts its gloo side group beside it),
  with DDP: SIGTERM to torchrun mid-epoch, the run is `preempted`, and the rerun resumes to the uninterrupted run's
  weights. The same with FSDP2 (`fsdp_ctx`): the loaders are made on the CPU, and the batches must reach the GPU where
  `fully_shard` put the shards (the first batch failed with tensors on `cuda:0` and the CPU before `ShardedTrainer` put them there).
- The stage-wise script (`fit`, `save`, `validate`, `fit`; issue 60) on `cuda:0` through torchrun: preempted in its second
  fit and run again, the learner between the fits and at the end is the first run's (its `validate()` inside
  `distrib_ctx` failed on fastai's `model.device` in one process before `_wrap_dl` was patched).
- accelerate's `PartialState()` under torchrun's variables on a GPU machine is `MULTI_GPU`: the CPU's silent `NO`
  (`NotDistributed`) does not arise there."""
from __future__ import annotations
import os, sys, signal, subprocess
from pathlib import Path
import pytest, torch
from conftest import train_ckpt, fail_msg, needs_torchrun, TORCHRUN, tools   # noqa: F401 (`tools` is a fixture)
from ddpsafe.callback.preempt import REQUEUE_EXIT_CODE
from ddpsafe.storage.manifest import newest_complete, MANIFEST

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA device: these run on a GPU machine only')
tc = train_ckpt()
N_EPOCH = 3
ONE_GPU = {'LOCAL_RANK': '0', 'CUBLAS_WORKSPACE_CONFIG': ':4096:8'}   # both ranks on cuda:0 (accelerate picks cuda:LOCAL_RANK)

def test_pinned_snapshot():
    "The snapshot of CUDA tensors is in pinned host memory, equal to them when taken, and stays so while the GPU goes on"
    from ddpsafe.write.snapshot import StateBuffers
    w = torch.randn(1024, 1024, device='cuda')
    bufs = StateBuffers()
    snap = bufs.copy(dict(w=w, step=torch.tensor(3, device='cuda')))
    assert snap['w'].is_pinned() and snap['w'].device.type == 'cpu', (snap['w'].device, snap['w'].is_pinned())
    before = w.cpu()
    w.add_(1)                                   # the next step, in place, on the GPU
    torch.cuda.synchronize()
    assert torch.equal(snap['w'], before) and int(snap['step']) == 3, 'the snapshot changed after the copy'
    again = bufs.copy(dict(w=w, step=torch.tensor(4, device='cuda')))
    assert again['w'].data_ptr() == snap['w'].data_ptr() and torch.equal(again['w'], w.cpu()), 'the buffers are reused'

def stopped_and_resumed(folder:Path, *args) -> list:
    "Stop by SIGTERM to rank 1 after step 4 (so at step 5, mid-epoch: the second of epoch 1's three), then rerun: each rank's final weights"
    codes, outs, res = tc.run(folder, N_EPOCH, *args, '--kill', 'SIGTERM:1:4', env=ONE_GPU, timeout=300)
    assert codes == [REQUEUE_EXIT_CODE]*2, f'exit codes {codes}\n' + fail_msg(outs)
    assert all(r['device'] == 'cuda:0' for r in res), [r['device'] for r in res]
    ck = newest_complete(folder/'checkpoints')
    assert ck is not None, 'no complete checkpoint after the signal'
    manifest = (ck/MANIFEST).read_text()
    codes, outs, res = tc.run(folder, N_EPOCH, *args, '--out', folder/'w', env=ONE_GPU, timeout=300)
    assert codes == [0, 0], f'the rerun failed: {codes}\n' + fail_msg(outs)
    assert 'ddpsafe: resumed from ' in outs[0], outs[0][-3000:]
    return tc.weights(folder/'w'), manifest

@pytest.mark.timeout(900)
@pytest.mark.parametrize('mode', ['sync', 'async', 'fp16'])
def test_two_ranks_on_one_gpu_resume_bit_identical(tmp_path, mode):
    args = ('--fit', 'fit', *{'sync': [], 'async': ['--async-save'], 'fp16': ['--fp16']}[mode])
    codes, outs, res = tc.run(tmp_path/'whole', N_EPOCH, *args, '--out', tmp_path/'whole'/'w', env=ONE_GPU, timeout=300)
    assert codes == [0, 0], f'the uninterrupted run failed: {codes}\n' + fail_msg(outs)
    assert all(r['device'] == 'cuda:0' for r in res), [r['device'] for r in res]
    whole = tc.weights(tmp_path/'whole'/'w')
    resumed, manifest = stopped_and_resumed(tmp_path/'run', *args)
    if mode == 'fp16': assert '"scaler"' in manifest, f'the checkpoint has no scaler part: {manifest[:2000]}'
    assert all(tc.same(w, whole[0]) for w in resumed + whole[1:]), 'the resumed run differs from the uninterrupted one'
    print(f'\n[cuda] {mode}: 2 ranks on cuda:0, stopped by SIGTERM at step 5, resumed: bit-identical to the uninterrupted run')

@needs_torchrun
@pytest.mark.timeout(600)
@pytest.mark.parametrize('ctx', ['ddp', 'fsdp'])
def test_torchrun_nccl_sigterm_and_resume(tmp_path, ctx):
    "One process on the GPU under torchrun, NCCL's default group: SIGTERM to torchrun, exit 75, the rerun ends as an uninterrupted run"
    env = {**os.environ, 'PYTHONUNBUFFERED': '1', 'DDPSAFE_TIMEOUT': '120'}
    def run(folder, *extra, signal_after=None):
        cmd = [str(TORCHRUN), '--nproc_per_node', '1', str(tc.SCRIPT), str(folder), '6', '--fit', 'fit', '--slow', '0.05', '--nccl', *(['--fsdp'] if ctx == 'fsdp' else []), *map(str, extra)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
        out = []
        for line in p.stdout:
            out.append(line)
            if signal_after and line.startswith(f'STEP {signal_after}'): p.send_signal(signal.SIGTERM); signal_after = None
        return p.wait(timeout=300), ''.join(out)
    code, out = run(tmp_path/'whole', '--out', tmp_path/'whole'/'w')
    assert code == 0, out[-4000:]
    assert 'backend nccl' in out and 'device cuda:0' in out, out[-3000:]
    code, out = run(tmp_path/'run', signal_after=10)
    assert code != 0 and newest_complete(tmp_path/'run'/'checkpoints') is not None, out[-4000:]
    from ddpsafe.cli import run_status
    st = run_status(str(tmp_path/'run'/'checkpoints'))
    assert st['state'] == 'preempted', st
    code, out = run(tmp_path/'run', '--out', tmp_path/'run'/'w')
    assert code == 0 and 'ddpsafe: resumed from ' in out, out[-4000:]
    a, b = torch.load(tmp_path/'whole'/'w.rank0'), torch.load(tmp_path/'run'/'w.rank0')
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), 'the resumed run differs from the uninterrupted one'
    print(f'\n[cuda] torchrun, 1 process, NCCL, {ctx}: SIGTERM to torchrun after step 10, status preempted, resumed bit-identical')

@needs_torchrun
@pytest.mark.timeout(600)
def test_rerun_replays_on_gpu(tools, tmp_path):
    "The stage-wise script on the GPU (one process, NCCL): run again after a preemption in its second fit, it replays the first as it ended"
    from test_rerun import launch, check_replayed
    code, first, out = launch(tools, tmp_path/'whole', 'fit-save-fit', 'first', '--cuda', n=1)
    assert code == 0 and first[0]['end'], out[-4000:]
    code, _, out = launch(tools, tmp_path/'stopped', 'fit-save-fit', 'stopped', '--cuda', '--kill', '26', n=1)   # 12 steps in fit 1, 24 in fit 2
    assert code != 0 and 'stopping at step' in out, out[-4000:]
    code, resumed, out = launch(tools, tmp_path/'stopped', 'fit-save-fit', 'resumed', '--cuda', n=1)
    assert code == 0 and 'this fit already finished' in out, out[-4000:]
    check_replayed(first, resumed, out, 'fit-save-fit on the GPU')
    assert resumed[0]['end'] == first[0]['end'], out[-3000:]
    print('\n[cuda] the stage-wise script on cuda:0, preempted in its second fit and run again: the same learner between the fits and at the end')

def test_partial_state_on_cuda_is_distributed():
    "accelerate's `PartialState()` made under torchrun's variables on a CUDA machine, without cpu=True: distributed (MULTI_GPU), not the CPU's NO"
    script = ('from accelerate.state import PartialState as P\n'
              'print(P._prepare_backend(object.__new__(P), False, False, None)[1])')   # the decision alone: no group is started
    env = {**os.environ, 'RANK': '0', 'LOCAL_RANK': '0', 'WORLD_SIZE': '2'}
    out = subprocess.run([sys.executable, '-c', script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith('MULTI_GPU'), out.stdout + out.stderr
    print(f'\n[cuda] PartialState() under torchrun on a GPU machine: {out.stdout.strip()}')
