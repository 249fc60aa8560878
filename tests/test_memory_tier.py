"""The memory tier (issue 43) on 2 CPU ranks under torchrun: `launcher_train.py` saves to disk every 4 steps and to the
memory tier every step, and rank 1 is SIGKILLed just after a memory save two steps past a disk save, so that the newest
checkpoint is the memory tier's.

- With `torchrun --max-restarts 2` (the recipe's c10d rendezvous) and the memory tier in its default place, `/dev/shm`:
  torchrun starts both ranks again on this node, and the run resumes from the memory tier by itself (rank 0 says so, and
  names the checkpoint), ends with the weights of an uninterrupted run bit for bit, and empties its folder in `/dev/shm`.
- Without restarts, the memory tier (in a folder of the test's, `--memory-path`) deleted or damaged between the two
  launches: the second launch resumes from the disk's newest, rank 0 says why, and the weights are the same.

Since issue 61 the memory tier is a ring of sealed slots in its folder (`rank-0/slot-K`), not checkpoint folders: a launch
that finds a sealed slot newer than the disk's newest commits it to disk first and resumes from there (rank 0 still says
the memory tier's step was resumed). "Damaged" is a seal cut short: a slot holds no checksums (the trainer hashes
nothing), so a flipped byte in a slot's data is not found.

Every launch is bounded: a launcher that does not end in time fails naming the ranks without a result; a save or a
restart that does not come fails naming the rank awaited."""
from __future__ import annotations
import os, re, shutil, signal, time
from pathlib import Path
import pytest, torch
from ddpsafe.testing import wait_until, WaitTimeout
from ddpsafe.write.memory import memory_folder, SHM
from ddpsafe.storage.manifest import checkpoints, checkpoint_step, newest_complete
from ddpsafe.write.slots import sealed_slots
from conftest import final_weights, same_weights, Launch, report, torchrun_cmd, needs_torchrun, ROOT

SCRIPT = ROOT/'tests'/'scripts'/'launcher_train.py'
N_EPOCH, DISK_EVERY = 4, 4
C10D = ['--rdzv-backend', 'c10d', '--rdzv-endpoint', 'localhost:0']   # the recipe's flags (docs_src/recipes.md): a free port of its own
C10D_ENV = dict(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)

def train_args(run:Path, *extra, slow:float=0.3) -> list:
    return [str(SCRIPT), str(run), str(N_EPOCH), '--every-steps', str(DISK_EVERY), '--slow', str(slow), '--workers', '0',
            '--marks', str(run/'marks'), '--out', str(run/'w'), *extra]

def pids(l:Launch, r:int) -> list: return [int(x.split()[1]) for x in l.marks(r) if x.startswith('PID ')]

@pytest.fixture(scope='module')
def tmp_root(tmp_path_factory): return tmp_path_factory.mktemp('memory')

_baseline = {}
def baseline(tools, tmp_root:Path) -> list:
    "The final weights of an uninterrupted run of the same script, without a memory tier (once per session)"
    if 'w' not in _baseline:
        run = tmp_root/'baseline'
        l = Launch(torchrun_cmd(*C10D) + train_args(run, slow=0), run, tools, 'baseline', **C10D_ENV)
        code = l.wait(180)
        report(launch='torchrun, uninterrupted, no memory tier', exit=code, seconds=l.seconds)
        assert code == 0, l.output()[-4000:]
        _baseline['w'] = final_weights(run)
    return _baseline['w']

def kill_after_memory_save(l:Launch, timeout:float=120) -> int:
    "SIGKILL rank 1 once rank 0 logged a memory save 2 steps past a disk save (step 6, 10, 14...); that step"
    def found():
        if l.proc.poll() is not None: return -1
        return next((int(s) for s, why in l.saves(0) if why == 'memory' and int(s) >= 6 and int(s) % DISK_EVERY == 2), None)
    try: m = wait_until(found, timeout, 'a memory save at step 6, 10 or 14', rank=0, every=0.01)
    except WaitTimeout as e: l.kill(); pytest.fail(f'{l.name}: {e}\n{l.output()[-4000:]}')
    if m < 0: pytest.fail(f'{l.name}: the launcher ended (exit {l.proc.poll()}) before rank 0 saved to the memory tier\n{l.output()[-4000:]}')
    os.kill(l.pid(1), signal.SIGKILL)
    return m

@pytest.fixture
def shm_left():
    "Folders in /dev/shm a test names: removed after it, whatever happened"
    folders = []
    yield folders
    for f in folders: shutil.rmtree(f, ignore_errors=True)

