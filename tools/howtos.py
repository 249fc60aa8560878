"""Run the code each guide page shows, and nothing else, in a fresh folder: what a reader who copies the page runs.

`nbdev-test` runs every cell of a notebook, the hidden ones too, so a page whose visible code uses a name that only a
hidden cell defines (`test_eq`, a helper imported out of sight) passes there and fails for the reader with a `NameError`.
This check runs each page the reader's way:

- the pages: every notebook in `nbs/` that shows code and is not a module's page (no `#| default_exp`): the landing
  page, the quick start, the guides and the how-tos. A module's page shows its tests under definitions that the page
  documents with `show_doc`; `nbdev-test` runs those in the module's own context;
- what runs: the code cells the page shows, in order, as one script with this Python, in a new empty folder, with this
  Python's folder first on `PATH` (`torchrun`, `ddpsafe-ls`...) and the repository first on `PYTHONPATH`. The folder
  stands where a notebook of a clone's `nbs/` stands: its parent holds the repository's `bench/` (the benchmarks page
  reads `../bench/results`), and nothing else;
- what is skipped: cells the page does not show (`#| hide`, `#| echo: false`), and cells shown but not run by default,
  which `nbdev-test` skips too (`#| eval: false`, and the test flags `#| notest`, `#| slow`); the report counts them, and a
  page that shows one must not claim that all its code runs;
- IPython's syntax and its `display`, as IPython runs them, except that every shell command must succeed: a `!cmd` line is
  `subprocess.run(cmd, shell=True, check=True)` (a command whose failure is expected, or whose status is its answer as
  `diff`'s is, says so on the page: `cmd || echo ...`, `diff a b || true`); a `%%bash` cell runs
  in bash and must exit 0 (as IPython's does); a `%%writefile NAME` cell writes NAME. Other magics, and `{expr}` or `$name`
  in a `!` line, are refused: the check would not run what IPython runs.

Each page prints `PASS` or `FAIL` with its time; a failure names the cell and the error. Exit status 1 if any page failed.

    python tools/howtos.py [PAGE ...]      # PAGE: a notebook's path or name (30_best_model); default: every page with code
    python tools/howtos.py --whole-re      # the pages shown whole, as `nbdev-test --skip-file-re`: run here, and only here

A page that shows every code cell it has runs the same code here as under `nbdev-test`, in a stricter place (a fresh
folder), so `tools/test.sh` has `nbdev-test` skip it: each page's code runs once. A page with a hidden cell runs in both.
"""
from __future__ import annotations
import json, os, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = '- section: How-to recipes'
NOT_SHOWN, NOT_RUN = {'hide', 'echo: false'}, {'eval: false', 'notest', 'slow'}   # notest, slow: nbdev-test's flags (pyproject's tst_flags)

def how_to_pages(nbs:Path=ROOT/'nbs') -> list:
    "The notebooks in `nbs` whose front matter puts them in the how-to section"
    return [p for p in sorted(nbs.glob('*.ipynb')) if any(SECTION in ''.join(c['source']).splitlines()
            for c in json.loads(p.read_text())['cells'][:2] if c['cell_type'] == 'markdown')]

def module_page(nb:Path) -> bool:
    "Is `nb` a module's page (`#| default_exp`), whose definitions the reader sees through `show_doc`?"
    return any(c['cell_type'] == 'code' and re.search(r'^#\|\s*default_exp\b', ''.join(c['source']), re.M)
               for c in json.loads(nb.read_text())['cells'])

def code_pages(nbs:Path=ROOT/'nbs') -> list:
    "Every page that shows the reader code to run: the notebooks in `nbs` that are not a module's page and show a code cell"
    return [p for p in sorted(nbs.glob('*.ipynb')) if not module_page(p) and any(map(bool, cells(p)))]

def directives(src:str) -> set:
    "The cell's `#|` directives, normalised: `#|hide` and `#| echo:false` are 'hide' and 'echo: false'"
    out = set()
    for line in src.splitlines():
        if not line.startswith('#|'): break
        k, _, v = line[2:].strip().partition(':')
        out.add(f'{k.strip()}: {v.strip().lower()}' if v.strip() else k.strip())
    return out

def cells(nb:Path) -> tuple:
    "(code cells the page shows and runs, as (index, source); how many it shows and does not run)"
    run, shown_only = [], 0
    for i, c in enumerate(json.loads(nb.read_text())['cells']):
        if c['cell_type'] != 'code' or not (src := ''.join(c['source'])).strip(): continue
        d = directives(src)
        if d & NOT_SHOWN: continue
        if d & NOT_RUN: shown_only += 1; continue
        run.append((i, src))
    return run, shown_only

def _shell(cmd:str) -> str:
    "A `!cmd` line's command, refused where IPython would expand Python into it"
    if re.search(r'\{[^}]*\}|\$[A-Za-z_]', cmd):
        raise ValueError(f'!{cmd}: IPython expands {{expr}} and $name in a shell line; write the command without them')
    return cmd

