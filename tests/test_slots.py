"""Issue 61's foundation, process by process: a state copied into a slot in shared memory, persisted by a writer process
without torch; the writer killed mid-write, the trainer killed after a seal, /dev/shm full, the disk full mid-persist.
Each names what happened, loses nothing committed, and hangs nowhere (every wait has a timeout)."""
from __future__ import annotations
import io, os, sys, json, time, errno, signal, operator, subprocess, textwrap
from pathlib import Path
import pytest, torch
from ddpsafe.write.slots import SlotWriter, WriterGone, persist_slot, sealed_slots, read_seal, slot_file, previous_writer, wait_previous_writer
from ddpsafe.write.slot_copy import SlotRing
from ddpsafe.storage.manifest import checkpoints, check_checkpoint, newest_complete, read_manifest, checkpoint_name, clean_incomplete, Retention
from ddpsafe.storage.commit import temporaries
from conftest import same_tree

ROOT = Path(__file__).resolve().parent.parent

def state(mb:float, seed:int=0) -> dict:
    "A checkpoint's files of about `mb` MB: weights as safetensors, an Adam state as `torch.save` would write it"
    g = torch.Generator().manual_seed(seed)
    n = int(mb * (1<<20) / 4 / 3)
    m = torch.nn.Linear(n // 64 or 1, 64)
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(2, m.in_features, generator=g)).sum().backward(); opt.step()
    return {'model.safetensors': dict(m.state_dict()), 'optimizer.pt': opt.state_dict(), 'state.pt': dict(step=seed, rng=torch.get_rng_state())}

def until(f, timeout:float, what:str):
    "Wait for `f()` to be truthy; fail naming `what` after `timeout` seconds"
    end = time.monotonic() + timeout
    while not (r := f()):
        if time.monotonic() > end: pytest.fail(f'{what}: not within {timeout} s')
        time.sleep(0.002)
    return r

@pytest.mark.timeout(300)
def test_round_trip_of_a_fastai_fit(tmp_path, monkeypatch):
    "Every checkpoint of a real fastai fit (Adam, the whole training state), written both ways: the same files, read the same by ddpsafe's own load path"
    import fastai.callback.progress
    from ddpsafe.testing import synth_learner
    from ddpsafe.callback.checkpoint import CheckpointCallback
    from ddpsafe.write.saver import Saver
    from ddpsafe.state.resume import read_checkpoint_file
    ring, writer, saved = SlotRing(tmp_path/'shm'/'rank-0'), SlotWriter().start(), []
    real = Saver.save
    def save(self, step, files, meta, shards=None):
        slot = ring.fill(step, files, meta)                       # what a tier of slots will do at the step boundary
        writer.submit(slot, tmp_path/'slots', step, Retention(100)); saved.append(step)
        writer.wait(60)
        return real(self, step, files, meta, shards)
    monkeypatch.setattr(Saver, 'save', save)
    learn = synth_learner(n=64, path=tmp_path)
    with learn.no_logging(), learn.no_bar(): learn.fit(2, cbs=CheckpointCallback(tmp_path/'old', every_steps=3, keep=100))
    writer.close(60); ring.close()
    assert saved and [c.name for c in checkpoints(tmp_path/'slots')] == [c.name for c in checkpoints(tmp_path/'old')]
    for new in checkpoints(tmp_path/'slots'):
        old = tmp_path/'old'/new.name
        assert check_checkpoint(new) == [], check_checkpoint(new)
        mo, mn = read_manifest(old), read_manifest(new)
        assert {k: v for k, v in mo.items() if k not in ('time', 'files')} == {k: v for k, v in mn.items() if k not in ('time', 'files')}
        assert mo['files'].keys() == mn['files'].keys()
        assert (old/'model.safetensors').read_bytes() == (new/'model.safetensors').read_bytes()   # the weights: the same bytes
        for name in mo['files']:
            assert same_tree(read_checkpoint_file(old, name, mo), read_checkpoint_file(new, name, mn)), f'{new/name} differs from {old/name}'
            r1, r2 = (torch._C.PyTorchFileReader(str(p/name)) for p in (old, new)) if name.endswith('.pt') else (None, None)
            if r1 is not None:    # the same records, with the same bytes, as torch's own reader finds them
                assert {k: bytes(r1.get_record(k)) for k in r1.get_all_records() if 'serialization_id' not in k} == \
                       {k: bytes(r2.get_record(k)) for k in r2.get_all_records() if 'serialization_id' not in k}

