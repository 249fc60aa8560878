"""Goodput under preemption: useful optimizer steps per second of a job (`torchrun_fit.py`, 2 CPU ranks under `torchrun`)
preempted again and again (`SCENARIOS`), against the same job left alone, and where the lost time goes (`SHARES`).
Method and shares: the benchmarks page, "Goodput under preemption".

    python bench/goodput_bench.py --parallel --seconds 360       # all 5 at once (16 cores) -> results/goodput.json
    python bench/goodput_bench.py --recount                      # the accounting again from results/goodput_raw.json.gz"""
from __future__ import annotations
import os, sys, gzip, json, time, shutil, signal, socket, argparse, statistics, subprocess, tempfile, importlib.util
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, write_json, machine, now, command
ROOT = HERE.parent
TRAIN, REQUEUE = HERE/'torchrun_fit.py', ROOT/'examples'/'requeue.sh'
BIN = Path(sys.executable).parent

# stamps the launch (number, time, pid) and becomes the launcher: the scheduler's signal reaches torchrun itself
WRAP = r'''n=$(cat "$BENCH_LOG/launches.jsonl" 2>/dev/null | wc -l)
echo "{\"ev\": \"launch\", \"t\": $EPOCHREALTIME, \"pid\": $$, \"launch\": $n}" >> "$BENCH_LOG/launches.jsonl"
export BENCH_LAUNCH=$n
exec "$@"'''
# `ddpsafe-status`, stamped: what requeue.sh and the benchmark's own loop call
STATUS = '''#!/usr/bin/env bash
echo "{\\"ev\\": \\"status_start\\", \\"t\\": $EPOCHREALTIME}" >> "$BENCH_LOG/status.jsonl"
{real} "$@"; code=$?
echo "{\\"ev\\": \\"status_end\\", \\"t\\": $EPOCHREALTIME, \\"code\\": $code}" >> "$BENCH_LOG/status.jsonl"
exit $code
'''

# `ddpsafe-status`, where sys.executable's folder lacks the console script: the same interpreter runs it
STATUS_PY = 'import sys\nfrom ddpsafe.cli import ddpsafe_status\nsys.exit(ddpsafe_status())\n'   # as pyproject.toml's [project.scripts]

SCENARIOS = ('baseline', 'sigterm', 'sigkill', 'auto', 'memory')
KILLED = ('sigkill', 'auto', 'memory')       # a SIGKILL of a rank every --kill-every s; the benchmark's own loop starts the job again
INFO = ('interval', 'ctx', 'before_fit', 'ddp_wrapped', 'first_step', 'epoch')    # events that tell, not a boundary of the accounting

SHARES = ['useful steps', 'steps done twice', 'saves', 'saves: memory', 'start-up: launcher', 'start-up: interpreter', 'start-up: imports',
          'start-up: init', 'resume', 'stop and exit', 'launcher shut-down', 'requeue', 'cut at the end']
SHARE_OF = {'proc': 'start-up: launcher', 'py_start': 'start-up: interpreter', 'import_torch': 'start-up: imports', 'import_fastai': 'start-up: imports',
            'import_ddpsafe': 'start-up: imports', 'learner': 'start-up: init', 'fit_start': 'start-up: init', 'resume_start': 'resume',
            'resume_end': 'resume', 'fit_ready': 'resume', 'fit_end': 'stop and exit', 'exit': 'stop and exit',
            'status_start': 'launcher shut-down', 'status_end': 'requeue', 'launch': 'requeue'}   # an interval: the share of the event that ends it

