"""bench/gpu_bench.sh on the CPU (`--cpu-smoke`, one repetition, 1 MB): every part runs, and the one JSON file holds
what the benchmarks page reads, with the device's name. This checks the code paths and the JSON, not speed: the script
has never run on a GPU (see its header)."""
from __future__ import annotations
import os, sys, json, math, subprocess
from pathlib import Path
import pytest, torch

ROOT = Path(__file__).resolve().parents[1]
METHODS = {'pinned_d2h', 'ddpsafe_async', 'dcp_async', 'torch_save'}
RATIOS = {'ddpsafe_over_pinned_d2h', 'dcp_async_over_ddpsafe', 'torch_save_over_ddpsafe'}

def positive(x) -> bool: return isinstance(x, (int, float)) and math.isfinite(x) and x > 0

@pytest.mark.timeout(400)
def test_gpu_bench_cpu_smoke(tmp_path):
    out = tmp_path/'gpu.json'
    env = {**os.environ, 'GPU_BENCH_SECONDS': '300', 'OMP_NUM_THREADS': '1', 'PATH': f'{Path(sys.executable).parent}:{os.environ["PATH"]}'}
    try: p = subprocess.run(['bash', str(ROOT/'bench'/'gpu_bench.sh'), '--cpu-smoke', '--reps', '1', '--sizes', '1,2', '--out', str(out),
                             '--test-seconds', '120'], env=env, capture_output=True, text=True, timeout=380, cwd=tmp_path)
    except subprocess.TimeoutExpired: pytest.fail('gpu_bench.sh --cpu-smoke did not end within 380 s (its own bound is 340 s)')
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r['cpu_smoke'] is True and r['errors'] == {} and r['skipped'] == {}, (r['errors'], r['skipped'])
    assert r['device']['type'] == 'cpu' and r['device']['name'], r['device']
    tc = r['test_cuda']
    assert {'exit_code', 'passed', 'failed', 'skipped', 'ok', 'seconds'} <= tc.keys(), tc
    if not torch.cuda.is_available():       # skipped is not passed: the JSON must not call a CPU run of test_cuda.py ok
        assert tc['passed'] == 0 and tc['skipped'] > 0 and tc['ok'] is False, tc
    assert [x['gb'] for x in r['async_blocking']] == [1, 2], r['async_blocking']
    for size in r['async_blocking']:
        assert size['blocking_median'].keys() == METHODS and all(map(positive, size['blocking_median'].values())), size['blocking_median']
        assert size['ratios'].keys() == RATIOS and all(map(positive, size['ratios'].values())), size['ratios']
        assert isinstance(size['met'], bool) and size['bytes'] > 0
    s = r['steps_beside_write']
    assert positive(s['median']) and s['reps'][0]['steps_during'] >= 1, s
    assert positive(r['resume']['median']) and positive(r['resume']['ddpsafe_median']), r['resume']
    md = subprocess.run([sys.executable, str(ROOT/'bench'/'gpu_bench.py'), '--render', str(out)], capture_output=True, text=True,
                        timeout=120, env={**os.environ, 'PYTHONPATH': str(ROOT)})
    assert md.returncode == 0, md.stderr[-2000:]
    assert r['device']['name'] in md.stdout and 'CPU smoke run' in md.stdout and md.stdout.count('| 1 MB |') == 1, md.stdout
    assert 'test_cuda.py`: 0 passed' in md.stdout or torch.cuda.is_available(), md.stdout
    # --merge: a second call measures one part again and keeps the first call's others (how a cut GPU run is completed)
    out2 = tmp_path/'gpu2.json'
    p = subprocess.run([sys.executable, str(ROOT/'bench'/'gpu_bench.py'), '--cpu-smoke', '--reps', '1', '--parts', 'async_blocking',
                        '--sizes', '2', '--merge', str(out), '--out', str(out2)], env={**env, 'PYTHONPATH': str(ROOT)}, capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r2 = json.loads(out2.read_text())
    assert [x['gb'] for x in r2['async_blocking']] == [1, 2] and r2['async_blocking'][1] != r['async_blocking'][1], r2['async_blocking']
    assert r2['resume'] == r['resume'] and r2['steps_beside_write'] == r['steps_beside_write'] and r2['test_cuda'] == r['test_cuda']
    assert r2['earlier_runs'][0]['date'] == r['date'], r2.get('earlier_runs')

def test_gpu_bench_refuses_without_cuda(tmp_path):
    "Without --cpu-smoke on a machine without CUDA: a clear refusal, no JSON that could pass for GPU figures"
    if torch.cuda.is_available(): pytest.skip('this machine has CUDA')
    p = subprocess.run([sys.executable, str(ROOT/'bench'/'gpu_bench.py'), '--out', str(tmp_path/'gpu.json')],
                       capture_output=True, text=True, timeout=120, env={**os.environ, 'PYTHONPATH': str(ROOT)})
    assert p.returncode == 2 and 'no CUDA device' in p.stderr and not (tmp_path/'gpu.json').exists(), (p.returncode, p.stderr[-2000:])
