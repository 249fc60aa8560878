"""The commit protocol of `ddpsafe.storage.commit` under real crashes: a process killed between the write and the rename, in the
middle of a checkpoint's files, or in the middle of a rotation's delete leaves the old content whole under its name and a
hidden leftover that the next run removes. Each checkpoint file is hashed once, while it is written. The command-line
layer imports no torch."""
from __future__ import annotations
import os, sys, json, errno, signal, subprocess
from pathlib import Path
import pytest, xxhash
import ddpsafe.storage.commit, ddpsafe.storage.manifest
from ddpsafe.storage.commit import *
from ddpsafe.storage.manifest import write_checkpoint, checkpoints, check_checkpoint, newest_complete, Retention, clean_incomplete, \
    checkpoint_name, read_manifest, MANIFEST

pytestmark = pytest.mark.timeout(120)

def killed(code:str, timeout:float=60) -> subprocess.CompletedProcess:
    "Run `code` in a fresh interpreter that is expected to die of SIGKILL; a hang fails naming the code"
    try: res = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired: raise AssertionError(f'the child did not finish within {timeout} s:\n{code}')
    assert res.returncode == -signal.SIGKILL, f'the child was to die of SIGKILL, it exited {res.returncode}:\n{res.stderr}'
    return res

KILL = "import os, signal; die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"

