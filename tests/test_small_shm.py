"""Issue 70: a container's /dev/shm of 64 MB (Docker's and a Kubernetes pod's default), made for the test in a private
mount namespace (`unshare -m`, then a tmpfs of 64 MB on /dev/shm; skipped where the OS forbids it). A fastai fit with
async saves every 3 steps, with a state whose one slot fits there (44 MB), one whose slot does not (96 MB), and the first
with the memory tier too (its 2 slots do not fit):

- every checkpoint lands and verifies, and a resume from one of the middle ends bit for bit as the fit that was not stopped;
- no traceback (none from a background thread), no warning at each save;
- one line about it as the fit starts, with the fix (`--shm-size`, `medium: Memory`);
- every save is written by the writer process: from its slot in /dev/shm where it fits, else from a slot in the
  temporary folder; the memory tier says once that it has no room, and the async saves keep their slot.

Each fit runs in a subprocess with a timeout, so that a hang fails the test naming the fit."""
from __future__ import annotations
import os, sys, json, tempfile, subprocess, textwrap
from pathlib import Path
import pytest
from ddpsafe.storage.manifest import checkpoints, check_checkpoint, checkpoint_step

ROOT = Path(__file__).resolve().parent.parent

FIT = textwrap.dedent('''
    import sys, json
    from pathlib import Path
    import torch, fastai.callback.progress
    torch.set_num_threads(1)
    from fastai.learner import Learner
    from fastai.losses import MSELossFlat
    from ddpsafe.testing import synth_dls
    from ddpsafe.callback.checkpoint import CheckpointCallback
    import ddpsafe.write.slots as slots, ddpsafe.write.slot_copy as slot_copy, ddpsafe.write.saver as saver
    run, mb, memory = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == '1'
    counts = dict(writer=0, trainer=0)              # saves handed to the writer process; checkpoints the training process wrote itself
    submit, persist, commit = slots.SlotWriter.submit, slot_copy.persist_slot, saver.Saver._commit
    def by_writer(self, *a, **k): counts['writer'] += 1; return submit(self, *a, **k)
    def by_trainer(f):
        def g(*a, **k): counts['trainer'] += 1; return f(*a, **k)
        return g
    slots.SlotWriter.submit, slot_copy.persist_slot, saver.Saver._commit = by_writer, by_trainer(persist), by_trainer(commit)
    seen, reserve = {}, saver.Saver.reserve
    def reserved(self, state):                      # where the slots are once the first step placed them
        reserve(self, state)
        seen.setdefault('slots', str(self.pipe.folder) if self.pipe is not None else None); seen.setdefault('memory', self.memory is not None)
    saver.Saver.reserve = reserved
    width = int(mb * 2**20 / 12 / 6)                # weights and Adam's two moments: 12 bytes a parameter, 6 parameters a unit
    def learner():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Linear(width, 1))
        return Learner(synth_dls(96, 8, 0, run), model, loss_func=MSELossFlat(), lr=1e-5, path=run)
    def cb(resume): return CheckpointCallback(every_epoch=None, every_steps=3, async_save=True, keep=20, resume=resume,
                                              **(dict(memory_every_steps=1) if memory else {}))
    learn, first = learner(), cb(False)
    with learn.no_bar(), learn.no_logging(): learn.fit(2, cbs=[first])
    done = {k: v.clone() for k, v in learn.model.state_dict().items()}
    state = sum(t.numel()*t.element_size() for t in done.values()) + sum(t.numel()*t.element_size() for s in learn.opt.state.values() for t in s.values() if torch.is_tensor(t))
    out = dict(counts, **seen, state=state)
    again = learner()
    with again.no_bar(), again.no_logging(): again.fit(2, cbs=[cb(6)])   # from step 6: the same end
    out['same'] = all(torch.equal(done[k], v) for k, v in again.model.state_dict().items())
    print('RESULT ' + json.dumps(out))
''')

def in_small_shm(args:list, timeout:float, size:str='64m') -> subprocess.CompletedProcess:
    "Run `python -c FIT args` with a private /dev/shm of `size`"
    cmd = ['unshare', '-m', 'bash', '-c', f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$0" -c "$1" "${{@:2}}"', sys.executable, FIT, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')]))))

@pytest.fixture(scope='module')
def private_shm():
    "Skip, with the OS's reason, where a private mount namespace with its own tmpfs can not be made"
    try: p = subprocess.run(['unshare', '-m', 'bash', '-c', 'mount -t tmpfs -o size=64m tmpfs /dev/shm && df -B1 --output=size /dev/shm | tail -1'],
                            capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e: pytest.skip(f'no private /dev/shm here: {e}')
    if p.returncode != 0: pytest.skip(f'no private /dev/shm here (unshare -m and a tmpfs mount need root, or a user namespace): {p.stderr.strip()[:300]}')
    assert int(p.stdout.split()[-1]) == 64 << 20, p.stdout

@pytest.mark.timeout(400)
@pytest.mark.parametrize('mb, memory, where', [(44, False, 'shm'), (96, False, 'tmp'), (44, True, 'shm')], ids=['one-slot-fits', 'none-fits', 'memory-tier'])
def test_fit_in_a_64mb_shm(tmp_path, private_shm, mb, memory, where):
    run = tmp_path/'run'; run.mkdir()
    p = in_small_shm([str(run), str(mb), '1' if memory else '0'], timeout=360)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f'the fit in a 64 MB /dev/shm ({mb} MB of state) exited {p.returncode}\n{out[-5000:]}'
    r = json.loads(next(l for l in p.stdout.splitlines() if l.startswith('RESULT '))[7:])
    said = [l for l in out.splitlines() if '--shm-size' in l]
    print(f'\n[small shm] {mb} MB of state ({r["state"]/2**20:.1f} MB measured), memory tier asked: {memory}; slots in {r["slots"]}; '
          f'{r["writer"]} saves by the writer, {r["trainer"]} by the trainer; said: {said}')
    assert 'Traceback' not in out and 'Exception in thread' not in out, out[-5000:]
    assert 'written by the training process instead' not in out, out[-5000:]
    assert len(said) == 2, f'not one line about /dev/shm as each of the 2 fits starts: {said}\n{out[-3000:]}'   # the fit, then its resumed rerun
    assert all(l.startswith('ddpsafe: ') and '/dev/shm' in l and '--ipc=host' in l and 'medium: Memory' in l for l in said), said   # where, and the fix
    home = '/dev/shm' if where == 'shm' else tempfile.gettempdir()
    assert Path(r['slots']).is_relative_to(home), f'the slots are in {r["slots"]}, not in {home}'
    if memory: assert 'no memory tier this fit; the async saves keep their slot there' in said[0] and 'memory_path' in said[0] and not r['memory'], said[0]
    assert r['trainer'] == 0 and r['writer'] >= 6, f'{r["trainer"]} checkpoints written by the training process, {r["writer"]} by the writer process'
    kept = checkpoints(run/'checkpoints')
    assert [checkpoint_step(c) for c in kept] == [3, 6, 9, 12, 15, 18], [c.name for c in kept]
    assert all(check_checkpoint(c) == [] for c in kept), [(c.name, check_checkpoint(c)) for c in kept]
    assert r['same'], 'resumed from step 6, the fit did not end bit for bit as the one that was not stopped'
