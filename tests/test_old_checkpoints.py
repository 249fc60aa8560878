"""Checkpoints written by an older ddpsafe resume bit for bit, and this ddpsafe writes them in the same format.

`tests/fixtures/` holds one set of checkpoints for each older ddpsafe: `ckpt-0db8280/` by main 0db8280 (before the
position became a part of the registry) and `ckpt-9c5e351/` by main 9c5e351. Each was written with that commit's
`tests/scripts/train_ckpt.py` on 2 ranks, stopped in the middle of an epoch by SIGTERM and at an epoch's last batch by
the stop switch, each beside rank 0's final weights of an uninterrupted run of that code (`whole.pt`); see
`tests/scripts/old_checkpoints.py`, which wrote them. Each is resumed here to the end (test ids `SET/SCENARIO`, e.g.
`ckpt-0db8280/fit-sigterm-step5`), and must end with the weights of the uninterrupted run, bit for bit, on both ranks.
The same stop with this code must write the same files, with the same entries, in the same order, of the same form
(tensors' dtypes and shapes), and holding the same values.

Bit for bit across machines needs the same CPU kernels: every rank, the old ones that wrote the fixtures and the ones
here, runs with `train_ckpt.PINNED_KERNELS` (aten's default kernels, MKL's COMPATIBLE path, one thread; recorded in each
`info.json` as `env`), which makes this training the same on any x86 CPU. Unpinned, aten's AVX-512/AVX2 dispatch and
MKL's SGEMM code path change the weights' last bits from one CPU to another. The tests that need the same training
still skip, saying so, on a machine that trains otherwise all the same (another torch, another architecture).

    python -m pytest tests/test_old_checkpoints.py -s      # about 1.5 min on a quiet 2-core machine"""
from __future__ import annotations
import json, atexit, shutil, tempfile
from pathlib import Path
import pytest, torch
from ddpsafe.storage.manifest import newest_complete, read_manifest
from ddpsafe.patches.learner import fastai_safe_globals
from conftest import train_ckpt, fail_msg, same_tree
tc = train_ckpt()
FIXTURES = Path(__file__).parent/'fixtures'
SETS = ('ckpt-0db8280', 'ckpt-9c5e351')     # one set per older ddpsafe that wrote them
SCENARIOS = [f'{s}/{p.name}' for s in SETS for p in sorted((FIXTURES/s).iterdir()) if (p/'info.json').exists()]

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-old-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)

def read(ck:Path, name:str):
    "A checkpoint file's contents: a `.pt` file loaded, another one's bytes"
    if not name.endswith('.pt'): return (ck/name).read_bytes()
    with torch.serialization.safe_globals(fastai_safe_globals()): return torch.load(ck/name, weights_only=True)

def info_of(name:str) -> dict: return json.loads((FIXTURES/name/'info.json').read_text())

def trains_otherwise(name:str, whole:dict) -> str|None:
    "Why this machine's uninterrupted run (`whole`: rank 0's weights) differs from the one that wrote `name`; None where it doesn't"
    info = info_of(name)
    if tc.same(whole, torch.load(FIXTURES/name/'whole.pt', weights_only=True)): return None
    return (f"this torch ({torch.__version__}) on this machine trains otherwise than the one that wrote {name} ({info['torch']}), "
            f"kernels pinned by {tc.PINNED_KERNELS} here, by {info.get('env')} there")

def test_fixtures_pinned():
    "Every set was written with the kernels pinned as the runs here pin them"
    assert SCENARIOS and {s.split('/')[0] for s in SCENARIOS} == set(SETS), SCENARIOS
    for name in SCENARIOS: assert info_of(name).get('env') == tc.PINNED_KERNELS, f"{name}: written with {info_of(name).get('env')}"

@pytest.mark.timeout(420)
@pytest.mark.parametrize('name', SCENARIOS)
def test_old_checkpoint_resumes_bit_for_bit(folder, name):
    info = info_of(name)
    whole = tc.baseline(info['n_epoch'], '--fit', info['fit'])
    if why := trains_otherwise(name, whole[0]): pytest.skip(why + ': no resume of it can end as a run of this torch')
    shutil.copytree(FIXTURES/name, folder/'run')
    codes, outs, res = tc.run(folder/'run', info['n_epoch'], '--fit', info['fit'], '--out', folder/'w')
    assert codes == [0, 0], fail_msg(outs)
    assert f"ddpsafe: resumed from {folder/'run'/'checkpoints'/info['checkpoint']}" in outs[0], outs[0][-3000:]
    assert all(tc.same(w, whole[0]) for w in tc.weights(folder/'w')), f'{name}: the resumed run differs from the uninterrupted one'

