"""Issue 72: `ddpsafe-goodput` on a real requeue loop (`torchrun`, 2 gloo ranks) through faults at known steps.

The loop launches `tests/scripts/goodput_train.py` (every 5 steps a checkpoint, 30 steps in all) until it finishes: a
SIGTERM to torchrun at step 8 (preempted: saved, nothing lost), a SIGKILL of rank 1 at step 13 (crashed: the steps
after its last checkpoint lost), a SIGKILL of the whole job (torchrun and both ranks) at step 17, then a launch that
runs to the end. The report must close: its buckets add up to the loop's wall time as this test measured it, within
2% (from the first launcher's start to the end of the last launch's fit; the last launcher's shut-down after that, 2-5 s
of torchrun and interpreter teardown here, comes after every record a run can write, and is printed); its lost steps are, exactly, the steps each killed launch ran after its last checkpoint (from the launch's own
marker lines); its launches' endings are named; and its picture has one row per launch and a legend naming each
bucket. A launch with no fault loses nothing, and its goodput is its steps' share of its time.

    python -m pytest tests/test_goodput.py -s      # 5 launches, mostly imports: 85 s on 2 idle cores, 160 s beside other jobs"""
from __future__ import annotations
import sys, json, time, shutil, subprocess
from pathlib import Path
import pytest
from conftest import Launch, needs_torchrun, tools, TORCHRUN   # noqa: F401 (`tools` is a fixture)
from ddpsafe.goodput import goodput_report, plot_goodput, BUCKETS

SCRIPT = Path(__file__).parent/'scripts'/'goodput_train.py'
BIN = Path(sys.executable).parent
pytestmark = needs_torchrun
LOOP = [('sigterm', 8, 'preempted'), ('killrank', 13, 'crashed'), ('killjob', 17, 'crashed'), ('none', 0, 'finished')]

def launch(tools, run:Path, name:str, fault:str, at:int) -> dict:
    "One torchrun launch of the script with its fault; what its rank 0 logged: the saves, the steps, the fault's step"
    shutil.rmtree(run/'marks', ignore_errors=True)          # this launch's markers alone
    began = time.time()
    l = Launch([str(TORCHRUN), '--nproc_per_node', '2', str(SCRIPT), str(run), '--fault', fault, '--at', str(at)], run, tools, name)
    code, exited = l.wait(120), time.time()
    marks = [m.split() for r in range(2) for m in l.marks(r)]
    return dict(code=code, began=began, exited=exited, saves=[int(m[1]) for m in marks if m[0] == 'SAVE'], fault=next((int(m[2]) for m in marks if m[0] == 'FAULT'), None),
                steps=[(int(m[1]), float(m[2]), float(m[3])) for m in marks if m[0] == 'STEP'], out=l.output(), result=l.results()[0])

def lost_after_kill(logs:list, k:int) -> int:
    "The steps killed launch `k` ran after the last checkpoint before its kill (its own, or the one it resumed from), from the launches' marker lines"
    return logs[k]['fault'] - max(s for log in logs[:k+1] for s in log['saves'] if s <= logs[k]['fault'])

def check_closes(rep:dict, wall:float, label:str):
    "The buckets add up to the report's wall time, and that to the wall time measured here, within 2%"
    total = sum(rep['buckets'].values())
    assert abs(total - rep['wall_seconds']) < 1e-6*max(1., wall), (label, total, rep['wall_seconds'])
    assert abs(total - wall) <= 0.02*wall, f"{label}: the buckets add up to {total:.2f} s, the loop took {wall:.2f} s\n{json.dumps(rep['buckets'])}"