@pytest.mark.timeout(120)
def test_writer_imports_neither_torch_nor_numpy(tmp_path):
    "The writer process, after a persist, has loaded no torch and no numpy library"
    ring = SlotRing(tmp_path/'shm'); slot = ring.fill(1, state(1))
    w = SlotWriter().start(); w.submit(slot, tmp_path/'ck', 1); assert w.wait(60)[0]['ok']
    maps = Path(f'/proc/{w.pid}/maps').read_text()
    assert 'libtorch' not in maps and 'numpy' not in maps
    w.close(30); ring.close()

@pytest.mark.timeout(180)
def test_writer_killed_mid_write(tmp_path):
    "SIGKILL of the writer while it writes: named at the next wait; nothing half-committed is visible; the slot, still sealed, is committed by a new writer"
    ring = SlotRing(tmp_path/'shm')
    first = ring.fill(1, state(1, 1))
    w = SlotWriter().start(); w.submit(first, tmp_path/'ck', 1); assert w.wait(60)[0]['ok']
    for attempt in range(5):     # catch it writing: a temporary folder of the checkpoint exists
        slot = ring.fill(2, state(96, 2)); ring.handed.add(slot)
        w.submit(slot, tmp_path/'ck', 2)
        until(lambda: temporaries(tmp_path/'ck') or not w.busy or w.poll(), 60, 'the write of step 2 to start')
        if not temporaries(tmp_path/'ck'): ring.handed.discard(slot); w.wait(60); clean_newest(tmp_path/'ck'); continue
        os.kill(w.pid, signal.SIGKILL)
        with pytest.raises(WriterGone, match=r'was killed by SIGKILL.*before it committed step 2'): w.wait(30)
        break
    else: pytest.skip('the write finished before it could be killed, 5 times')
    assert [c.name for c in checkpoints(tmp_path/'ck')] == ['step-00000001']       # no step-2 folder: nothing half-committed
    assert newest_complete(tmp_path/'ck').name == 'step-00000001'
    assert temporaries(tmp_path/'ck') and clean_incomplete(tmp_path/'ck') and not temporaries(tmp_path/'ck')   # its leftover, named as such, cleaned
    assert read_seal(slot)['step'] == 2
    w2 = SlotWriter().start(); w2.submit(slot, tmp_path/'ck', 2)
    r = w2.close(120)
    assert r[0]['ok'], r
    assert newest_complete(tmp_path/'ck').name == 'step-00000002' and check_checkpoint(tmp_path/'ck'/'step-00000002') == []
    ring.close()

def clean_newest(root:Path):
    "Remove a step-2 checkpoint a too-fast writer committed, so the next attempt writes it again"
    import shutil; shutil.rmtree(root/'step-00000002', ignore_errors=True)

TRAINER = textwrap.dedent('''
    import sys, time, torch
    sys.path.insert(0, sys.argv[3])
    from test_slots import state
    from ddpsafe.write.slot_copy import SlotRing
    from ddpsafe.write.slots import SlotWriter
    ring = SlotRing(sys.argv[1])
    slot = ring.fill(5, state(64 if sys.argv[2] == 'submit' else 8, 5), dict(epoch=0))
    if sys.argv[2] == 'submit':
        w = SlotWriter().start(sys.argv[1]); w.submit(slot, sys.argv[1] + '-ck', 5)
        print('WRITER', w.pid, flush=True)
    print('SEALED', slot, flush=True)
    time.sleep(600)
''')

