"""Every wait in DDP training is bounded, and the rank that stopped answering is named.

Each test trains a small fastai model on 2 real CPU ranks inside `learn.distrib_ctx()` with `DDPSAFE_TIMEOUT=20`,
stops one rank mid-epoch with SIGSTOP (frozen) or SIGKILL (dead), and waits for the other rank to raise a
`DistTimeout` that names the stopped rank, then to exit. The process group is started a different way in each case:
by accelerate (from the launcher's variables), by fastai's `distrib_ctx(in_notebook=True)`, by the script's own
`init_process_group` with torch's 30-minute default (which ddpsafe must shorten to `DDPSAFE_TIMEOUT`), and under the
real `torchrun`, whose agent serves the store (so a frozen rank 0 is named by its silent heartbeat, not by its store).
Without ddpsafe the survivor waits 30 minutes in DDP's all-reduce: the bounded waits below turn that into a failure
naming the rank that never raised."""
from __future__ import annotations
import os, re, sys, time, signal, subprocess
from pathlib import Path
import pytest
from ddpsafe.testing import launch_ranks, wait_until

TIMEOUT = 20   # DDPSAFE_TIMEOUT for the ranks, in seconds
TORCHRUN = Path(sys.executable).parent/'torchrun'

SCRIPT = r'''
import os, sys, time
import torch, torch.distributed as dist
import ddpsafe.patches.learner                    # before fastai.distributed: the patches must follow its import
from fastai.distributed import *
from fastai.callback.core import Callback
from ddpsafe.dist.collectives import DistTimeout
from ddpsafe.testing import synth_learner

R = os.environ['RANK']
def say(msg): sys.stdout.write(f'R{R} {msg}\n'); sys.stdout.flush()   # one write: ranks share torchrun's stdout
say(f'PID {os.getpid()}')
class Slow(Callback):
    "Slow training steps, each announced, so that the test can stop a rank mid-epoch"
    def after_batch(self):
        if self.training: say(f'STEP {self.train_iter}'); time.sleep(0.1)

start = sys.argv[1]
if start == 'script': dist.init_process_group('gloo')      # torch's default timeout: 30 minutes
learn = synth_learner(n=8192, bs=8)
try:
    with learn.distrib_ctx(in_notebook=start == 'notebook'): learn.fit(1, cbs=Slow())
    say('FINISHED')
except DistTimeout as e:
    say(f'RAISED {time.time()} missing={e.missing} {e}')
    raise
'''

def wait_for(output, proc, who:str, pattern:str, timeout:float, rank:int|None=None) -> re.Match:
    "The first match of `pattern` in `output()`; `WaitTimeout` naming `who` if it does not come, an error if `proc` ends first"
    found = wait_until(lambda: re.search(pattern, output()) or proc.poll() is not None, timeout,
                       lambda: f'{pattern!r} in the output of {who}, which ends:\n{output()[-3000:]}', rank=rank)
    if found is True and not (found := re.search(pattern, output())):
        raise AssertionError(f'{who} exited with {proc.poll()} before printing {pattern!r}; the output ends:\n{output()[-3000:]}')
    return found

def check(m:re.Match, sent:float, victim:int, sig:str, how:str, code:int):
    "Assert that the survivor's error names `victim`; print how long it took"
    secs, missing, msg = float(m.group(1)) - sent, m.group(2), m.group(3)
    print(f'\n[{sig} rank {victim}, {how}] rank {1-victim} raised after {secs:.1f}s '
          f'(DDPSAFE_TIMEOUT={TIMEOUT}), exit code {code}: {msg[:150]}')
    assert missing == f'[{victim}]', msg
    assert f'rank {victim} stopped answering' in msg, msg
    assert code != 0

@pytest.mark.timeout(240)
@pytest.mark.parametrize('start,victim,sig', [('accelerate', 1, 'SIGSTOP'), ('notebook', 1, 'SIGKILL'), ('script', 0, 'SIGSTOP')])
def test_stopped_rank_is_named(tmp_path, start, victim, sig):
    "A rank frozen or killed mid-epoch: the other raises `DistTimeout` naming it, then exits"
    survivor = 1 - victim
    (tmp_path/'train.py').write_text(SCRIPT)
    procs = launch_ranks(tmp_path/'train.py', 2, args=[start], env={'DDPSAFE_TIMEOUT': str(TIMEOUT)}, cwd=tmp_path)
    out = lambda r: (lambda: procs.output(r))
    try:
        wait_for(out(victim), procs.procs[victim], f'rank {victim}', rf'R{victim} STEP 20(?!\d)', 120, rank=victim)
        sent = time.time(); procs.signal(victim, getattr(signal, sig))
        m = wait_for(out(survivor), procs.procs[survivor], f'rank {survivor}', rf'R{survivor} RAISED ([\d.]+) missing=(\S+) (.*)',
                     3*TIMEOUT + 30, rank=survivor)
        code = procs.procs[survivor].wait(30)                 # and it ends: a launcher sees the failure
    finally: procs.kill()
    check(m, sent, victim, sig, f'group started by {start}', code)

@pytest.mark.timeout(240)
def test_frozen_rank0_under_torchrun(tmp_path):
    "Under `torchrun` (the agent serves the store): rank 0 frozen, rank 1 names it from its heartbeat; torchrun exits non-zero"
    (tmp_path/'train.py').write_text(SCRIPT)
    log = tmp_path/'torchrun.log'
    env = {k: v for k, v in os.environ.items() if k not in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')}
    with open(log, 'w') as f:
        proc = subprocess.Popen([str(TORCHRUN), '--standalone', '--nproc_per_node', '2', str(tmp_path/'train.py'), 'accelerate'],
                                cwd=tmp_path, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**env, 'DDPSAFE_TIMEOUT': str(TIMEOUT), 'OMP_NUM_THREADS': '1'})
    output = lambda: log.read_text(errors='replace')
    try:
        wait_for(output, proc, 'torchrun', r'R0 STEP 20(?!\d)', 120, rank=0)
        pid0 = int(re.search(r'R0 PID (\d+)', output()).group(1))
        sent = time.time(); os.kill(pid0, signal.SIGSTOP)
        m = wait_for(output, proc, 'rank 1', r'R1 RAISED ([\d.]+) missing=(\S+) (.*)', 3*TIMEOUT + 30, rank=1)
        t = time.time(); code = proc.wait(120)               # torchrun sees rank 1 fail and ends the job
        print(f'\n[torchrun] exited {code} {time.time()-t:.1f}s after rank 1 raised')
    finally:
        try: os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError: pass
        try: os.kill(pid0, signal.SIGKILL)
        except (ProcessLookupError, NameError): pass
        proc.wait()
    check(m, sent, 0, 'SIGSTOP', 'torchrun', code)