@needs_torchrun
@pytest.mark.timeout(480)
@pytest.mark.skipif(not SHM.is_dir(), reason='no /dev/shm on this system')
def test_restart_resumes_from_memory(tools, tmp_root, shm_left):
    "SIGKILL to rank 1 after a memory save: torchrun restarts the group, which resumes from /dev/shm and ends as if never stopped"
    base = baseline(tools, tmp_root)
    run = tmp_root/'restart'
    mem = memory_folder(run/'checkpoints'); shm_left.append(mem)
    assert mem.parent == SHM, mem
    l = Launch(torchrun_cmd('--max-restarts', '2', *C10D) + train_args(run, '--memory-every-steps', '1'), run, tools, 'restarted', **C10D_ENV)
    first = [pids(l, r) for r in range(2)]
    m = kill_after_memory_save(l)
    t_kill = time.monotonic()
    first = [pids(l, r) for r in range(2)]
    try: wait_until(lambda: all(len(pids(l, r)) > len(first[r]) for r in range(2)) or l.proc.poll() is not None, 120,
                    'both ranks started again', every=0.1)
    except WaitTimeout: pass
    if not_restarted := [r for r in range(2) if len(pids(l, r)) <= len(first[r])]:
        l.kill()
        pytest.fail(f'torchrun did not start rank(s) {not_restarted} again within 120 s of the SIGKILL (launcher exit {l.proc.poll()})\n{l.output()[-4000:]}')
    code = l.wait(240)
    out = l.output()
    said = re.findall(rf'ddpsafe: memory tier {re.escape(str(mem))}: resuming from its step (\d+)', out)
    report(launch='torchrun --max-restarts 2 (c10d), memory tier in /dev/shm', killed_after_memory_save=m, launcher_exit=code,
           resumed_from_memory=said, restart_seconds=round(time.monotonic() - t_kill, 1), seconds=l.seconds)
    assert code == 0, f'torchrun exited {code}\n{out[-5000:]}'
    assert [x and x['code'] for x in l.results()] == [0, 0], l.results()
    assert f'ddpsafe: memory tier in {mem}: a checkpoint every 1 steps' in out, out[-3000:]
    assert said == [str(m)], f'the restart did not resume from the memory tier at step {m}: {said}\n{out[-5000:]}'
    assert f'resumed from {run}/checkpoints/step-{m:08d} ' in out, out[-5000:]   # the sealed slot, committed to disk as the launch began
    assert all(same_weights(a, b) for a, b in zip(final_weights(run), base)), 'resumed from the memory tier, the run ended with weights unlike the uninterrupted run'
    assert not mem.exists(), f'{mem} is left in /dev/shm after the run saved its end to disk: {sorted(p.name for p in mem.iterdir())}'

@needs_torchrun
@pytest.mark.timeout(480)
@pytest.mark.parametrize('harm', ['deleted', 'damaged'])
def test_falls_back_to_disk(tools, tmp_root, harm):
    "The memory tier deleted, or every checkpoint in it damaged, between two launches: the second resumes from disk"
    base = baseline(tools, tmp_root)
    run = tmp_root/f'fallback-{harm}'; mem = run/'mem'
    args = train_args(run, '--memory-every-steps', '1', '--memory-path', str(mem))
    l = Launch(torchrun_cmd(*C10D) + args, run, tools, 'killed', **C10D_ENV)
    m = kill_after_memory_save(l)
    code = l.wait(120)
    assert code != 0, f'torchrun without restarts exited {code} after a rank was killed'
    held, disk = [s for s, _ in sealed_slots(mem/'rank-0')], newest_complete(run/'checkpoints')
    assert held and held[-1] >= m and checkpoint_step(disk) < held[-1], (held, disk, m)
    if harm == 'deleted': shutil.rmtree(mem)
    else:
        for _, slot in sealed_slots(mem/'rank-0'): (slot/'sealed.json').write_text('{"step": ')   # every seal cut short
    l2 = Launch(torchrun_cmd(*C10D) + args, run, tools, 'resumed', **C10D_ENV)
    code = l2.wait(180)
    out = l2.output()
    report(launch=f'torchrun, memory tier {harm} between launches', killed_after_memory_save=m, disk=disk.name, exit=code, seconds=l2.seconds)
    assert code == 0, f'the second launch exited {code}\n{out[-5000:]}'
    why = f'ddpsafe: memory tier {mem}: not on this node' if harm == 'deleted' else f'ddpsafe: memory tier {mem}: slot-'
    assert why in out, out[-5000:]
    if harm == 'damaged': assert re.search(rf'{re.escape(str(mem))}: slot-\d, slot-\d damaged \(its seal is unreadable.*: falling back to disk, {re.escape(str(disk))}', out), out[-5000:]
    assert f'resumed from {disk} ' in out, out[-5000:]
    assert all(same_weights(a, b) for a, b in zip(final_weights(run), base)), f'resumed from disk after the memory tier was {harm}, the run ended unlike the uninterrupted run'
