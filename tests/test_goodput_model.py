"""bench/goodput_model.py's arithmetic on hand-computed cases, and its inputs from the recorded run (no process started)."""
from __future__ import annotations
import sys, json, math
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'bench'))
import goodput_model as G
from ddpsafe.callback.interval import waste

def test_lost_by_hand():
    # one failure an hour, a restart of 20 s, the disk every 60 s at 0.1 s a save: saves 0.1/60, redo 30/3600, restart 20/3600
    no = G.lost(M=3600, R=20, tau_d=60, c_d=.1)
    assert (no['saves'], no['redo'], no['restart']) == pytest.approx((1/600, 1/120, 1/180))
    assert no['total'] == pytest.approx(waste(60, .1, 3600, 20))              # without the tier, ddpsafe.callback.interval's waste
    # the memory tier every 10 s at 0.05 s a save, surviving 3 failures of 4: saves 0.1/60 + 0.05/10, redo (0.75*5 + 0.25*30)/3600
    yes = G.lost(M=3600, R=20, tau_d=60, c_d=.1, tau_m=10, c_m=.05, f=.75)
    assert yes['saves'] == pytest.approx(1/600 + 1/200) and yes['redo'] == pytest.approx(11.25/3600)
    assert yes['total'] == pytest.approx(1/600 + 1/200 + 11.25/3600 + 20/3600)
    assert G.lost(3600, 20, 10, .1, tau_m=60, c_m=.05)['redo'] == pytest.approx(5/3600)   # a tier rarer than the disk: the disk's interval

def test_best_interval_and_pay_off():
    # sqrt(2 * 0.05 * (3600/0.5 + 0)) = sqrt(720) = 26.8 s; the 1% floor 100 * c_m when that is longer
    assert G.best_memory_interval(.05, 3600, f=.5) == pytest.approx(math.sqrt(720))
    assert G.best_memory_interval(.5, 60) == pytest.approx(50.)
    # it pays off iff the disk's interval exceeds 2*sqrt(2*c_m*M/f): 2*sqrt(360) = 37.9 s at c_m = 0.05 s, one failure an hour
    assert not G.pays_off(.05, 3600, 37) and G.pays_off(.05, 3600, 38)
    tm = math.sqrt(2*.05*3600)                    # at exactly that disk interval, the tier at its best gains nothing
    td = 2*tm
    assert G.lost(3600, 0, td, 0, tm, .05)['total'] == pytest.approx(G.lost(3600, 0, td, 0)['total'])

def test_measured_from_the_run():
    gp = json.loads((G.RESULTS/'goodput.json').read_text())
    inp, s = G.measured(gp), gp['scenarios']['memory']
    assert inp['c_m'] == pytest.approx(s['shares_s']['saves: memory']/s['memory_saves'])
    assert inp['tau_d'] == gp['save_every_seconds'] and inp['M_stress'] == gp['kill_every']
    assert 5 < inp['R'] < 60 and 0 <= inp['noticing'] < 5
    rows = G.table(inp)
    assert len(rows) == 3*5 and all(abs(r['saves_pct'] + r['redo_pct'] + r['restart_pct'] - r['total_pct']) < .02 for r in rows)
    rec = G.recommend(inp)
    for rate in ('one an hour', 'one every 10 min', 'stress'):
        assert rec[rate]['memory_cost_pct'] <= 1.0 + 1e-9        # the recommended interval keeps the tier's saves within 1%
