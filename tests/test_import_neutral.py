"""Issue 12: importing ddpsafe changes no fastai default and no global torch behaviour beyond what API.md states.

Each check runs in a fresh interpreter: fastai's `defaults` (every attribute, `defaults.callbacks` included, as fastai's
own `13a_learner` tests expect them) and the callbacks a new `Learner` gets, before and after `import ddpsafe.all`."""
from __future__ import annotations
import sys, json, subprocess, textwrap
import pytest

PROBE = textwrap.dedent('''
    import json, sys
    import fastai.learner
    from fastai.torch_core import defaults
    from fastai.data.core import DataLoaders
    import torch
    def facts():
        learn = fastai.learner.Learner(DataLoaders.from_dsets([], [], bs=1), torch.nn.Linear(1, 1), loss_func=lambda *a: 0)
        return dict(defaults={k: repr(v) for k, v in vars(defaults).items()},
                    learner_cbs=[type(c).__name__ for c in learn.cbs],
                    grad=torch.is_grad_enabled(), threads=torch.get_num_threads(), dtype=str(torch.get_default_dtype()),
                    deterministic=torch.are_deterministic_algorithms_enabled())
    before = facts()
    exec(sys.argv[1])
    print(json.dumps(dict(before=before, after=facts())))
''')

def probe(stmt:str) -> dict:
    out = subprocess.run([sys.executable, '-c', PROBE, stmt], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])

@pytest.mark.timeout(300)
@pytest.mark.parametrize('stmt', ['import ddpsafe', 'import ddpsafe.core, ddpsafe.io', 'import ddpsafe.all',
                                  'from ddpsafe.all import *', 'import ddpsafe.callback.checkpoint, ddpsafe.callback.trackers, ddpsafe.patches.learner'])
def test_import_changes_no_fastai_default(stmt):
    r = probe(stmt)
    assert r['after'] == r['before'], f'{stmt} changed: ' + json.dumps(
        {k: (r['before'][k], r['after'][k]) for k in r['before'] if r['before'][k] != r['after'][k]})[:2000]
    assert r['before']['learner_cbs'] == ['TrainEvalCallback', 'Recorder', 'CastToTensor']

@pytest.mark.timeout(300)
def test_fastai_modules_imported_later_are_still_patched():
    "Import neutrality does not cost the patches: modules imported after ddpsafe get them when they load"
    code = textwrap.dedent('''
        import ddpsafe.all
        import sys; assert 'fastai.distributed' not in sys.modules and 'fastai.callback.progress' not in sys.modules
        import fastai.distributed, fastai.callback.progress
        from ddpsafe.patches.learner import fastai_stock
        assert fastai.distributed.DistributedDL._broadcast.__module__.startswith('ddpsafe'), 'DistributedDL not patched'
        assert fastai.callback.progress.CSVLogger.before_fit.__module__.startswith('ddpsafe'), 'CSVLogger not patched'
        print('ok')
    ''')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and out.stdout.strip() == 'ok', out.stderr[-3000:]

API_PATHS = '''
import sys
import ddpsafe.core, ddpsafe.io
assert not [m for m in sys.modules if m.split('.')[0] == 'fastai'], 'ddpsafe.core and ddpsafe.io imported fastai'
from ddpsafe.core import on_main, agree, rank; from ddpsafe.io import atomic_save, safe_load, prepare_dir
from ddpsafe.checkpoint import CheckpointCallback
from ddpsafe.all import *
import ddpsafe.dist.collectives as c, ddpsafe.files.safe as f, ddpsafe.callback.checkpoint as k
assert (ddpsafe.core.__all__, ddpsafe.io.__all__) == (c.__all__, f.__all__) and CheckpointCallback is k.CheckpointCallback
print('ok')
'''

@pytest.mark.timeout(300)
def test_api_paths():
    "shared/API.md's import paths (`ddpsafe.core`, `ddpsafe.io`, `ddpsafe.checkpoint`, `ddpsafe.all`) give the names of the rooms that hold them; the first two import no fastai"
    out = subprocess.run([sys.executable, '-c', API_PATHS], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and out.stdout.strip() == 'ok', out.stderr[-3000:]
