"""One run owns a checkpoints folder: real processes racing to claim it, an owner killed with SIGKILL, a requeued job,
a stalled owner on another machine, release, and the claim through `on_main` on 2 ranks."""
from __future__ import annotations
import os, sys, json, time, socket, signal, subprocess
from pathlib import Path
import pytest
from ddpsafe.storage.owner import *
from ddpsafe.testing import wait_until
from ddpsafe.storage.owner import _create, _record

CLAIMER = r"""
import sys, time
from pathlib import Path
from ddpsafe.storage.owner import claim_folder, FolderInUse
root, start, done = Path(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
time.sleep(max(0, start-time.time()))
try: c = claim_folder(root, heartbeat=0.5)
except FolderInUse as e: print('LOST', e, flush=True); sys.exit(3)
print('WON', c.note, flush=True)
while not done.exists(): time.sleep(0.05)
c.release()
print('RELEASED', flush=True)
"""

def start_claimer(root:Path, done:Path, start:float|None=None, env:dict|None=None) -> subprocess.Popen:
    "A process that claims `root` at time `start`, holds it until `done` exists, then releases it"
    return subprocess.Popen([sys.executable, '-c', CLAIMER, str(root), str(start or 0), str(done)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})

def finish(p:subprocess.Popen, name:str, timeout:float=60) -> tuple:
    "(exit code, output) of `p`; a clear failure naming `name` if it hangs"
    try: code = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill(); p.wait()
        raise AssertionError(f'{name} (pid {p.pid}) did not finish within {timeout} s:\n{p.stdout.read()}')
    return code, p.stdout.read()

def wait_for_owner(root:Path, pid:int, timeout:float=30):
    "Wait until `pid`'s record is in `root`"
    return wait_until(lambda: (rec := read_owner(root)) is not None and rec.get('pid') == pid and rec, timeout,
                      f'process {pid} to claim {root}')

@pytest.mark.timeout(180)
@pytest.mark.parametrize('attempt', range(5))
def test_two_processes_race(tmp_path, attempt):
    "Two processes claim one folder at the same instant: one wins, the other fails fast naming the winner"
    root, done = tmp_path/'checkpoints', tmp_path/'done'
    start = time.time() + 1.0                   # both have imported ddpsafe.storage.owner (about 0.2 s) by then
    ps = [start_claimer(root, done, start) for _ in range(2)]
    try:
        wait_until(lambda: any(p.poll() is not None for p in ps), 60,      # the loser exits; the winner holds the folder
                   'one claimer to give up (none did: both hold the folder, or both hang)')
        loser = next(i for i, p in enumerate(ps) if p.poll() is not None)
        lcode, lout = finish(ps[loser], f'claimer {loser}')
        winner = 1 - loser
        assert read_owner(root)['pid'] == ps[winner].pid, read_owner(root)
        done.touch()
        wcode, wout = finish(ps[winner], f'claimer {winner}')
    finally:
        for p in ps:
            if p.poll() is None: p.kill()
    assert (wcode, lcode) == (0, 3), f'winner: {wcode} {wout}\nloser: {lcode} {lout}'
    assert wout.startswith('WON None') and 'RELEASED' in wout, wout
    pid = ps[winner].pid
    assert lout.startswith('LOST') and f'(host {socket.gethostname()}, pid {pid}, started ' in lout, lout
    assert f'Process {pid} is running on this machine' in lout, lout
    assert read_owner(root) is None, 'the winner did not remove its record'
    assert sorted(p.name for p in root.iterdir()) == [], f'files left in the folder: {list(root.iterdir())}'

@pytest.mark.timeout(120)
def test_second_run_refused_then_owner_killed(tmp_path):
    "A live owner refuses a second run even with the same job id; once SIGKILLed (record left behind), it is taken over"
    root, done = tmp_path/'checkpoints', tmp_path/'done'
    env = dict(SLURM_JOB_ID='555')
    a = start_claimer(root, done, env=env)
    try:
        rec = wait_for_owner(root, a.pid)
        assert rec['job'] == 'SLURM_JOB_ID=555' and rec['host'] == socket.gethostname()
        b = start_claimer(root, done, env=env)
        code, out = finish(b, 'second claimer')
        assert code == 3 and f'pid {a.pid}' in out and 'job SLURM_JOB_ID=555' in out, out
        a.send_signal(signal.SIGKILL); a.wait(30)
        assert read_owner(root)['pid'] == a.pid, 'SIGKILL should leave the record behind'
        c = start_claimer(root, done)
        rec = wait_for_owner(root, c.pid)
        done.touch()
        code, out = finish(c, 'claimer after the kill')
        assert code == 0 and f'WON ddpsafe: {root}: taking over the folder from host {socket.gethostname()}, pid {a.pid}' in out, out
        assert f'its process {a.pid} on {socket.gethostname()} is gone' in out, out
        assert read_owner(root) is None
    finally:
        for p in (a,):
            if p.poll() is None: p.kill()

