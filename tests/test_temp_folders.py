"""`ddpsafe.testing` leaves nothing in the system's temporary folder: the ranks' log folders (`ddpsafe-script-*`,
`ddpsafe-ranks-*`) and the S3 server's data folder (`ddpsafe-s3-*`) go when their ranks or server have ended, and at
the latest when the interpreter exits, whether or not the caller cleaned up. Each check runs in a fresh interpreter
whose `TMPDIR` is a folder of its own, so what is left there after it exited is what it left."""
from __future__ import annotations
import os, sys, subprocess
from pathlib import Path
import pytest

def left_behind(code:str, tmp_path:Path, timeout:float=180) -> list:
    "Run `code` in a fresh Python with `TMPDIR` = a new folder; the ddpsafe folders it left there"
    tmp = tmp_path/'tmp'; tmp.mkdir()
    try: p = subprocess.run([sys.executable, '-c', code], env={**os.environ, 'TMPDIR': str(tmp)}, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired: pytest.fail(f'the script did not end within {timeout} s:\n{code}')
    assert p.returncode == 0, p.stderr[-3000:]
    assert 'OK' in p.stdout, p.stdout
    return sorted(f.name for f in tmp.iterdir() if f.name.startswith('ddpsafe-'))

@pytest.mark.timeout(240)
def test_ranks_leave_nothing(tmp_path):
    "run_script, launch_ranks + wait, launch_ranks + kill, and launch_ranks never waited for (ended at exit), and run_ranks"
    code = '''
import sys, tempfile, time
from ddpsafe.testing import run_script, launch_ranks, run_ranks
hello = [sys.executable, '-c', 'print("hi")']
assert [o.strip() for o in run_script(hello, n=2, timeout=60)] == ['hi', 'hi']
p = launch_ranks(hello, n=2); assert p.wait(60) == [0, 0] and p.output(0).strip() == 'hi'
p = launch_ranks([sys.executable, '-c', 'import time; time.sleep(60)'], n=2); p.kill()
forgotten = launch_ranks(hello, n=2)              # never waited for: removed when the interpreter exits
assert forgotten.tmp.exists() and tempfile.gettempdir() in str(forgotten.tmp)
assert run_ranks(lambda: 1, n=2, init=False) == [1, 1]
print('OK')
'''
    assert left_behind(code, tmp_path) == []

@pytest.mark.timeout(240)
def test_s3_server_leaves_nothing(tmp_path):
    "An S3 server closed, one left to `with`, and one started and never stopped (stopped and removed at exit)"
    code = '''
from ddpsafe.testing import S3TestServer
S3TestServer().close()
with S3TestServer() as s3: pass
s3 = S3TestServer().start()                      # running when the interpreter exits
assert s3.dir.exists() and s3.proc.poll() is None
print('OK')
'''
    assert left_behind(code, tmp_path) == []
