"""bench/startup_bench.py on the CPU (`--cpu-smoke`: one torchrun launch of 2 ranks per variant, no warm-up): both the stock
fastai fit and the one with ddpsafe's `CheckpointCallback` run, and the JSON holds every phase, positive, for both, and
the differences. It checks the code paths and the JSON, not speed."""
from __future__ import annotations
import sys, json, subprocess
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'bench'))
from startup_bench import PHASES, VARIANTS, POINTS, OWN

SUMMARY = {'median', 'min', 'max', 'mean', 'n'}

@pytest.mark.timeout(300)
def test_startup_bench_cpu_smoke(tmp_path):
    out = tmp_path/'startup.json'
    p = subprocess.run([sys.executable, str(ROOT/'bench'/'startup_bench.py'), '--cpu-smoke', '--out', str(out), '--dir', str(tmp_path)],
                       capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r['cpu_smoke'] is True and r['reps'] == 1 and r['warmup'] == 0 and r['nproc'] == 2 and r['orders'] == [list(VARIANTS)], r
    assert sorted(l['variant'] for l in r['launches']) == sorted(VARIANTS)
    for l in r['launches']:
        assert set(l['phases']) == set(PHASES), l['phases']
        for k, v in l['phases'].items():
            if k == 'imports_ddpsafe' and l['variant'] == 'stock': assert 0 <= v < 0.5, l; continue   # stock imports no ddpsafe: its one patch
            assert isinstance(v, float) and v > 0, (l['variant'], k, v)
        assert set(l['stamps']) == {'0', '1'} and all(set(POINTS) == set(s) for s in l['stamps'].values()), l['stamps']
        assert l['phases']['to_first_step'] < l['phases']['total']
        if l['variant'] == 'ddpsafe': assert any(n.startswith('step-') for n in l['saved']), l['saved']   # the epoch's checkpoint was written
        else: assert l['saved'] is None
    s = r['summary']
    for v in VARIANTS: assert set(s[v]) == set(PHASES) and all(SUMMARY <= s[v][k].keys() and s[v][k]['n'] == 1 for k in PHASES), s[v]
    assert set(s['diff']) == set(PHASES) and all(s['diff'][k]['n'] == 1 for k in PHASES)
    assert s['own_share']['n'] == 1 and set(s['same_code_diff']) == {'launch', 'imports_fastai', 'ddp_wrap'}
    g = s['goal']
    assert g['phase'] == 'to_first_step' and g['limit_s'] == 0.5 and g['own_phases'] == list(OWN)
    assert isinstance(g['met'], bool) and isinstance(g['own_met'], bool) and isinstance(g['diff_median_s'], float)
    assert not list(tmp_path.glob('startup-*')), 'the launches left their folders behind'
