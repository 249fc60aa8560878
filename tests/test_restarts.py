"""In-job restarts (issue 43): `torchrun --max-restarts 2` on 2 CPU ranks, rank 1 SIGKILLed mid-run after some
checkpoints; torchrun stops rank 0, starts both again, and the run resumes from the newest complete checkpoint by
itself. The checks: each rank was started again (a second PID in its marker log), the restarted rank 0 said it resumed
from a checkpoint at or after the kill's, both ranks ended with exit 0, and the final weights equal an uninterrupted
run's bit for bit. Run with torchrun's default rendezvous (the launcher's store, where ddpsafe starts the restarted group
on keys of its own: `ddpsafe.restarts`) and with the recipe's c10d flags.

A plain PyTorch script (tests/scripts/restart_plain.py) restarted twice: through `ddpsafe.restarts.init_default_group` with
the default rendezvous, and through `dist.init_process_group()` with the recipe's c10d flags.

Then the message: a restarted rank that cannot reach its peers gets an error naming the restart and the flags.

Every launch is bounded: a launcher that does not end in time fails naming the ranks without a result; a restart that
does not come fails naming the ranks that were not started again."""
from __future__ import annotations
import os, re, sys, signal, subprocess, time
from pathlib import Path
import pytest, torch
from ddpsafe.testing import wait_until, WaitTimeout
from conftest import final_weights, same_weights, Launch, report, torchrun_cmd, needs_torchrun, ROOT

SCRIPT = ROOT/'tests'/'scripts'/'launcher_train.py'
N_EPOCH, SAVES_BEFORE_KILL = 4, 4
# torchrun flags of each way to restart; the c10d one is the recipe's (docs_src/recipes.md, "In-job restarts")
RDZV = dict(default=([], {}),
            c10d=(['--rdzv-backend', 'c10d', '--rdzv-endpoint', 'localhost:0'], dict(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)))

def train_args(run:Path) -> list:
    return [str(SCRIPT), str(run), str(N_EPOCH), '--marks', str(run/'marks'), '--out', str(run/'w'), '--workers', '0']

def pids(l:Launch, r:int) -> list: return [int(x.split()[1]) for x in l.marks(r) if x.startswith('PID ')]

@pytest.fixture(scope='module')
def tmp_root(tmp_path_factory): return tmp_path_factory.mktemp('restarts')

_baseline = {}
def baseline(tools, tmp_root:Path) -> list:
    "The final weights of an uninterrupted run of the same script (once per session)"
    if 'w' not in _baseline:
        run = tmp_root/'baseline'
        l = Launch(torchrun_cmd() + train_args(run), run, tools, 'baseline')
        code = l.wait(180)
        report(launch='torchrun, uninterrupted', exit=code, seconds=l.seconds)
        assert code == 0, l.output()[-4000:]
        _baseline['w'] = final_weights(run)
    return _baseline['w']

@needs_torchrun
@pytest.mark.timeout(480)
@pytest.mark.parametrize('rdzv', list(RDZV))
def test_restart_after_sigkill(tools, tmp_root, rdzv):
    "SIGKILL to rank 1 after the 4th checkpoint: torchrun restarts the group, which resumes and ends as if never stopped"
    base = baseline(tools, tmp_root)
    flags, extra = RDZV[rdzv]
    run = tmp_root/f'restart-{rdzv}'
    l = Launch(torchrun_cmd('--max-restarts', '2', *flags) + train_args(run), run, tools, 'restarted', **extra)
    l.wait_saves(SAVES_BEFORE_KILL)
    killed_after = int(l.saves(0)[-1][0])
    first = [pids(l, r) for r in range(2)]
    os.kill(l.pid(1), signal.SIGKILL)
    t_kill = time.monotonic()
    try: wait_until(lambda: all(len(pids(l, r)) > len(first[r]) for r in range(2)) or l.proc.poll() is not None, 120,
                    'both ranks started again', every=0.1)
    except WaitTimeout: pass
    not_restarted = [r for r in range(2) if len(pids(l, r)) <= len(first[r])]
    if not_restarted:
        l.kill()
        pytest.fail(f'{rdzv}: torchrun did not start rank(s) {not_restarted} again within 120 s of the SIGKILL '
                    f'(launcher exit {l.proc.poll()})\n{l.output()[-4000:]}')
    code = l.wait(240)
    starts = [len(pids(l, r)) for r in range(2)]
    res = l.results()
    out = l.output()
    resumed = [int(s) for s in re.findall(r'ddpsafe: resumed from \S+ at .*?\(step (\d+)\)', out)]
    report(launch=f'torchrun --max-restarts 2 ({rdzv})', killed='rank 1, SIGKILL', launcher_exit=code, starts=starts,
           resumed_at=resumed, killed_after_save=killed_after, restart_seconds=round(time.monotonic() - t_kill, 1), seconds=l.seconds,
           connect_failures=out.count('connectFullMesh failed'))
    assert code == 0, f'{rdzv}: torchrun exited {code} (starts per rank {starts})\n{out[-5000:]}'
    assert starts == [2, 2], f'{rdzv}: expected one restart of each rank, got {starts} starts: a restart failed\n{out[-5000:]}'
    assert [x and x['code'] for x in res] == [0, 0], res
    assert resumed and resumed[-1] >= killed_after, f'the restarted run did not resume from step >= {killed_after}: {resumed}\n{out[-3000:]}'
    assert all(same_weights(a, b) for a, b in zip(final_weights(run), base)), 'the restarted run ended with weights unlike the uninterrupted run'

