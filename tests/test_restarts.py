"""In-job restarts (issue 43): `torchrun --max-restarts 2` on 2 CPU ranks, rank 1 SIGKILLed mid-run after some
checkpoints; torchrun stops rank 0, starts both again, and the run resumes from the newest complete checkpoint by
itself. The checks: each rank was started again (a second PID in its marker log), the restarted rank 0 said it resumed
from a checkpoint at or after the kill's, both ranks ended with exit 0, and the final weights equal an uninterrupted
run's bit for bit. Run with torchrun's default rendezvous (the launcher's store, where ddpsafe starts the restarted group
on keys of its own: `ddpsafe.dist.restarts`) and with the recipe's c10d flags.

A plain PyTorch script (tests/scripts/restart_plain.py) restarted twice: through `ddpsafe.dist.restarts.init_default_group` with
the default rendezvous, and through `dist.init_process_group()` with the recipe's c10d flags.

The c10d flags' own race, reproduced beside a churn of ports in a network namespace of its own: the launcher picks the
workers' port without holding it, and a start whose port was taken ends on `EADDRINUSE`; through ddpsafe's restart store,
never.

Then the message: a restarted rank that cannot reach its peers gets an error naming the restart and the flags.

Every launch is bounded: a launcher that does not end in time fails naming the ranks without a result; a restart that
does not come fails naming the ranks that were not started again."""
from __future__ import annotations
import os, re, sys, signal, subprocess, time
from pathlib import Path
import pytest, torch
from ddpsafe.testing import wait_until, WaitTimeout
from conftest import final_weights, same_weights, Launch, report, torchrun_cmd, needs_torchrun, counts, ROOT

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
           connect_failures=out.count('connectFullMesh failed'), port_races=port_races(out))
    assert code == 0, f'{rdzv}: torchrun exited {code} (starts per rank {starts})\n{out[-5000:]}'
    races = port_races(out) if rdzv == 'c10d' else 0   # a start the recipe's port race ended: one more start of each rank
    assert starts == [2 + races] * 2, f'{rdzv}: expected one restart of each rank, got {starts} starts: a restart failed\n{out[-5000:]}'
    assert [x and x['code'] for x in res] == [0, 0], res
    assert resumed and resumed[-1] >= killed_after, f'the restarted run did not resume from step >= {killed_after}: {resumed}\n{out[-3000:]}'
    assert all(same_weights(a, b) for a, b in zip(final_weights(run), base)), 'the restarted run ended with weights unlike the uninterrupted run'

PLAIN = ROOT/'tests'/'scripts'/'restart_plain.py'

def port_races(out:str) -> int:
    """How many starts failed on torch's own port race: with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` the launcher picks the
    workers' `MASTER_PORT` with `get_free_port`, which does not hold it, and another process on the machine may take it before
    rank 0 listens there (`EADDRINUSE`). Rank 0's error says so once per start it ended"""
    return len(re.findall(r'(?i)address already in use', out))

def launch_plain(cmd:list, env:dict, cwd:Path, timeout:float) -> tuple:
    "(output, exit code) of a launch of the plain script; the exit code is `None` when it did not end in `timeout` s"
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                         start_new_session=True)
    try: return p.communicate(timeout=timeout)[0], p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)   # torchrun and its workers, not torchrun alone
        return p.communicate()[0], None

def not_done(out:str) -> list: return [r for r in '01' if f'DONE rank {r}' not in out]