def as_python(src:str) -> str:
    "One cell's source as plain Python, its IPython syntax spelled out"
    lines = src.splitlines()
    if lines[0].startswith('%%'):
        magic, *args = lines[0][2:].split()
        body = '\n'.join(lines[1:]) + '\n'
        if magic == 'writefile' and len(args) == 1: return f'__import__("pathlib").Path({args[0]!r}).write_text({body!r})\n'
        if magic == 'bash' and not args: return f'__import__("subprocess").run(["bash", "-c", {body!r}], check=True)\n'
        raise ValueError(f'cell magic {lines[0]!r}: only %%writefile NAME and %%bash are run by this check')
    out = []
    for line in lines:
        indent, code = re.match(r'(\s*)(.*)', line).groups()
        if code.startswith('!'): line = f'{indent}__import__("subprocess").run({_shell(code[1:])!r}, shell=True, check=True)'
        elif code.startswith('%'): raise ValueError(f'line magic {code!r}: not run by this check')
        out.append(line)
    return '\n'.join(out) + '\n'

PRELUDE = 'from IPython.display import display\n'   # a name IPython gives every notebook, as a builtin

def script(nb:Path) -> tuple:
    "(the page's visible code as one script, [(first line, cell index)], cells shown and not run)"
    parts, starts, line = [PRELUDE], [], 1 + PRELUDE.count('\n')
    run, shown_only = cells(nb)
    for i, src in run:
        code = f'# --- cell {i}\n' + as_python(src)
        starts.append((line + 1, i)); parts.append(code); line += code.count('\n')
    return ''.join(parts), starts, shown_only

def where(out:str, name:str, starts:list) -> str:
    "The cell, and its line, of the last frame in the script that the traceback in `out` names"
    lines = [int(n) for n in re.findall(rf'File "[^"]*{re.escape(name)}", line (\d+)', out)]
    if not lines or not starts: return ''
    first, cell = max((s for s in starts if s[0] <= lines[-1]), default=starts[0])
    return f'cell {cell}, line {lines[-1] - first + 1}: '

def run_page(nb:Path,             # A how-to notebook
             timeout:float=600,   # Seconds before the page's script is killed, and the page fails
             keep:bool=False      # Leave the folder the page ran in?
            ) -> dict:
    "Run the page's visible code in a fresh folder: dict(page, ok, seconds, error, folder, output)"
    try: src, starts, shown_only = script(nb)
    except ValueError as e: return dict(page=nb.stem, ok=False, seconds=0., error=str(e), folder=None, output='')
    place, tmp = Path(tempfile.mkdtemp(prefix=f'howto-{nb.stem}-')), Path(tempfile.mkdtemp(prefix='howto-script-'))
    work = place/'nbs'; work.mkdir()
    (place/'bench').symlink_to(ROOT/'bench', target_is_directory=True)   # `../bench/results`, as from a clone's nbs/
    (tmp/f'{nb.stem}.py').write_text(src)
    env = {**os.environ, 'PYTHONUNBUFFERED': '1', 'MPLBACKEND': 'Agg', 'PATH': f'{Path(sys.executable).parent}{os.pathsep}{os.environ.get("PATH", "")}',
           'PYTHONPATH': os.pathsep.join([str(ROOT), *filter(None, [os.environ.get('PYTHONPATH')])])}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(tmp/f'{nb.stem}.py')], cwd=work, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors='replace', start_new_session=True)
    try: out, code = proc.communicate(timeout=timeout)[0], proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)   # the script's whole session: torchrun and its ranks too
        out, code = proc.communicate()[0], None
    secs = round(time.monotonic() - t0, 1)
    if code == 0: error = ''
    elif code is None: error = f'did not finish within {timeout:g}s'
    else: error = where(out, f'{nb.stem}.py', starts) + (out.strip().splitlines() or [f'exit code {code}'])[-1]
    shutil.rmtree(tmp, ignore_errors=True)
    if not keep: shutil.rmtree(place, ignore_errors=True)
    return dict(page=nb.stem, ok=code == 0, seconds=secs, error=error, folder=work if keep else None, output=out,
                cells=len(starts), shown_only=shown_only)

def shown_whole(nb:Path) -> bool:
    "Does the page show every code cell it has? Then this check runs all that `nbdev-test` would, and `nbdev-test` skips it"
    return all(not directives(''.join(c['source'])) & NOT_SHOWN for c in json.loads(nb.read_text())['cells'] if c['cell_type'] == 'code')

def whole_pages(pages:list|None=None) -> list:
    "The pages (default: every page with code) that show every code cell they have"
    return [p for p in (code_pages() if pages is None else pages) if shown_whole(p)]

def whole_pages_re(pages:list|None=None) -> str:
    "`nbdev-test --skip-file-re`: its default (`^[_.]`) and the pages shown whole, which this check runs once"
    names = [re.escape(p.name) for p in whole_pages(pages)]
    return '^[_.]' + (f"|^({'|'.join(names)})$" if names else '')

def report(r:dict) -> str:
    "One line: PASS or FAIL, the page, its time, and what failed"
    what = f"{r['cells']} cell{'s'*(r['cells'] != 1)}" if 'cells' in r else ''
    if r.get('shown_only'): what += f", {r['shown_only']} shown and not run"
    return f"{'PASS' if r['ok'] else 'FAIL'} {r['page']} ({r['seconds']:.1f}s{', ' + what if what else ''})" + (f": {r['error']}" if r['error'] else '')

def main(args:list) -> int:
    if args == ['--whole-re']: print(whole_pages_re()); return 0
    pages = [Path(a) if a.endswith('.ipynb') else ROOT/'nbs'/f'{a}.ipynb' for a in args] or code_pages()
    bad = 0
    for nb in pages:
        r = run_page(nb)
        print(report(r), flush=True)
        if not r['ok']: bad += 1; print('\n'.join('    ' + l for l in r['output'].strip().splitlines()[-15:]), flush=True)
    return 1 if bad else 0

if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