def free_ports(n:int) -> list:
    "`n` distinct TCP ports free now on this machine (held open together while chosen): each job's torchrun rendezvous gets its own"
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks: s.bind(('127.0.0.1', 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks: s.close()

def child_env() -> dict:
    "The jobs' environment: CPU only (no GPU: on a machine with one, the ranks would take NCCL and share it), `PYTHONPATH` made absolute (they run in their work folders), with the repository when ddpsafe is not importable otherwise"
    pp = [str(Path(x).resolve()) for x in os.environ.get('PYTHONPATH', '').split(os.pathsep) if x]
    if importlib.util.find_spec('ddpsafe') is None and str(ROOT) not in pp: pp.append(str(ROOT))
    return {**os.environ, 'CUDA_VISIBLE_DEVICES': '', **({'PYTHONPATH': os.pathsep.join(pp)} if pp else {})}

def uptime() -> str:
    "`uptime`'s line; where there is no `uptime` (a bare container), the load averages from /proc/loadavg"
    try: return subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()
    except OSError: return 'load average: ' + ', '.join(Path('/proc/loadavg').read_text().split()[:3])

def read_jsonl(p:Path) -> list:
    "The complete JSON lines of `p` (a line cut by a SIGKILL is left out)"
    out = []
    if p.exists():
        for line in p.read_text().splitlines():
            try: out.append(json.loads(line))
            except json.JSONDecodeError: pass
    return out

def alive(pid:int) -> bool:
    try: return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z'
    except (FileNotFoundError, ProcessLookupError, IndexError): return False

class Job:
    "One scenario's job: its folders, environment, launches and the signals sent to it"
    def __init__(self, name:str, folder:Path, a, port:int|None=None):
        self.name, self.dir, self.a = name, folder, a
        self.job, self.logs, self.bin = folder/'job', folder/'logs', folder/'bin'
        for d in (self.job, self.logs, self.bin): d.mkdir(parents=True, exist_ok=True)
        real = shutil.which('ddpsafe-status', path=str(BIN))
        real = f'"{real}"' if real else f'"{sys.executable}" "{self.script("ddpsafe_status.py", STATUS_PY)}"'
        self.script('ddpsafe-status', STATUS.replace('{real}', real))
        self.env = {**child_env(), 'PATH': f'{self.bin}:{BIN}:{os.environ.get("PATH", "")}', 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1',
                    'DDPSAFE_TIMEOUT': '60', 'BENCH_LOG': str(self.logs)}
        self.ckpt, self.port = self.job/'checkpoints', port or free_ports(1)[0]
        shm = Path('/dev/shm') if Path('/dev/shm').is_dir() else Path(tempfile.gettempdir())
        self.memory = shm/f'ddpsafe-goodput-{os.getpid()}-{name}' if name == 'memory' else None
        self.config = dict(every_seconds='auto' if name == 'auto' else a.save_every_seconds, port=self.port,
                           status=real, **(dict(memory_every_steps=a.memory_every_steps, memory_path=str(self.memory)) if self.memory else {}))
        self.out = open(folder/'output.log', 'a')
        self.sent, self.notes, self.procs = [], [], []

    def script(self, name:str, text:str) -> Path:
        "An executable file in the job's `bin`"
        (f := self.bin/name).write_text(text); f.chmod(0o755)
        return f
    def launch_cmd(self) -> list:
        c = self.config
        mem = ['--memory-every-steps', str(c['memory_every_steps']), '--memory-path', c['memory_path']] if self.memory else []
        return ['bash', '-c', WRAP, 'launch', sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', '--master_port', str(self.port), str(TRAIN),
                str(self.job), '--every-seconds', str(c['every_seconds']), *mem]
    def start(self, cmd:list) -> subprocess.Popen:
        p = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True, env=self.env, cwd=self.job)
        self.procs.append(p)
        return p
    def launches(self) -> list: return read_jsonl(self.logs/'launches.jsonl')
    def rank_events(self, n:int, r:int) -> list: return read_jsonl(self.logs/f'launch{n}.rank{r}.jsonl')
    def launcher_pid(self) -> int|None:
        "The newest launch's torchrun, if it is alive"
        ls = self.launches()
        return ls[-1]['pid'] if ls and alive(ls[-1]['pid']) else None
    def rank_pid(self, r:int) -> int|None:
        "Rank `r` of the newest launch, if it is alive"
        ls = self.launches()
        if not ls: return None
        pids = [e['pid'] for e in self.rank_events(ls[-1]['launch'], r) if e['ev'] == 'proc']
        return pids[-1] if pids and alive(pids[-1]) else None
    def status(self) -> int:
        return subprocess.run(['ddpsafe-status', str(self.ckpt)], env=self.env, stdout=self.out, stderr=subprocess.STDOUT, timeout=120).returncode
    def stop(self, timeout:float=60.):
        "After the window: SIGTERM to every live loop or launcher, then SIGKILL to what is left (ranks included)"
        for pid in [p.pid for p in self.procs if p.poll() is None] + [pid for pid in [self.launcher_pid()] if pid]:
            with suppress(ProcessLookupError): os.kill(pid, signal.SIGTERM)
        t = time.monotonic() + timeout
        while time.monotonic() < t and any(p.poll() is None for p in self.procs): time.sleep(0.1)
        ranks = [e['pid'] for f in self.logs.glob('launch*.rank*.jsonl') for e in read_jsonl(f) if e['ev'] == 'proc']
        for pid, kill in product([p.pid for p in self.procs] + ranks, (os.killpg, os.kill)):
            with suppress(ProcessLookupError, PermissionError): kill(pid, signal.SIGKILL)
        for p in self.procs: p.wait()
        self.out.close()
        if self.memory: shutil.rmtree(self.memory, ignore_errors=True)

def run_scenario(name:str, folder:Path, a, port:int|None=None) -> dict:
    "Run one scenario for `a.seconds`: its raw events, the signals sent, notes"
    job = Job(name, folder, a, port)
    every = a.kill_every if name in KILLED else dict(baseline=None, sigterm=a.term_every)[name]
    t0 = time.time(); end = t0 + a.seconds
    own_loop = name in KILLED
    start = lambda: job.start(job.launch_cmd() if own_loop else ['bash', str(REQUEUE), str(job.ckpt), *job.launch_cmd()])
    proc, nxt, kills = start(), (t0 + every if every else None), 0
    print(f'{name}: {a.seconds:.0f} s' + (f', {"SIGTERM to torchrun" if name == "sigterm" else "SIGKILL to a rank"} every {every:g} s' if every else ''), flush=True)
    while (now := time.time()) < end:
        if proc.poll() is not None:                       # the launcher (own loop) or requeue.sh ended
            if own_loop:
                code = job.status()                       # stamped by the shim, as requeue.sh's call is
                if code in (0, 3): job.notes.append(f'{now - t0:.1f}s: ddpsafe-status {code}: not started again'); break
            else: job.notes.append(f'{now - t0:.1f}s: requeue.sh exited {proc.returncode}: started again')
            proc = start()
        if nxt is not None and now >= nxt:
            if name == 'sigterm' and (pid := job.launcher_pid()):
                os.kill(pid, signal.SIGTERM); job.sent.append(dict(t=time.time(), sig='SIGTERM', pid=pid, launch=len(job.launches()) - 1))
                nxt += every
            elif own_loop and (pid := job.rank_pid(r := 1 - kills % 2)):
                os.kill(pid, signal.SIGKILL); job.sent.append(dict(t=time.time(), sig='SIGKILL', rank=r, pid=pid, launch=len(job.launches()) - 1))
                nxt += every; kills += 1
        time.sleep(0.02)
    job.stop()
    raw = dict(t0=t0, end=end, config=job.config, launches=job.launches(), status=read_jsonl(job.logs/'status.jsonl'), sent=job.sent, notes=job.notes,
               ranks={str(l['launch']): {'0': job.rank_events(l['launch'], 0)} for l in job.launches()})   # rank 1's: in the work folder
    return raw

def timeline(raw:dict, r:int=0) -> list:
    "Every event of the scenario in time order: launches, rank `r`'s events, ddpsafe-status stamps"
    evs = [dict(l, ev='launch') for l in raw['launches']] + [dict(s) for s in raw['status']]
    for n, ranks in raw['ranks'].items(): evs += [dict(e, launch=int(n)) for e in ranks.get(str(r), [])]
    return sorted(evs, key=lambda e: e['t'])

def account(raw:dict, r:int=0) -> dict:
    "Useful steps, and the window cut into intervals charged to the shares (see the module docstring)"
    t0, end = raw['t0'], raw['end']
    every = [e for e in timeline(raw, r) if e['t'] <= end]
    evs = [e for e in every if e['ev'] not in INFO]
    steps = [e for e in evs if e['ev'] == 'step']
    last_launch = max((e['launch'] for e in steps), default=None)
    newest = max((l['launch'] for l in raw['launches'] if l['t'] <= end), default=None)
    if steps and newest == last_launch: useful = max(e['g'] for e in steps if e['launch'] == newest)
    else: useful = max((e['step'] for e in evs if e['ev'] == 'save_end' and e['saved']), default=0)   # the newest launch has not stepped yet
    last = {}                                            # step number: index of its last execution
    for i, e in enumerate(steps): last[e['g']] = i
    counts = set(i for g, i in last.items() if g <= useful)
    shares, pending, prev, first = {s: 0. for s in SHARES}, [], t0, {}
    add = lambda k, d: shares.__setitem__(k, shares.get(k, 0.) + d)
    negative, step_time, si = [], [], 0
    for e in evs:
        d = e['t'] - prev
        if d < -1e-3: negative.append(dict(ev=e['ev'], launch=e.get('launch'), by=round(-d, 4)))
        d = max(d, 0.); prev = max(prev, e['t'])
        if e['ev'] == 'save_start': pending.append(d); continue     # the step before the save: charged with that step
        if e['ev'] == 'step':
            share = 'useful steps' if si in counts else 'steps done twice'
            tot = d + sum(pending); pending = []
            add(share, tot)
            if e['launch'] not in first: first[e['launch']] = (share, tot)
            else: step_time.append(tot)
            si += 1; continue
        if pending: add('steps done twice', sum(pending)); pending = []   # a step cut short
        if e['ev'] == 'save_end': add('saves: memory' if e.get('reason') == 'memory' else 'saves', d)
        else: add(SHARE_OF.get(e['ev'], e['ev']), d)
    add('cut at the end', end - prev + sum(pending))
    med = statistics.median(step_time) if step_time else 0.
    for share, tot in first.values():                   # the first step of each launch: above a median step, it is the resume's
        extra = max(tot - med, 0.); add(share, -extra); add('resume', extra)
    blocked, began, saved_to = {'disk': [], 'memory': []}, None, {}   # each save's blocking time; which tier holds each step
    for e in evs:
        if e['ev'] == 'save_start': began = e['t']
        elif e['ev'] == 'save_end' and e['saved']:
            tier = 'memory' if e.get('reason') == 'memory' else 'disk'
            if began is not None: blocked[tier].append(e['t'] - began)
            saved_to.setdefault(e['step'], set()).add(tier)
        if e['ev'] != 'save_start': began = None
    per_launch = []
    for l in raw['launches']:
        if l['t'] > end: continue
        le = [e for e in evs if e.get('launch') == l['launch'] and e['ev'] != 'launch']
        chosen = [dict(at_s=round(e['t'] - t0, 3), seconds=round(e['seconds'], 3), rule=e['rule'])
                  for e in every if e['ev'] == 'interval' and e.get('launch') == l['launch']]
        resumed = next((e['step'] for e in le if e['ev'] == 'resume_end'), None)
        per_launch.append(dict(launch=l['launch'], at_s=round(l['t'] - t0, 3), steps=sum(e['ev'] == 'step' for e in le), resumed_from=resumed,
                               resumed_from_tier=None if not resumed else   # a tie: the disk's (as `_resume`)
                                   'disk' if 'disk' in saved_to.get(resumed, ()) else 'memory' if resumed in saved_to else '?',
                               **(dict(interval_s=chosen[-1]['seconds'] if chosen else None, intervals=chosen,
                                       interval_note=next((e['note'] for e in reversed(every) if e['ev'] == 'interval' and e.get('launch') == l['launch']), None))
                                  if raw.get('config', {}).get('every_seconds') == 'auto' else {})))
    wall = end - t0
    sent = [s for s in raw['sent'] if s['t'] <= end]
    return dict(wall_s=wall, useful_steps=useful, useful_steps_counted=len(counts), steps_done=len(steps),
                goodput_steps_per_s=useful/wall, median_step_ms=med*1e3, launches=sum(l['t'] <= end for l in raw['launches']),
                signals=len(sent), shares_s=shares, shares_pct={k: 100*v/wall for k, v in shares.items()},
                sum_s=sum(shares.values()),
                out_of_order=negative, notes=raw['notes'], per_launch=per_launch,
                saves=len(blocked['disk']), memory_saves=len(blocked['memory']), config=raw.get('config', {}),
                save_blocking_ms={k: dict(n=len(v), median=1e3*statistics.median(v), max=1e3*max(v)) for k, v in blocked.items() if v},
                resumed_from_memory=sum(x['resumed_from_tier'] == 'memory' for x in per_launch),
                **(dict(interval_s=next((x['interval_s'] for x in reversed(per_launch) if x.get('interval_s') is not None), None),
                        intervals_per_launch=[x['interval_s'] for x in per_launch]) if raw.get('config', {}).get('every_seconds') == 'auto' else {}),
                status_codes=[s['code'] for s in raw['status'] if s['ev'] == 'status_end' and s['t'] <= end])

def raw_path(out:Path) -> Path: return out.with_name(out.stem + '_raw.json.gz')

def report(res:dict, out:Path):
    "Write the results (the raw events apart, compressed) and print a line per scenario; the benchmarks page draws the table and figure"
    res = dict(res)
    if (raw := res.pop('raw', None)):
        out.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(raw_path(out), 'wt') as f: json.dump(raw, f)
    write_json(out, res)
    base = res['scenarios'].get('baseline', {}).get('goodput_steps_per_s')
    for k, v in res['scenarios'].items():
        print(f"{k}: {v['goodput_steps_per_s']:.1f} steps/s" + (f" ({v['goodput_steps_per_s']/base:.3f} of the baseline)" if base else '') +
              f"; {v['launches']} launches, {v['signals']} signals, {v['saves']} saves; " +
              ', '.join(f'{s} {p:.1f}%' for s, p in v['shares_pct'].items() if p >= 0.05))
    print(f'wrote {out}')

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--seconds', type=float, default=600., help='wall time of each scenario (default 600)')
    p.add_argument('--term-every', type=float, default=60., help='sigterm: seconds between two SIGTERMs to torchrun (default 60)')
    p.add_argument('--kill-every', type=float, default=120., help='sigkill: seconds between two SIGKILLs of a rank (default 120)')
    p.add_argument('--scenarios', default=','.join(SCENARIOS), help=f"comma separated, from {', '.join(SCENARIOS)} (default: all)")
    p.add_argument('--save-every-seconds', type=float, default=30., help="the job's CheckpointCallback(every_seconds=...), in every scenario but auto (default 30)")
    p.add_argument('--memory-every-steps', type=int, default=100, help="memory: the job's CheckpointCallback(memory_every_steps=...) (default 100: about 1-2 s of steps)")
    p.add_argument('--parallel', action='store_true', help='run the scenarios all at the same time (a machine with 2 cores per scenario and more to spare)')
    p.add_argument('--out', default=str(HERE/'results'/'goodput.json'), help='results JSON; the raw events go beside it (_raw.json.gz)')
    p.add_argument('--workdir', default=None, help='where the jobs run and log (default: a temporary folder, removed unless --keep)')
    p.add_argument('--keep', action='store_true', help='keep the work folder (the jobs\' event logs and output)')
    p.add_argument('--recount', action='store_true', help="only recompute the accounting from --out's raw events")
    a = p.parse_args(argv)
    out = Path(a.out)
    if a.recount:
        res = json.loads(out.read_text())
        with gzip.open(raw_path(out), 'rt') as f: res['raw'] = json.load(f)
        res['scenarios'] = {k: account(v) for k, v in res['raw'].items()}
        return report(res, out)
    names = a.scenarios.split(',')
    if unknown := set(names) - set(SCENARIOS): p.error(f'unknown scenarios {sorted(unknown)}')
    work = Path(a.workdir or tempfile.mkdtemp(prefix='ddpsafe-goodput-'))
    import torch
    res = dict(benchmark='goodput', date=now(utc=True), command=command('goodput_bench.py', argv),
               machine=dict(machine(), gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, uptime_before=uptime()),
               parallel=a.parallel, seconds=a.seconds, term_every=a.term_every, kill_every=a.kill_every, save_every_seconds=a.save_every_seconds,
               memory_every_steps=a.memory_every_steps,
               hidden=512, fast_exit=False, ranks=2, backend='gloo', torch_threads_per_rank=1, raw={})
    t = time.time()
    try:
        if a.parallel:
            ports = free_ports(len(names))
            with ThreadPoolExecutor(len(names)) as ex: runs = {name: ex.submit(run_scenario, name, work/name, a, port) for name, port in zip(names, ports)}
            res['raw'] = {name: f.result() for name, f in runs.items()}
        else:
            for name in names:
                res['raw'][name] = run_scenario(name, work/name, a)
                res['machine'][f'uptime_after_{name}'] = uptime()
        res['scenarios'] = {k: account(v) for k, v in res['raw'].items()}
        res['machine']['uptime_after'] = uptime()
        res['total_seconds'] = time.time() - t
        report(res, out)
    finally:
        if a.keep or a.workdir: print(f'work folder: {work}')
        else: shutil.rmtree(work, ignore_errors=True)
    return res

if __name__ == '__main__': main()
