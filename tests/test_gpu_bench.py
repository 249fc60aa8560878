"""bench/gpu.sh on the CPU (`--cpu-smoke`: MB for GB, one repetition): every step runs and writes the JSON the benchmarks
page reads, with the device it ran on. This checks the code paths and the JSON, not speed: the script has never run on a
GPU (see the benchmarks page, "On a GPU")."""
from __future__ import annotations
import os, re, sys, json, math, subprocess
from pathlib import Path
import pytest, torch

ROOT = Path(__file__).resolve().parents[1]
METHODS = {'memcpy', 'ddpsafe_async', 'memory_tier', 'dcp_async', 'torch_save'}

def positive(x) -> bool: return isinstance(x, (int, float)) and math.isfinite(x) and x > 0

@pytest.mark.timeout(700)
def test_gpu_sh_cpu_smoke(tmp_path):
    env = {**os.environ, 'GPU_RESULTS': str(tmp_path), 'OMP_NUM_THREADS': '1', 'DDPSAFE_NESTED_TESTS': '1', 'PATH': f'{Path(sys.executable).parent}:{os.environ["PATH"]}'}
    try: p = subprocess.run(['bash', str(ROOT/'bench'/'gpu.sh'), '--cpu-smoke'], env=env, capture_output=True, text=True, timeout=680, cwd=tmp_path)
    except subprocess.TimeoutExpired: pytest.fail('gpu.sh --cpu-smoke did not end within 680 s (its steps are bounded by 600 s in all)')
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    if not torch.cuda.is_available():      # skipped is not passed: on the CPU, tests/test_cuda.py ran and skipped every test
        assert re.search(r'\b\d+ skipped\b', p.stdout) and not re.search(r'\b\d+ passed\b', p.stdout), p.stdout[-3000:]
    ck = json.loads((tmp_path/'checkpoint.json').read_text())
    assert ck['device']['type'] == 'cpu' and [s['mb'] for s in ck['sizes']] == [1, 2], (ck['device'], ck['sizes'])
    for s in ck['sizes']:
        assert s['median'].keys() == METHODS and all(positive(v['blocking']) for v in s['median'].values()), s['median']
        assert positive(s['ratios']['async_blocking_over_memcpy']['median_paired']) and positive(s['ratios']['memory_tier_over_memcpy']['median_paired'])
        mem = s['ratios']['async_host_memory_over_state']
        assert mem['slots_bytes'] >= s['bytes'] and positive(mem['writer_anon_bytes']), f'the measure missed the slot: {mem}, state {s["bytes"]} bytes'
    rs = json.loads((tmp_path/'resume.json').read_text())
    assert rs['device']['type'] == 'cpu' and positive(rs['sizes'][0]['median']), rs['sizes']
    for name, host in (('fit_cpu_host', True), ('fit_cpu', False)):
        r = json.loads((tmp_path/f'{name}.json').read_text())
        assert r['cpu_smoke'] is True and r['host'] is host and r['skipped'] == [] and {'async', 'memory'} <= r['sizes'][0]['summary'].keys(), r['sizes']

@pytest.mark.parametrize('script', ['checkpoint_bench.py', 'resume_bench.py'])
def test_device_cuda_refused_without_one(tmp_path, script):
    "`--device cuda` on a machine without CUDA: a clear refusal, and no JSON that could pass for GPU figures"
    if torch.cuda.is_available(): pytest.skip('this machine has CUDA')
    p = subprocess.run([sys.executable, str(ROOT/'bench'/script), '--device', 'cuda', '--out', str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, 'PYTHONPATH': str(ROOT)})
    assert p.returncode == 1 and 'no CUDA device' in p.stderr and not list(tmp_path.iterdir()), (p.returncode, p.stderr[-2000:])
