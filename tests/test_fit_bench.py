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

@pytest.mark.timeout(300)
def test_fit_diagnose_cpu_smoke(tmp_path):
    "bench/fit_bench.py --diagnose on the CPU, batches through DataLoader workers: every stand-in, the second switch interval, both profiles"
    out = tmp_path/'diag.json'
    p = subprocess.run([sys.executable, str(ROOT/'bench'/'fit_bench.py'), '--diagnose', '--cpu-smoke', '--host', '--out', str(out), '--dir', str(tmp_path)],
                       capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r['host'] is True and '--dir' not in r['command'], r['command']
    assert set(r['standins_summary']) == {'none', 'sleep', 'gil', 'memcpy', 'disk', 'writer'} and set(r['switch']['summary']) == {'none', 'gil', 'writer'}
    assert all(f['steps'] > 0 and f['step_ms'] > 0 for rep in r['standins'] for f in rep)
    assert next(f for f in r['standins'][0] if f['kind'] == 'writer')['rounds'] >= 1, 'the writer stand-in wrote no checkpoint beside the fit'
    for m in ('async', 'memory'):
        prof = r[f'profile_{m}']
        assert 'error' not in prof and prof['beside']['n'] + prof['alone']['n'] == len(prof['steps']) - 1 >= 5, prof.get('error')

def test_analyse_a_trace():
    "Per step from a Chrome trace: the GPU's busy time (overlaps counted once) and the training thread's wait after each synchronization"
    sys.path.insert(0, str(ROOT/'bench'))
    from fit_bench import analyse
    X = lambda ts, dur, name, cat, tid=1: dict(ph='X', ts=ts, dur=dur, name=name, cat=cat, tid=tid)
    trace = {'traceEvents': [X(0, 1, 'step:1:0', 'user_annotation'), X(100, 1, 'step:2:1', 'user_annotation'), X(200, 1, 'step:3:0', 'user_annotation'),
                             X(110, 40, 'k1', 'kernel', 7), X(130, 30, 'k2', 'kernel', 7),           # busy 110-160: 50 us
                             X(105, 50, 'cudaDeviceSynchronize', 'cuda_runtime'), X(165, 5, 'aten::add', 'cpu_op'),   # 10 us after the sync
                             X(20, 10, 'k0', 'kernel', 7)]}
    r = analyse(trace)
    s1, s2 = r['steps']
    assert (s1['busy'], s2['busy']) == (True, False)
    assert abs(s1['gpu_ms'] - 0.010) < 1e-9 and abs(s2['gpu_ms'] - 0.050) < 1e-9, r['steps']
    assert s2['syncs'] == 1 and abs(s2['after_sync_ms'] - 0.010) < 1e-9 and abs(s2['sync_ms'] - 0.050) < 1e-9, s2
