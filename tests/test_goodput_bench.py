"""bench/goodput_bench.py's accounting, shims and report, without running a job (the benchmark itself runs for minutes):
a synthetic scenario of two launches, killed once, with a disk save, a memory-tier save and the intervals `auto` chose."""
from __future__ import annotations
import os, sys, json, subprocess
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'bench')); sys.path.insert(0, str(ROOT/'tools'))
import goodput_bench as G
import figures as F

def _launch(n:int, t:float, resumed:int) -> list:
    "A launch's start-up events from `t` on, up to fit_ready at `t`+1.5"
    names = ['proc', 'py_start', 'import_torch', 'import_fastai', 'import_ddpsafe', 'learner', 'fit_start', 'resume_start']
    evs = [dict(ev=k, t=t + dt) for k, dt in zip(names, [.1, .2, .5, .8, .9, 1.0, 1.2, 1.3])]
    return evs + [dict(ev='resume_end', t=t + 1.4, step=resumed), dict(ev='fit_ready', t=t + 1.5)]

def scenario(auto:bool=False) -> dict:
    "Launch 0 steps 1-4 (a disk save at 2, a memory save at 3) and is killed; launch 1 resumes from the memory tier's step 3, steps 4-7"
    l0 = _launch(0, 0., 0) + [dict(ev='step', t=1.6, g=1),
          dict(ev='save_start', t=1.62, step=2, reason='time'), dict(ev='interval', t=1.655, seconds=5., rule='floor', note='every 5 s'),
          dict(ev='save_end', t=1.66, step=2, reason='time', saved=True), dict(ev='step', t=1.7, g=2),
          dict(ev='save_start', t=1.72, step=3, reason='memory'), dict(ev='save_end', t=1.74, step=3, reason='memory', saved=True),
          dict(ev='step', t=1.8, g=3), dict(ev='step', t=1.9, g=4)]
    l1 = _launch(1, 5., 3) + [dict(ev='interval', t=6.45, seconds=8., rule='young', note='every 8 s')] + \
         [dict(ev='step', t=6.6 + .1*i, g=4 + i) for i in range(4)]
    if not auto: l0, l1 = [[e for e in l if e['ev'] != 'interval'] for l in (l0, l1)]
    return dict(t0=0., end=7., config=dict(every_seconds='auto' if auto else 10., memory_every_steps=1),
                launches=[dict(ev='launch', t=0., pid=1, launch=0), dict(ev='launch', t=5., pid=2, launch=1)],
                status=[dict(ev='status_start', t=4.5), dict(ev='status_end', t=4.8, code=1)],
                sent=[dict(t=2.0, sig='SIGKILL', rank=1, pid=9, launch=0)], notes=[],
                ranks={'0': {'0': l0}, '1': {'0': l1}})

def test_memory_and_disk_saves_apart():
    a = G.account(scenario())
    assert (a['useful_steps'], a['useful_steps_counted'], a['steps_done']) == (7, 7, 8)
    assert (a['saves'], a['memory_saves']) == (1, 1)
    assert a['shares_s']['saves'] == pytest.approx(.04) and a['shares_s']['saves: memory'] == pytest.approx(.02)
    assert a['save_blocking_ms']['disk']['median'] == pytest.approx(40) and a['save_blocking_ms']['memory']['median'] == pytest.approx(20)
    assert [x['resumed_from_tier'] for x in a['per_launch']] == [None, 'memory'] and a['resumed_from_memory'] == 1
    assert a['sum_s'] == pytest.approx(a['wall_s']) and a['out_of_order'] == [] and min(a['shares_s'].values()) >= 0
    assert 'interval_s' not in a

def test_auto_intervals_per_launch():
    a = G.account(scenario(auto=True))
    assert [x['intervals'] for x in a['per_launch']] == [[dict(at_s=1.655, seconds=5., rule='floor')], [dict(at_s=6.45, seconds=8., rule='young')]]
    assert (a['interval_s'], a['intervals_per_launch'], a['per_launch'][1]['interval_note']) == (8., [5., 8.], 'every 8 s')
    assert a['shares_s'] == G.account(scenario())['shares_s']      # the interval events are no boundary of the accounting

def test_report_old_and_new(tmp_path, capsys):
    "The report and page figures from the committed 2-core results (three scenarios) and from one with `auto` and `memory`"
    old = json.loads((ROOT/'bench'/'results'/'goodput_2cores.json').read_text())
    new = dict(old, parallel=True, scenarios=dict(old['scenarios'], auto=G.account(scenario(auto=True)), memory=G.account(scenario())), raw={'memory': scenario()})
    G.report(new, tmp_path/'new.json')
    said = capsys.readouterr().out
    assert all(f'{k}: ' in said for k in new['scenarios']) and 'of the baseline' in said and 'saves: memory' in said, said
    assert 'raw' not in json.loads((tmp_path/'new.json').read_text()) and G.raw_path(tmp_path/'new.json').stat().st_size > 0
    f = F.goodput_of(new)
    assert (f['auto_interval'], f['auto_intervals'], f['memory_save'], f['memory_resumes'], f['parallel']) == ('8.0 s', '5.0-8.0 s', '20 ms', '1 of 1', 'at the same time')
    assert {'minutes', 'baseline', 'parallel', 'sigterm_ratio', 'sigkill_ratio', 'sigkill_twice', 'sigterm_startup'} <= set(F.goodput_of(old))
    assert not {'auto_interval', 'memory_save'} & set(F.goodput_of(old))

def test_shims_without_console_scripts(tmp_path, monkeypatch):
    "Where sys.executable's folder has no ddpsafe-status, the job's bin has a shim that runs it under sys.executable; torchrun is the same interpreter's"
    monkeypatch.setattr(G, 'BIN', tmp_path/'nobin')
    a = G.argparse.Namespace(save_every_seconds=10., memory_every_steps=100, hidden=8, fast_exit=False)
    job = G.Job('memory', tmp_path/'memory', a)
    try:
        assert job.launch_cmd()[4:7] == [sys.executable, '-m', 'torch.distributed.run'] and sys.executable in (job.bin/'ddpsafe-status').read_text()
        assert job.memory.name.endswith('-memory') and str(job.memory) in job.launch_cmd()
        assert job.launch_cmd()[job.launch_cmd().index('--master_port') + 1] == str(job.port) and job.config['every_seconds'] == 10.
        assert len(set(G.free_ports(5))) == 5                        # --parallel: a port of its own for each scenario
        assert job.status() == 2                                      # no checkpoint yet: through the shim, stamped
        assert [e['ev'] for e in G.read_jsonl(job.logs/'status.jsonl')] == ['status_start', 'status_end']
    finally: job.stop(timeout=1)