def test_crash_between_write_and_rename(tmp_path):
    "SIGKILL after the new file is written and fsynced, before the rename: the old file is whole, the leftover is found and removed"
    f = tmp_path/'model.pth'
    commit_file(f, b'old content')
    killed(KILL + f"import ddpsafe.storage.commit as c\nc.os.replace = die\nc.commit_file({str(f)!r}, b'new content')")
    assert f.read_bytes() == b'old content'
    left = temporaries(tmp_path)
    assert [(temporary_of(p)[0], kind) for p, kind in left] == [('model.pth', 'tmp')], left
    assert left[0][0].read_bytes() == b'new content'                # written and synced, never renamed
    assert clean_temporaries(tmp_path) == [left[0][0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ['model.pth']

def test_crash_while_writing_a_checkpoint(tmp_path):
    "SIGKILL in the middle of a checkpoint's second file: no folder under a checkpoint name, the earlier one is what resume loads"
    root = tmp_path/'checkpoints'
    write_checkpoint(root, 10, {'model.safetensors': b'w'*1000, 'optimizer.pt': b'o'*500})
    killed(KILL + f"""
from ddpsafe.storage.commit import FileWriter
from ddpsafe.storage.manifest import write_checkpoint
def half(f): f.write(b'x'*300); f.flush(); die()
write_checkpoint({str(root)!r}, 20, {{'model.safetensors': b'w'*1000, 'optimizer.pt': FileWriter(half)}})""")
    assert [p.name for p in checkpoints(root)] == [checkpoint_name(10)]
    assert newest_complete(root) == root/checkpoint_name(10)
    [(tmp, kind)] = temporaries(root)
    assert kind == 'tmp' and temporary_of(tmp)[0] == checkpoint_name(20), tmp
    assert sorted(p.name for p in tmp.iterdir()) == ['model.safetensors', 'optimizer.pt'], 'no manifest: it never became a checkpoint'
    assert clean_incomplete(root) == [tmp]
    assert sorted(p.name for p in root.iterdir()) == [checkpoint_name(10)]

def test_checkpoint_complete_or_invisible_to_a_reader(tmp_path):
    "A reader polling while another process writes checkpoints never sees a checkpoint folder that is not complete"
    root = tmp_path/'checkpoints'
    writer = subprocess.Popen([sys.executable, '-c', f"""
import time
from ddpsafe.storage.commit import FileWriter
from ddpsafe.storage.manifest import write_checkpoint
def slow(f):
    for _ in range(20): f.write(b'x'*1000); f.flush(); time.sleep(0.001)
for s in range(1, 31): write_checkpoint({str(root)!r}, s, {{'a.bin': FileWriter(slow), 'b.bin': FileWriter(slow), 'c.bin': b'c'*10}})
"""])
    seen, bad = set(), []
    try:
        while writer.poll() is None:
            for p in checkpoints(root):
                seen.add(p.name)
                if problems := check_checkpoint(p): bad.append((p.name, problems))
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None: writer.kill(); writer.wait()
    assert not bad, f'a reader saw checkpoints that were not complete: {bad[:3]}'
    assert len(seen) >= 2, f'the reader saw only {sorted(seen)}: it did not overlap the writer'
    assert len(checkpoints(root)) == 30 and temporaries(root) == []

def test_rotation_removes_by_rename_aside(tmp_path):
    "SIGKILL in the middle of deleting a rotated checkpoint: its name is already gone, the whole folder waits as a hidden leftover"
    root = tmp_path/'checkpoints'
    for s in (1, 2, 3): write_checkpoint(root, s, {'model.safetensors': b'w'*100, 'state.pt': b's'*10})
    killed(KILL + f"import ddpsafe.storage.commit as c\nc.shutil.rmtree = die\nfrom ddpsafe.storage.manifest import Retention\nRetention(2).rotate({str(root)!r})")
    assert [p.name for p in checkpoints(root)] == [checkpoint_name(2), checkpoint_name(3)]
    [(aside, kind)] = temporaries(root)
    assert (kind, temporary_of(aside)[0]) == ('old', checkpoint_name(1)), aside
    assert check_checkpoint(aside) == [], 'the folder was renamed whole, manifest included, before any file was deleted'
    assert clean_incomplete(root) == [aside] and temporaries(root) == []

def test_rotation_order_rename_then_delete(tmp_path, monkeypatch):
    "What rotation deletes file by file is a hidden name; the checkpoint's name is gone before the first file goes"
    root = tmp_path/'checkpoints'
    for s in (1, 2, 3): write_checkpoint(root, s, {'w': b'w'})
    deleted = []
    real = ddpsafe.storage.commit._remove
    def spy(p):
        deleted.append((p.name, (root/checkpoint_name(1)).exists(), (p/MANIFEST).exists())); real(p)
    monkeypatch.setattr(ddpsafe.storage.commit, '_remove', spy)
    assert Retention(2).rotate(root) == [root/checkpoint_name(1)]
    assert len(deleted) == 1 and temporary_of(deleted[0][0]) == (checkpoint_name(1), 'old'), deleted
    assert deleted[0][1:] == (False, True), deleted

def test_failed_commit_keeps_errno_and_old_content(tmp_path):
    "An error with an error number comes out as OSError with that errno, naming the target; the old content stays"
    f = tmp_path/'state.pt'
    commit_file(f, b'old')
    def full(p): p.write_bytes(b'part'); raise OSError(errno.ENOSPC, 'No space left on device')
    with pytest.raises(OSError) as e: commit_file(f, full)
    assert e.value.errno == errno.ENOSPC and f'could not write {f}' in str(e.value) and 'is unchanged' in str(e.value)
    with pytest.raises(OSError) as e: write_checkpoint(tmp_path/'ck', 5, {'a': b'a', 'b': full})
    assert e.value.errno == errno.ENOSPC and 'earlier checkpoints are unchanged' in str(e.value)
    assert f.read_bytes() == b'old' and sorted(p.name for p in tmp_path.iterdir()) == ['ck', 'state.pt']
    assert list((tmp_path/'ck').iterdir()) == []

def test_each_file_hashed_once(tmp_path, monkeypatch):
    "A save with bytes and FileWriters reads no file back, and rotation after it reads none of the checkpoint it just wrote"
    reads = []
    monkeypatch.setattr(ddpsafe.storage.commit, 'file_digest', lambda p, *a, **k: reads.append(Path(p).name) or '0')
    monkeypatch.setattr(ddpsafe.storage.manifest, 'file_digest', lambda p, *a, **k: reads.append(Path(p).parent.name) or '0')
    root = tmp_path/'checkpoints'
    for s in (1, 2, 3):
        ck = write_checkpoint(root, s, {'model.safetensors': b'w'*100, 'state.pt': FileWriter(lambda f: f.write(b's'*10))})
        Retention(2).rotate(root, written=ck)
    assert reads == [], f'files read back for a checksum: {reads}'
    assert [p.name for p in checkpoints(root)] == [checkpoint_name(2), checkpoint_name(3)]
    m = read_manifest(root/checkpoint_name(3))
    assert m['files']['model.safetensors'] == dict(size=100, xxh3=xxhash.xxh3_64_hexdigest(b'w'*100))
    write_checkpoint(root, 4, {'old-style': lambda p: p.write_bytes(b'p')})      # a writer of a path: read back once
    assert reads == ['old-style']
    Retention(2).rotate(root)                                                     # without `written`: the newest is checked
    assert reads == ['old-style', checkpoint_name(4)]

def test_torch_writer_hash_matches_the_file(tmp_path):
    "torch.save through the hashing file gives the checksum of the bytes on disk"
    torch = pytest.importorskip('torch')
    from ddpsafe.files.codec import torch_writer, safetensors_writer
    ck = write_checkpoint(tmp_path, 1, {'state.pt': torch_writer({'w': torch.randn(300, 7), 'n': 3}),
                                        'model.safetensors': safetensors_writer({'w': torch.randn(5, 4).t()})})
    assert check_checkpoint(ck, checksums=True) == []
    assert torch.load(ck/'state.pt')['n'] == 3

@pytest.mark.parametrize('module', ['ddpsafe', 'ddpsafe.storage.commit', 'ddpsafe.storage.manifest', 'ddpsafe.storage.owner', 'ddpsafe.cli'])
def test_file_layer_imports_no_torch(module):
    "In a fresh interpreter, the file layer and the command-line tools load no torch and no fastai module"
    probe = f"import sys, {module}; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'fastai'))))"
    res = subprocess.run([sys.executable, '-c', 'import json; ' + probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [], f'importing {module} loaded {json.loads(res.stdout)[:10]}'