PLAIN = ROOT/'tests'/'scripts'/'restart_plain.py'

@needs_torchrun
@pytest.mark.timeout(200)
@pytest.mark.parametrize('how, rdzv', [('ddpsafe', 'default'), ('torch', 'c10d')])
def test_plain_torch_restarts(tmp_path, how, rdzv):
    """A plain PyTorch script whose rank 1 SIGKILLs itself in the first 2 attempts: torchrun's 2 restarts both start a group
    that works, when the script starts it with `init_default_group` (default rendezvous), or with `dist.init_process_group()`
    under the recipe's c10d flags"""
    flags, extra = RDZV[rdzv]
    cmd = torchrun_cmd('--max-restarts', '2', *flags) + [str(PLAIN), how]
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', **{k: str(v) for k, v in extra.items()}}
    t0 = time.monotonic()
    try: p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=170, cwd=tmp_path)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b'').decode(errors='replace') if isinstance(e.stdout, bytes) else (e.stdout or '')
        started = re.findall(r'STARTED rank (\d) attempt (\d)', out)
        pytest.fail(f'{how}/{rdzv}: torchrun did not end within 170 s; groups started (rank, attempt): {started}\n{out[-3000:]}')
    out = p.stdout + p.stderr
    started, done = re.findall(r'STARTED rank (\d) attempt (\d)', out), re.findall(r'DONE rank (\d) attempt (\d)', out)
    report(launch=f'plain torch ({how}), torchrun --max-restarts 2 ({rdzv})', exit=p.returncode, started=sorted(started),
           connect_failures=out.count('connectFullMesh failed'), seconds=round(time.monotonic() - t0, 1))
    assert p.returncode == 0, f'{how}/{rdzv}: torchrun exited {p.returncode}; groups started: {sorted(started)}\n{out[-4000:]}'
    assert sorted(done) == [('0', '2'), ('1', '2')], (done, out[-3000:])
    assert {a for _, a in started} == {'0', '1', '2'}, f'an attempt did not start its group: {sorted(started)}'

NO_PEER = r"""
import os, sys
from datetime import timedelta
from ddpsafe.restarts import init_default_group
try: init_default_group('gloo', timedelta(seconds=float(sys.argv[1])))
except RuntimeError as e: print('ERROR', type(e).__name__, e, flush=True); sys.exit(3)
print('STARTED', flush=True)
"""

@pytest.mark.timeout(120)
@pytest.mark.parametrize('restart', [0, 1])
def test_restart_without_peer_is_named(tmp_path, restart):
    """Rank 0 of 2 whose peer never comes (a restart whose other rank reads stale addresses, or died again): on a restart
    the error names the restart and the flags; on a first start, torch's error stands as it is"""
    import socket
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    env = {**os.environ, 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(port), 'RANK': '0', 'WORLD_SIZE': '2',
           'TORCHELASTIC_RESTART_COUNT': str(restart), 'TORCHELASTIC_USE_AGENT_STORE': 'False'}
    try: p = subprocess.run([sys.executable, '-c', NO_PEER, '5'], env=env, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired: pytest.fail('rank 0 alone did not give up within 90 s (group timeout 5 s): it waits instead of failing')
    assert p.returncode == 3, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    named = f'restart {restart} of this job could not start its process group' in p.stdout
    assert named == bool(restart), p.stdout[-2000:]
    if restart: assert '--rdzv-backend c10d' in p.stdout and 'TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1' in p.stdout, p.stdout
