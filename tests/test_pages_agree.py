"""The pages tell one story (issue 53): the landing page's example and the tutorials and how-tos agree on the model they
train, on one `monitor` for both callbacks that keep a best, and on `get_model` where a callback reads the weights; printed
output names a page's working folder as the text does (`./checkpoints`, not a made-up `run/checkpoints`)."""
from __future__ import annotations
import re, sys, json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'tools'))
import browser_check
from docsite import showdoc

def page_of(nb:Path) -> str: return re.sub(r'^\d+[a-z]?_', '', nb.stem) + '.html'
STORIES = [nb for nb in sorted((ROOT/'nbs').glob('*.ipynb')) if page_of(nb) in browser_check.story_pages()]

def shown_code(nb:Path) -> list[str]:
    "The code a reader sees on `nb`'s page: code cells that are not hidden, and code blocks in its text"
    res = []
    for c in json.loads(nb.read_text())['cells']:
        s = ''.join(c['source'])
        if c['cell_type'] == 'code' and not re.match(r'\s*#\|\s*hide', s): res.append(s)
        elif c['cell_type'] == 'markdown': res += re.findall(r'```[^\n]*\n(.*?)```', s, re.S)
    return res

def test_stories_found():
    assert {'index.html', 'quickstart.html', 'best_model.html'} <= {page_of(nb) for nb in STORIES}, STORIES

def test_one_example_model():
    "Every vision example under DDP trains the model the landing page's does (a sharded one is another story: too big for DDP)"
    want = set(re.findall(r'vision_learner\(dls, (\w+)', '\n'.join(shown_code(ROOT/'nbs'/'index.ipynb'))))
    assert len(want) == 1, want
    for nb in STORIES:
        ddp = '\n'.join(c for c in shown_code(nb) if 'fsdp_ctx' not in c)
        for m in re.findall(r'vision_learner\(dls, (\w+)', ddp): assert {m} == want, (nb.name, m, want)
        for m in re.findall(r"CheckpointCallback\('s3://[\w/-]*?(resnet\d+)", '\n'.join(shown_code(nb))): assert {m} == want, (nb.name, m)

def test_one_monitor():
    "Where an example keeps a best with both callbacks, both watch the same metric"
    for nb in STORIES:
        for code in shown_code(nb):
            saves = re.findall(r"SaveModelCallback\((?:[^()]*?monitor=('[^']*'))?", code)
            if not saves or 'CheckpointCallback(' not in code: continue
            cks = re.findall(r"CheckpointCallback\((?:[^()]*?monitor=('[^']*'))?", code)
            assert {m or "'valid_loss'" for m in saves} == {m or "'valid_loss'" for m in cks}, (nb.name, code)

def test_get_model_in_callbacks():
    "A callback that reads the weights goes through `get_model`, so its keys are the plain model's under DDP"
    for nb in STORIES:
        assert 'self.model.state_dict()' not in '\n'.join(shown_code(nb)), nb.name

def test_working_folder_in_output():
    assert showdoc.neutral_paths('ddpsafe: checkpoints in /tmp/tmpk2x9q1ab/checkpoints') == 'ddpsafe: checkpoints in ./checkpoints'
    assert showdoc.neutral_paths('/tmp/ddpsafe-demo-z1q4zkvh/job') == 'ddpsafe-demo/job'
    assert showdoc.neutral_paths('Downloading: "http://127.0.0.1:32863/w.pth"') == 'Downloading: "http://127.0.0.1:PORT/w.pth"'