@pytest.mark.timeout(180)
@pytest.mark.parametrize('handed', ['submit', 'seal'])
def test_trainer_killed_after_seal(tmp_path, handed):
    "SIGKILL of the trainer after a slot is sealed: handed over, the writer finishes it and exits; not handed over, the next launch finds it sealed and commits it"
    shm = tmp_path/'shm'; ck = Path(str(shm) + '-ck')
    p = subprocess.Popen([sys.executable, '-c', TRAINER, str(shm), handed, str(ROOT/'tests')], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    lines = []
    try:
        while not (lines and lines[-1].startswith('SEALED')):
            line = p.stdout.readline()
            assert line, f'the trainer ended before sealing (exit {p.wait(30)})'
            lines.append(line.strip())
        os.kill(p.pid, signal.SIGKILL); p.wait(30)
    finally:
        if p.poll() is None: p.kill(); p.wait(30)
    if handed == 'submit':
        writer, said = int(lines[0].split()[1]), []
        assert wait_previous_writer(shm, 120, say=said.append) in (writer, None)   # the next launch waits for it, and says so
        assert previous_writer(shm) is None and all(f'writer process {writer}' in l for l in said)
    else:
        assert not ck.exists() and previous_writer(shm) is None
        (step, slot), = sealed_slots(shm)                       # what the next launch finds
        back = torch.load(io.BytesIO(slot_file(slot, 'optimizer.pt')), weights_only=True)   # the memory tier's resume reads it in place
        assert len(back['state']) == 2 and back['state'][0]['exp_avg'].shape == (64, int(8*(1<<20)/12)//64)
        w = SlotWriter().start(); w.submit(slot, ck, step); assert w.close(120)[0]['ok']
    assert newest_complete(ck).name == 'step-00000005' and read_manifest(ck/'step-00000005')['epoch'] == 0

@pytest.mark.timeout(120)
def test_shm_full(tmp_path, tmpfs):
    "/dev/shm full (a real 2 MB tmpfs): the slot is refused with a message naming it, before any copy; no SIGBUS, nothing sealed"
    shm = tmpfs('2m')
    code = textwrap.dedent(f'''
        import sys; sys.path.insert(0, {str(ROOT/'tests')!r})
        from test_slots import state
        from ddpsafe.write.slot_copy import SlotRing
        try: SlotRing({str(shm)!r}).fill(1, state(4))
        except OSError as e: print('ERROR', e.errno, e)
    ''')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert out.returncode == 0, f'the trainer died ({out.returncode}): {out.stderr[-2000:]}'
    assert f'ERROR {errno.ENOSPC}' in out.stdout and 'no room for a slot of 4' in out.stdout and 'shm-size' in out.stdout, out.stdout
    assert sealed_slots(shm) == []

@pytest.mark.timeout(120)
def test_disk_full_mid_persist(tmp_path, tmpfs):
    "The disk full while the writer writes (a real 2 MB tmpfs): the reply names it, nothing is half-committed, the earlier checkpoint stays, the writer goes on"
    disk, ring = tmpfs('2m'), SlotRing(tmp_path/'shm', count=3)
    w = SlotWriter().start()
    w.submit(ring.fill(1, state(0.2, 1)), disk, 1); assert w.wait(60)[0]['ok']
    r = (w.submit(ring.fill(2, state(4, 2)), disk, 2), w.wait(60))[1][0]
    assert not r['ok'] and 'could not write checkpoint' in r['error'] and 'No space left on device' in r['error'], r
    assert [c.name for c in checkpoints(disk)] == ['step-00000001'] and temporaries(disk) == []
    assert check_checkpoint(disk/'step-00000001') == []
    w.submit(ring.fill(3, state(0.2, 3)), disk, 3, Retention(1)); assert w.wait(60)[0]['ok']   # still working
    assert [c.name for c in checkpoints(disk)] == ['step-00000003']
    w.close(30); ring.close()

def wide_learner(path, width:int=1024):
    "A fastai `Learner` on `synth_dls` whose weights (4 MB) and Adam state are too big to go into a seal: they lie in the slot"
    from fastai.learner import Learner
    from fastai.losses import MSELossFlat
    from fastai.torch_core import set_seed
    from ddpsafe.testing import synth_dls
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Linear(width, width), torch.nn.Linear(width, 1))
    return Learner(synth_dls(64, 8, 0, path), model, loss_func=MSELossFlat(), lr=1e-3, path=path)

@pytest.mark.timeout(300)
@pytest.mark.parametrize('async_save', [True, False], ids=['async', 'sync'])
def test_fit_end_writes_no_tensor_twice(tmp_path, monkeypatch, async_save):
    """The fit's last step is a save step (async: the writer process commits it; sync: the trainer), then the end of the fit
    saves that step again, finished: the weights and the optimizer's state are hard links to the files just committed"""
    import fastai.callback.progress
    from ddpsafe.callback.checkpoint import CheckpointCallback
    from ddpsafe.write.saver import Saver
    big = ('model.safetensors', 'optimizer.pt')
    real, again = Saver.save, {}
    def save(self, step, files, meta, shards=None):
        ck = Path(self.root)/checkpoint_name(step)
        if ck.is_dir(): again[step] = {n: os.stat(ck/n).st_ino for n in big}   # a save of a step committed already
        return real(self, step, files, meta, shards)
    monkeypatch.setattr(Saver, 'save', save)
    learn = wide_learner(tmp_path)       # 6 steps an epoch: saves at 3 and 6, and the epoch's end at 6
    with learn.no_logging(), learn.no_bar(): learn.fit(1, cbs=CheckpointCallback('ck', every_steps=3, every_epoch=None, async_save=async_save))
    final = newest_complete(tmp_path/'ck')
    assert final.name == checkpoint_name(6) and read_manifest(final)['finished'], read_manifest(final)
    assert check_checkpoint(final) == [], check_checkpoint(final)
    assert 6 in again, f'the end of the fit did not save step 6 again: {again}'
    assert {n: os.stat(final/n).st_ino for n in big} == again[6], 'the end of the fit wrote the tensors of step 6 a second time'

@pytest.mark.timeout(300)
def test_sync_save_from_the_memory_tier(tmp_path, monkeypatch):
    """Synchronous disk saves at each epoch's end beside the memory tier, which has just sealed the same step: committed
    from the slot, nothing serialized again (`Saver._commit` is never called), the same files as a fit without the memory tier"""
    import fastai.callback.progress
    from ddpsafe.callback.checkpoint import CheckpointCallback
    from ddpsafe.write.saver import Saver
    from ddpsafe.state.resume import read_checkpoint_file
    from conftest import same_tree
    fits, real = {}, Saver._commit
    for name, kw in (('plain', {}), ('memory', dict(memory_every_steps=3))):
        calls = []
        monkeypatch.setattr(Saver, '_commit', lambda self, *a, **k: calls.append(a[0]) or real(self, *a, **k))
        learn = wide_learner(tmp_path/name)
        with learn.no_logging(), learn.no_bar(): learn.fit(2, cbs=CheckpointCallback('ck', keep=10, **kw))   # 6 steps an epoch
        fits[name] = calls, checkpoints(tmp_path/name/'ck')
    (plain_calls, plain), (memory_calls, memory) = fits['plain'], fits['memory']
    assert plain_calls and not memory_calls, f'serialized by the trainer: {memory_calls} (without the memory tier: {plain_calls})'
    assert [c.name for c in memory] == [c.name for c in plain] == [checkpoint_name(6), checkpoint_name(12)]
    for new, old in zip(memory, plain):
        assert check_checkpoint(new) == [], check_checkpoint(new)
        mo, mn = read_manifest(old), read_manifest(new)
        assert {k: v for k, v in mo.items() if k not in ('time', 'files')} == {k: v for k, v in mn.items() if k not in ('time', 'files')}
        assert (old/'model.safetensors').read_bytes() == (new/'model.safetensors').read_bytes()
        for n in mo['files']: assert same_tree(read_checkpoint_file(old, n, mo), read_checkpoint_file(new, n, mn)), f'{new/n} differs from {old/n}'

@pytest.mark.timeout(300)
@pytest.mark.parametrize('comp', [operator.gt, lambda a, b: a > b], ids=['operator.gt', 'a function'])
def test_async_keeps_the_best_by_any_comparison(tmp_path, comp):
    """`async_save` with a comparison other than `np.less`/`np.greater`: the best checkpoint is kept. Here a falling
    `valid_loss` is 'better' when greater, so the first epoch's is the best, and `keep=1` leaves it beside the newest"""
    import fastai.callback.progress
    from ddpsafe.callback.checkpoint import CheckpointCallback
    learn = wide_learner(tmp_path)
    with learn.no_logging(), learn.no_bar():
        learn.fit(3, cbs=CheckpointCallback('ck', async_save=True, keep=1, comp=comp))
    losses = [r[1] for r in learn.recorder.values]   # train_loss, valid_loss per epoch
    assert losses[0] > min(losses[1:]), f'valid_loss did not fall: {losses}'
    assert [c.name for c in checkpoints(tmp_path/'ck')] == [checkpoint_name(6), checkpoint_name(18)], checkpoints(tmp_path/'ck')