def same_form(a, b) -> bool:
    "Do two nested states have the same form: keys in the same order, lengths, tensors' dtypes and shapes, other values' types?"
    if isinstance(a, torch.Tensor): return isinstance(b, torch.Tensor) and (a.dtype, a.shape) == (b.dtype, b.shape)
    if isinstance(a, dict): return isinstance(b, dict) and list(a) == list(b) and all(same_form(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)): return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same_form, a, b))
    return type(a) == type(b) or a is None or b is None   # a metric is None at a step, a float at an epoch's end

# What checkpoints hold since the fixtures were written, each entry with the issue that added it; an old checkpoint lacks it
# and still resumes (above). `state.pt`'s `batch_size` (issue 69: a rerun with another batch size says so); the setup's
# `fit.hypers` (issue 69: a plain `fit` run again with another `lr` is refused)
ADDED = {'state.pt': ('batch_size',)}

def as_then(f:str, d):
    "File `f`'s contents `d` without what was added since the fixtures"
    if not isinstance(d, dict): return d
    d = {k: v for k, v in d.items() if k not in ADDED.get(f, ())}
    if f == 'state.pt' and 'setup' in d: d['setup'] = {**d['setup'], 'fit': {k: v for k, v in d['setup']['fit'].items() if k != 'hypers'}}
    return d

_written = {}
def written(name:str) -> tuple:
    "(the fixture's checkpoint, the one this code writes at the same stop), written once per stop (the sets share them)"
    info = info_of(name)
    key = (info['n_epoch'], info['fit'], *info['stop'])
    if key not in _written:
        d = Path(tempfile.mkdtemp(prefix='ddpsafe-format-')); atexit.register(shutil.rmtree, d, ignore_errors=True)
        tc.run(d, info['n_epoch'], '--fit', info['fit'], *info['stop'], '--keep', '1')
        _written[key] = newest_complete(d/'checkpoints')
    return FIXTURES/name/'checkpoints'/info['checkpoint'], _written[key]

@pytest.mark.timeout(300)
@pytest.mark.parametrize('name', SCENARIOS)
def test_same_format_as_old_checkpoint(name):
    "The same stop writes the same files, the same entries in the same order, tensors of the same dtypes and shapes: on any machine"
    old, new = written(name)
    assert new.name == old.name
    a, b = read_manifest(old), read_manifest(new)
    assert list(a) == list(b) and list(a['files']) == list(b['files']), f"the manifest's entries {list(a)} then, {list(b)} now; files {list(a['files'])} then, {list(b['files'])} now"
    fixed = lambda m: {k: v for k, v in m.items() if k not in ('time', 'files', 'metric')}   # the metric: trained values
    assert fixed(a) == fixed(b), (fixed(a), fixed(b))
    for f in a['files']:
        x, y = read(old, f), as_then(f, read(new, f))
        if isinstance(x, dict): assert list(x) == list(y), f'{f}: entries {list(x)} then, {list(y)} now'
        if f == 'state.pt': x, y = ({k: v for k, v in d.items() if k != 'versions'} for d in (x, y))
        if isinstance(x, bytes): continue   # safetensors: its header holds the names, dtypes and shapes, read below
        assert same_form(x, y), f'{f} holds another form of state now'
    import safetensors.torch as st
    x, y = st.load_file(old/'model.safetensors'), st.load_file(new/'model.safetensors')
    assert same_form(x, y), 'model.safetensors holds other tensors now'

@pytest.mark.timeout(300)
@pytest.mark.parametrize('name', SCENARIOS)
def test_same_values_as_old_checkpoint(name):
    "...and the same values, bit for bit, where this machine's torch trains as the one that wrote them"
    info = info_of(name)
    if why := trains_otherwise(name, tc.baseline(info['n_epoch'], '--fit', info['fit'])[0]): pytest.skip(why)
    old, new = written(name)
    a, b = read_manifest(old), read_manifest(new)
    assert {k: v for k, v in a.items() if k not in ('time', 'files')} == {k: v for k, v in b.items() if k not in ('time', 'files')}
    for f in a['files']:
        x, y = read(old, f), as_then(f, read(new, f))
        if f == 'state.pt': x, y = ({k: v for k, v in d.items() if k != 'versions'} for d in (x, y))
        assert same_tree(x, y), f'{f} holds other values now'
