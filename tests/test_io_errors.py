"""Bad input and failed writes, on two real ranks: every rank gets the same clear error, nothing saved is lost.

A full disk is a real tmpfs of a few hundred kilobytes and a write refused by the system is the same tmpfs remounted
read-only (root ignores permission bits, so `chmod` can't stand for it here); both need root, which CI has (the
`tmpfs` fixture of conftest.py fails, saying why, where mounting is refused)."""
from __future__ import annotations
import os, errno, subprocess, tempfile, time
from pathlib import Path
import pytest, torch
from ddpsafe.testing import run_ranks, synth_learner
from ddpsafe.dist.collectives import rank
from ddpsafe.files.safe import atomic_save, safe_load
from ddpsafe.files.codec import CorruptFileError, UnsafePickleError
import ddpsafe.patches.learner
from ddpsafe.patches.learner import CheckpointMismatch

pytestmark = pytest.mark.timeout(180)

def _errors_on_every_rank(res, kind, *words):
    "Each rank's result is (exception type name, message): all `kind`, all mentioning `words`"
    assert [r[0] for r in res] == [kind]*len(res), res
    for _, msg in res:
        for w in words: assert w in msg, (w, msg)

def save_to_full_disk(folder):
    f = Path(folder)/'state.pth'
    atomic_save({'w': torch.zeros(10)}, f)                           # a small file that fits
    start = time.monotonic()
    try: atomic_save({'w': torch.zeros(200_000)}, f); return 'saved?!'  # 800 KB: does not fit
    except OSError as e: err = (type(e).__name__, f'{e} errno={e.errno}')
    return err + (time.monotonic() - start, safe_load(f)['w'].shape[0], sorted(p.name for p in Path(folder).iterdir()))

def test_full_disk(tmpfs):
    small_fs = tmpfs('256k')
    res = run_ranks(save_to_full_disk, args=(small_fs,), timeout=120)
    _errors_on_every_rank([r[:2] for r in res], 'OSError', 'could not write', 'state.pth', f'errno={errno.ENOSPC}')
    for *_, secs, old_len, files in res:
        assert secs < 30, f'the error took {secs:.0f}s to reach every rank'
        assert old_len == 10, 'the older file was damaged'
        assert files == ['state.pth'], f'temporary files left behind: {files}'

def save_to_readonly(folder):
    learn = synth_learner(path=folder)            # writes into folder/models, which exists
    try: learn.save('model'); return 'saved?!'
    except OSError as e: return type(e).__name__, f'{e} errno={e.errno}'

def test_refused_write(tmpfs):
    small_fs = tmpfs('256k')
    (small_fs/'models').mkdir()
    subprocess.run(['mount', '-o', 'remount,ro', str(small_fs)], check=True)
    res = run_ranks(save_to_readonly, args=(small_fs,), timeout=120)
    _errors_on_every_rank(res, 'OSError', 'could not write', 'model.pth', f'errno={errno.EROFS}')

def load_bad(folder, name):
    learn = synth_learner(path=folder)
    try: learn.load(name); return 'loaded?!'
    except Exception as e: return type(e).__name__, str(e)

@pytest.fixture
def files(tmp_path):
    "A good checkpoint, a truncated copy, a pickle that runs code, and one from another model, in `tmp_path/models`"
    learn = synth_learner(path=tmp_path)
    good = learn.save('good')
    (tmp_path/'models'/'trunc.pth').write_bytes(good.read_bytes()[:300])
    class Evil:
        def __reduce__(self): return (os.system, ('echo pwned',))
    torch.save({'model': Evil()}, tmp_path/'models'/'evil.pth')
    other = torch.nn.Linear(4, 7)
    torch.save(other.state_dict(), tmp_path/'models'/'other.pth')
    return tmp_path

@pytest.mark.parametrize('name,kind,words', [
    ('missing', 'FileNotFoundError', ['missing.pth', 'no such file']),
    ('trunc', 'CorruptFileError', ['trunc.pth', 'not a complete PyTorch file']),
    ('evil', 'UnsafePickleError', ['evil.pth', 'refusing to unpickle']),
    ('other', 'CheckpointMismatch', ['other.pth', 'does not fit this model'])])
def test_bad_file(files, name, kind, words):
    _errors_on_every_rank(run_ranks(load_bad, args=(files, name), timeout=120), kind, *words)

def test_good_file_loads(files):
    assert run_ranks(load_bad, args=(files, 'good'), timeout=120) == ['loaded?!']*2