@needs_torchrun
@pytest.mark.timeout(200)
@pytest.mark.parametrize('how, rdzv', [('ddpsafe', 'default'), ('torch', 'c10d')])
def test_plain_torch_restarts(tmp_path, how, rdzv):
    """A plain PyTorch script whose rank 1 SIGKILLs itself in the first 2 attempts whose group started: torchrun starts a group
    that works after each kill, when the script starts it with `init_default_group` (default rendezvous), or with
    `dist.init_process_group()` under the recipe's c10d flags. `--max-restarts 3` leaves one restart for a start that the
    recipe's port race ends (`port_races`); through ddpsafe every start must start its group"""
    flags, extra = RDZV[rdzv]
    cmd = torchrun_cmd('--max-restarts', '3', *flags) + [str(PLAIN), how]
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', 'KILLS': '2', **{k: str(v) for k, v in extra.items()}}
    t0 = time.monotonic()
    out, code = launch_plain(cmd, env, tmp_path, 170)
    if code is None:
        started = re.findall(r'STARTED rank (\d) attempt (\d)', out)
        pytest.fail(f'{how}/{rdzv}: torchrun did not end within 170 s: rank(s) {not_done(out)} never ended; groups started '
                    f'(rank, attempt): {started}\n{out[-3000:]}')
    started, done = re.findall(r'STARTED rank (\d) attempt (\d)', out), re.findall(r'DONE rank (\d) attempt (\d)', out)
    kills = (tmp_path/'kills').read_text().split('\n')[:-1] if (tmp_path/'kills').exists() else []
    last = max((int(a) for _, a in done), default=-1)
    not_started = [a for a in range(last + 1) if (str(a) not in {x for _, x in started})]
    races = port_races(out)
    report(launch=f'plain torch ({how}), torchrun --max-restarts 3 ({rdzv})', exit=code, started=sorted(started),
           kills=kills, port_races=races, connect_failures=out.count('connectFullMesh failed'),
           seconds=round(time.monotonic() - t0, 1))
    assert code == 0, f'{how}/{rdzv}: torchrun exited {code}; groups started: {sorted(started)}\n{out[-4000:]}'
    assert len(kills) == 2, f'{how}/{rdzv}: rank 1 killed itself {len(kills)} times, not 2: {kills}\n{out[-3000:]}'
    assert sorted(done) == [('0', str(last)), ('1', str(last))], (done, out[-3000:])
    assert all(sorted(r for r, a in started if a == x) == ['0', '1'] for _, x in started), f'a start reached only one rank: {started}'
    if how == 'ddpsafe': assert not not_started, f'attempt(s) {not_started} did not start their group\n{out[-4000:]}'
    assert len(not_started) <= races, (f'{how}/{rdzv}: attempt(s) {not_started} did not start their group, '
                                       f'and not on the port race ({races})\n{out[-4000:]}')

CHURN = ROOT/'tests'/'scripts'/'port_churn.py'

def churned_restart(folder:Path, how:str, rdzv:str) -> str|None:
    """One launch of the plain script, rank 1 killed once, `--max-restarts 1`, in a network namespace of its own beside a
    churn of 1,700 ports (1,500 held, 200 free): `None` if the restart started its group and the job ended, else what went wrong"""
    folder.mkdir()
    flags, extra = RDZV[rdzv]
    cmd = [sys.executable, str(CHURN), '1500', '--'] + torchrun_cmd('--max-restarts', '1', *flags) + [str(PLAIN), how]
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', 'KILLS': '1', **{k: str(v) for k, v in extra.items()}}
    out, code = launch_plain(cmd, env, folder, 150)
    if code is None: return f'hang: rank(s) {not_done(out)} did not end within 150 s'
    if 'port_churn:' in out: pytest.fail(out[-2000:])
    if code == 0 and len(re.findall(r'DONE rank \d', out)) == 2: return None
    return 'EADDRINUSE' if port_races(out) else f'exit {code}: {out[-300:]}'

@needs_torchrun
@pytest.mark.timeout(400)
@pytest.mark.parametrize('n', counts(3, 10, timeout=1800))    # 9 of 10 reproduced: 3 miss it 1 time in 1,000
def test_restart_port_race(tmp_path, report_race, n):
    """The port race of the recipe's c10d flags: the launcher picks the restarted workers' port without holding it, and on a
    machine whose other jobs take ports, rank 0 finds it taken (`EADDRINUSE`), which ends the start and spends a restart.
    Through ddpsafe's restart store (default rendezvous) the workers meet on the launcher's store, whose port is held: no race"""
    unguarded = [churned_restart(tmp_path/f'u{i}', 'torch', 'c10d') for i in range(n)]
    guarded = [churned_restart(tmp_path/f'g{i}', 'ddpsafe', 'default') for i in range(n)]
    rec = report_race('restart_port_race', unguarded, guarded,
                      what='torchrun --max-restarts 1, rank 1 killed once, 1,700 ports churned: c10d recipe vs init_default_group')
    assert rec['ddpsafe_failures'] == 0, f'init_default_group with the default rendezvous failed {rec["ddpsafe_failures"]}/{n}: {guarded}'
    assert rec['unguarded_failures'] >= 1, f'the port race of the c10d recipe did not reproduce in {n} launches: {unguarded}'

NO_PEER = r"""
import os, sys
from datetime import timedelta
from ddpsafe.dist.restarts import init_default_group
try: init_default_group('gloo', timedelta(seconds=float(sys.argv[1])))
except RuntimeError as e: print(f'ERROR {type(e).__name__} {e}', flush=True); sys.exit(3)
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