def remote_owner(root:Path, beat_age:float=0., job:str|None=None, heartbeat:float=5.) -> dict:
    "A record as a run on another machine would have written it, `beat_age` s after its last heartbeat"
    rec = {**_record('remote', heartbeat), 'host': 'gpu-7', 'machine': 'other-boot pid:[4026531836]', 'pid': 4242,
           'job': job, 'beat': time.time() - beat_age, 'command': 'train.py --epochs 90'}
    assert _create(root, rec)
    return rec

@pytest.mark.timeout(60)
def test_remote_owner_by_heartbeat(tmp_path, monkeypatch):
    "Another machine's owner: fresh heartbeat refuses, a stale one is taken over with a message printed on this process"
    for v in ('DDPSAFE_RUN_ID', 'SLURM_JOB_ID', 'TORCHELASTIC_RUN_ID'): monkeypatch.delenv(v, raising=False)
    root = tmp_path/'ck'; root.mkdir()
    remote_owner(root, beat_age=10)
    with pytest.raises(FolderInUse) as e: claim_folder(root)
    msg = str(e.value)
    assert 'host gpu-7, pid 4242, started ' in msg and "command 'train.py --epochs 90'" in msg, msg
    assert 'counts as gone 60 s after its last heartbeat (10 s ago)' in msg and str(root/OWNER) in msg, msg
    assert e.value.owner['host'] == 'gpu-7' and read_owner(root)['token'] == 'remote'
    (root/OWNER).unlink()
    remote_owner(root, beat_age=90)
    c = claim_folder(root)
    try:
        assert c.note.startswith(f'ddpsafe: {root}: taking over the folder from host gpu-7, pid 4242') and 'no heartbeat for 90 s' in c.note
        assert read_owner(root)['token'] == c.token
    finally: c.release()
    assert read_owner(root) is None

@pytest.mark.timeout(60)
@pytest.mark.parametrize('var', ['SLURM_JOB_ID', 'DDPSAFE_RUN_ID', 'TORCHELASTIC_RUN_ID'])
def test_same_job_takes_over(tmp_path, monkeypatch, var):
    "A requeued run of the same job takes over from its predecessor's fresh record at once; another job is refused"
    for v in ('DDPSAFE_RUN_ID', 'SLURM_JOB_ID', 'TORCHELASTIC_RUN_ID'): monkeypatch.delenv(v, raising=False)
    root = tmp_path/'ck'; root.mkdir()
    remote_owner(root, beat_age=1, job=f'{var}=77')
    monkeypatch.setenv(var, '78')
    with pytest.raises(FolderInUse): claim_folder(root, quiet=True)
    monkeypatch.setenv(var, '77')
    c = claim_folder(root, quiet=True)
    try: assert f'the same job ({var}=77) started again' in c.note, c.note
    finally: c.release()

@pytest.mark.timeout(60)
def test_same_process_and_release(tmp_path):
    "A second claim by the same process is the same claim; release removes only our own record"
    root = tmp_path/'ck'
    c = claim_folder(root, heartbeat=0.1)
    assert claim_folder(root) is c and c.note is None
    c.release(); assert read_owner(root)['token'] == c.token
    c.release(); assert read_owner(root) is None and not c.active
    c2 = claim_folder(root, heartbeat=0.1)
    assert c2 is not c and read_owner(root)['token'] == c2.token
    (root/OWNER).unlink(); remote_owner(root)               # another run took the folder over (this one looked stalled)
    wait_until(lambda: c2.lost is not None, 10, 'the heartbeat to notice the takeover')
    assert c2.lost['host'] == 'gpu-7', c2.lost
    with pytest.raises(FolderInUse, match='another run took this folder over'): c2.check()
    c2.release()
    assert read_owner(root)['token'] == 'remote', "release removed another run's record"

def _claim_on_ranks(root):
    "Each rank: claim through on_main, then report what it got"
    from ddpsafe.dist.collectives import on_main, rank
    try: c = on_main(claim_folder, root)
    except FolderInUse as e: return ('in use', type(e).__name__, e.owner['pid'])
    got = (c.active, c.record['pid'])
    on_main(c.release)
    return got

@pytest.mark.timeout(180)
def test_claim_through_on_main(tmp_path):
    "On 2 ranks: rank 0 owns, rank 1 gets an inactive copy; an owned folder raises FolderInUse on both ranks"
    from ddpsafe.testing import run_ranks
    root = tmp_path/'ck'
    res = run_ranks(_claim_on_ranks, 2, args=(root,), timeout=120)
    assert res[0][0] is True and res[1][0] is False and res[0][1] == res[1][1], res
    assert read_owner(root) is None
    root.mkdir(exist_ok=True); remote_owner(root)
    res = run_ranks(_claim_on_ranks, 2, args=(root,), timeout=120)
    assert res == [('in use', 'FolderInUse', 4242)]*2, res
