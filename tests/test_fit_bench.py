"""bench/fit_bench.py on the CPU (`--cpu-smoke`: a tiny MLP, 8 steps, one repetition): every mode runs a real fastai fit and
the JSON holds every field the benchmarks page reads. It checks the code paths and the JSON, not speed."""
from __future__ import annotations
import sys, json, subprocess
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIT = {'mode', 'fit_s', 'train_s', 'step_ms', 'steps', 'save_ms', 'beside_ms', 'beside_n', 'copy_ms', 'state_mb', 'said', 'probe_ms', 'load'}

@pytest.mark.timeout(300)
@pytest.mark.parametrize('loader', [[], ['--thread']], ids=['on-device', 'thread'])
def test_fit_bench_cpu_smoke(tmp_path, loader):
    "Batches already on the device, and (`--thread`) collated by the training thread itself, as a per-item Dataset without workers"
    out = tmp_path/'fit.json'
    p = subprocess.run([sys.executable, str(ROOT/'bench'/'fit_bench.py'), '--cpu-smoke', *loader, '--out', str(out), '--dir', str(tmp_path)],
                       capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r['cpu_smoke'] is True and r['device']['type'] == 'cpu' and r['skipped'] == [], r
    assert r['thread'] is bool(loader) and r['command'].endswith(' '.join(['--cpu-smoke', *loader, '--out', str(out)])), r['command']
    (size,) = r['sizes']
    (rep,) = size['reps']
    assert sorted(f['mode'] for f in rep) == ['async', 'memory', 'none', 'none', 'sync']
    for f in rep:
        assert FIT <= f.keys() and f['steps'] == r['steps'] == 8, f
        assert len(f['save_ms']) == (0 if f['mode'] == 'none' else 2), f   # a save every 4 steps, inside the fit
    s = size['summary']
    for m in ('async', 'memory', 'sync'):
        assert {'fit', 'train', 'step', 'beside', 'save_over_copy'} <= s[m].keys() and s[m]['fit']['n'] == 1, s[m]
    assert set(s['probe_ms']) == {'none', 'async', 'memory', 'sync'} and s['baseline_spread']['n'] == 1
    assert not list(tmp_path.glob('tmp*')), 'the fits left their checkpoints folders behind'