@pytest.mark.timeout(400)
def test_requeue_loop_goodput(tools, tmp_path):
    run = tmp_path/'run'; run.mkdir()
    t0, logs = time.time(), []
    for i, (fault, at, _) in enumerate(LOOP):
        logs.append(launch(tools, run, f'launch{i+1}', fault, at))
        assert fault == 'none' or logs[-1]['fault'] == at, f'launch {i+1}: the fault at step {at} did not happen\n{logs[-1]["out"][-3000:]}'
    wall = logs[-1]['result']['t'] - t0                     # the run's end: its last fit's, as rank 0 logged it
    assert logs[-1]['code'] == 0 and logs[-1]['result']['step'] == 30, logs[-1]['out'][-3000:]
    rep = goodput_report(run/'checkpoints')
    print(f'\n[goodput] the loop took {wall:.2f} s to its fit\'s end (its launcher exited {logs[-1]["exited"] - t0 - wall:.2f} s later); the report: {rep["wall_seconds"]:.2f} s, goodput {rep["goodput"]:.1%}, {rep["lost_steps"]} steps lost, '
          f'buckets {json.dumps({k: round(v, 2) for k, v in rep["buckets"].items()})}')
    for log, l in zip(logs, rep['launches']):
        print(f"  {l['ended']:<9} began {l['began'] - log['began']:+.2f} s after its Popen, ended {log['exited'] - l['ended_at']:.2f} s before its launcher exited")
    assert [l['ended'] for l in rep['launches']] == [e for _, _, e in LOOP], [l['ended'] for l in rep['launches']]
    check_closes(rep, wall, 'requeue loop')
    want = [0, lost_after_kill(logs, 1), lost_after_kill(logs, 2), 0]       # the SIGTERM's checkpoint loses nothing
    assert [l['lost_steps'] for l in rep['launches']] == want and rep['lost_steps'] == sum(want), ([l['lost_steps'] for l in rep['launches']], want)
    redone = sum(len({s[0] for s in log['steps']} & {s[0] for s in later['steps']}) for k, log in enumerate(logs) for later in logs[k+1:k+2])
    assert rep['lost_steps'] == redone, f'lost {rep["lost_steps"]}, but {redone} steps were run twice'
    assert rep['kept_steps'] == 30 and rep['buckets']['lost'] > 0 and 0 < rep['goodput'] < 1
    assert any('killed' in w for w in rep['launches'][2]['inferred']), rep['launches'][2]['inferred']   # the job killed whole: inferred, and said
    # the command, as a requeue loop's script calls it: JSON, and the picture
    p = subprocess.run([str(BIN/'ddpsafe-goodput'), str(run), '--json', '--plot', str(tmp_path/'goodput.png')], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    js = json.loads(p.stdout)
    assert {'wall_seconds', 'goodput', 'lost_steps', 'buckets', 'launches'} <= set(js) and set(js['buckets']) == set(BUCKETS), sorted(js)
    assert [l['ended'] for l in js['launches']] == [e for _, _, e in LOOP] and js['lost_steps'] == sum(want)
    assert (tmp_path/'goodput.png').read_bytes()[:4] == b'\x89PNG'
    fig = plot_goodput(rep)
    ax = fig.axes[0]
    rows = {round(float(c.get_paths()[0].vertices[:, 1].min() + 0.4), 2) for c in ax.collections if c.get_paths()}   # the spans' rows: each 0.8 high, centred on its launch
    assert len(ax.get_yticklabels()) == len(LOOP) and rows == set(map(float, range(len(LOOP)))), rows
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(BUCKETS.values())
    text = subprocess.run([str(BIN/'ddpsafe-goodput'), str(run/'checkpoints')], capture_output=True, text=True, timeout=120).stdout
    print(text)

@pytest.mark.timeout(200)
def test_no_fault_loses_nothing(tools, tmp_path):
    run = tmp_path/'run'; run.mkdir()
    t0 = time.time()
    log = launch(tools, run, 'plain', 'none', 0)
    assert log['code'] == 0, log['out'][-3000:]
    wall = log['result']['t'] - t0
    rep = goodput_report(run/'checkpoints')
    check_closes(rep, wall, 'one launch')
    assert rep['lost_steps'] == 0 and rep['buckets']['lost'] == 0 and [l['ended'] for l in rep['launches']] == ['finished']
    b, (_, first_s, first_t), (_, _, last_t) = rep['buckets'], log['steps'][0], log['steps'][-1]
    inside = sum(s for _, s, _ in log['steps']) - b['save']   # the steps' own time as the script measured it (batch start to end), less the saves inside them
    span = last_t - (first_t - first_s) - b['eval'] - b['save']   # from the first batch's start to the last step's end, less validation and saves
    assert rep['goodput'] == pytest.approx(b['productive']/rep['wall_seconds'])
    assert inside - 0.05 <= b['productive'] <= span + 0.05*span + 0.5, (b['productive'], inside, span)   # and between batches: the loader, fastai's events
    print(f"\n[goodput] no fault: goodput {rep['goodput']:.1%} = {b['productive']:.2f} s of steps (the script: {inside:.2f} s inside its steps, "
          f"{span:.2f} s from its first batch to its last step, less validation and saves) in {rep['wall_seconds']:.2f} s")
