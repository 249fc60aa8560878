"""Checkpoints written by an older ddpsafe resume bit for bit, and this ddpsafe writes them in the same format.

`tests/fixtures/ckpt-0db8280/` holds checkpoints that main 0db8280 (before the position became a part of the registry)
wrote with `tests/scripts/train_ckpt.py` on 2 ranks, stopped in the middle of an epoch by SIGTERM and at an epoch's last
batch by the stop switch, each beside rank 0's final weights of an uninterrupted run of that code (`whole.pt`); see
`tests/scripts/old_checkpoints.py`, which wrote them. Each is resumed here to the end, and must end with the weights of
the uninterrupted run, bit for bit, on both ranks. The same stop with this code must write the same files, with the
same entries, in the same order, of the same form (tensors' dtypes and shapes), on any machine; and, where this machine's
torch trains as the one that wrote them (the same CPU kernels), holding the same values. The tests that need the same
training skip, saying so, on a machine that trains otherwise.

    python -m pytest tests/test_old_checkpoints.py -s      # about 1 min on a quiet 2-core machine"""
from __future__ import annotations
import json, shutil, tempfile
from pathlib import Path
import pytest, torch
from ddpsafe.manifest import newest_complete, read_manifest
from ddpsafe.learner import fastai_safe_globals
from conftest import train_ckpt, fail_msg, same_tree
tc = train_ckpt()
FIXTURES = Path(__file__).parent/'fixtures'/'ckpt-0db8280'
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p/'info.json').exists())

@pytest.fixture
def folder():
    d = Path(tempfile.mkdtemp(prefix='ddpsafe-old-'))
    yield d
    shutil.rmtree(d, ignore_errors=True)

def read(ck:Path, name:str):
    "A checkpoint file's contents: a `.pt` file loaded, another one's bytes"
    if not name.endswith('.pt'): return (ck/name).read_bytes()
    with torch.serialization.safe_globals(fastai_safe_globals()): return torch.load(ck/name, weights_only=True)

@pytest.mark.timeout(420)
@pytest.mark.parametrize('name', SCENARIOS)
def test_old_checkpoint_resumes_bit_for_bit(folder, name):
    info = json.loads((FIXTURES/name/'info.json').read_text())
    whole = tc.baseline(info['n_epoch'], '--fit', info['fit'])
    if not tc.same(whole[0], torch.load(FIXTURES/name/'whole.pt', weights_only=True)):
        pytest.skip(f"this torch ({torch.__version__}) trains otherwise than the one that wrote {name} ({info['torch']}): "
                    'no resume of it can end as a run of this torch')
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

_written = {}
def written(name:str) -> tuple:
    "(the fixture's checkpoint, the one this code writes at the same stop), written once per scenario"
    if name not in _written:
        info = json.loads((FIXTURES/name/'info.json').read_text())
        d = Path(tempfile.mkdtemp(prefix='ddpsafe-format-'))
        tc.run(d, info['n_epoch'], '--fit', info['fit'], *info['stop'], '--keep', '1')
        _written[name] = FIXTURES/name/'checkpoints'/info['checkpoint'], newest_complete(d/'checkpoints')
    return _written[name]

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
        x, y = read(old, f), read(new, f)
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
    info = json.loads((FIXTURES/name/'info.json').read_text())
    if not tc.same(tc.baseline(info['n_epoch'], '--fit', info['fit'])[0], torch.load(FIXTURES/name/'whole.pt', weights_only=True)):
        pytest.skip(f"this torch ({torch.__version__}) on this machine trains otherwise than the one that wrote {name} ({info['torch']})")
    old, new = written(name)
    a, b = read_manifest(old), read_manifest(new)
    assert {k: v for k, v in a.items() if k not in ('time', 'files')} == {k: v for k, v in b.items() if k not in ('time', 'files')}
    for f in a['files']:
        x, y = read(old, f), read(new, f)
        if f == 'state.pt': x, y = ({k: v for k, v in d.items() if k != 'versions'} for d in (x, y))
        assert same_tree(x, y), f'{f} holds other values now'
