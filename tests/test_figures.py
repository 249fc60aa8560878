"""The pages agree on figures and defaults: each has one source (a measurement in bench/results/ or a library
constant, read by tools/figures.py) and is shown through `{{< var name >}}`. Fails when a page writes a figure out by
hand with another value, names a figure that does not exist, or when nbs/_variables.yml (Quarto's copy) is stale."""
from __future__ import annotations
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'tools'))
import figures as F

def test_pages_state_figures_as_their_sources(): assert F.stated_differently(F.page_texts()) == []

def test_every_shortcode_names_a_figure():
    known = F.flat()
    bad = [(page, n) for page, text in F.page_texts().items() for n in F.used(text) if n not in known]
    assert bad == [], f'{{{{< var >}}}} names no figure of tools/figures.py: {bad}'

def test_variables_yml_fresh():
    assert (ROOT/'nbs'/'_variables.yml').read_text() == F.variables_yml(), 'run `python tools/figures.py` and commit nbs/_variables.yml'

def test_the_check_fails_on_a_stale_page():
    vals = dict(F.flat(), **{'preempt.poll_share': '0.28%, 0.18% and 0.25%', 'preempt.round_spacing': '0.094 s',
                            'preempt.steps': '4.0, 10.7 and 52 ms', 'preempt.poll_seconds': '0.25 s'})
    old = ('In exchange, a round (under a millisecond on CPU ranks) comes at most every 0.125-0.25 s instead of at every step. '
           'The benchmarks measure both: the agreement took 0.4-0.5% of the step time, at 8, 18 and 81 ms steps.')
    probs = F.stated_differently({'old.ipynb': old}, vals)
    assert [p.split(' states ')[1].split(' as ')[0] for p in probs] == ['preempt.round_spacing', 'preempt.poll_share', 'preempt.steps'], probs
    same = ('at most one round per 0.094 s at the default `POLL_SECONDS` of 0.25 s; `poll` took 0.28%, 0.18% and\n'
            '0.25% of it, at 4.0, 10.7 and 52 ms steps')
    assert F.stated_differently({'ok.md': same}, vals) == []
    assert len(F.stated_differently({'x.md': '`DDPSAFE_TIMEOUT` (20 minutes by default)'})) == 1
    assert len(F.stated_differently({'x.md': 'exits with code **76** (`ddpsafe.callback.preempt.REQUEUE_EXIT_CODE`)'})) == 1
    assert len(F.stated_differently({'x.md': '| 4 (stopped, `STOPPED_EXIT_CODE`) |'})) == 1
    assert len(F.stated_differently({'x.md': 'PyTorch 2.4 or newer'}, dict(vals, **{'versions.torch': '2.5'}))) == 1

@pytest.mark.parametrize('fig,stale', [
    ('exit.requeue', 'every rank exits with the requeue code 76'),
    ('exit.requeue', 'the ranks exit with code 76. Run the same command again'),
    ('checkpoint.order', "Keep the callback's `order` below `CheckpointCallback`'s (66; the default is 0)"),
    ('checkpoint.order', 'give them an `order` below 66.'),
    ('checkpoint.monitor', "(`CheckpointCallback(monitor='accuracy')` by default)"),
    ('checkpoint.every_epoch', 'keep `every_epoch=2` (the default: every epoch)'),
    ('checkpoint.upload_wait', 'it waits at most `upload_wait` seconds (30 by default: fit it into the grace period)'),
    ('preempt.remote_switch_seconds', 'looked for at most every 5 s (`ddpsafe.callback.preempt.REMOTE_SWITCH_SECONDS`)'),
    ('versions.torch', 'PyTorch 2.4 is the oldest accepted.'),
    ('versions.torch', 'also on 2.4.1 with torchvision 0.19.1, the oldest accepted')])
def test_defaults_stated_by_hand(fig, stale):
    "A default or code written out on a page is checked against the library: the stale value fails, the real one passes"
    probs = F.stated_differently({'x.md': stale})
    assert [p.split(' states ')[1].split(' as ')[0] for p in probs] == [fig], probs
    real = F.flat()[fig]
    fixed = stale.replace(probs[0].split(' as ')[1].split(';')[0].strip("'"), real, 1)
    assert F.stated_differently({'x.md': fixed}) == [], fixed

def test_substitute():
    assert F.substitute('took {{< var preempt.poll_share >}} of a step', {'preempt.poll_share': '1%'}) == 'took 1% of a step'
    with pytest.raises(KeyError, match='no such figure'): F.substitute('{{< var preempt.nothing >}}', {})
