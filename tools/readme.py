"""Write README.md from nbs/index.ipynb (no Quarto needed): markdown cells as they are, code cells as fenced
python blocks, their stored text outputs as fenced blocks. Cells hidden by nbdev (`#| hide`, `#| include: false`,
export cells) are left out, and `#|` directive lines are dropped from the code shown.

    python tools/readme.py           # write README.md
    python tools/readme.py --check   # exit 1 if README.md is not what this would write
"""
from __future__ import annotations
import argparse, difflib, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/'tools'))
from figures import substitute   # {{< var name >}}: a figure from its one source (tools/figures.py)
NB, README = ROOT/'nbs'/'index.ipynb', ROOT/'README.md'
HEADER = '<!-- Generated from nbs/index.ipynb by tools/readme.py: edit the notebook, then run `python tools/readme.py`. -->'
_ansi = re.compile(r'\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])')
_hide = {'hide', 'export', 'exporti', 'exports', 'default_exp'}

def src(x) -> str: return ''.join(x) if isinstance(x, list) else (x or '')

def fence(text:str, lang:str='') -> str:
    n = max([3] + [len(m) + 1 for m in re.findall(r'`{3,}', text)])
    return f"{'`'*n}{lang}\n{text.strip(chr(10))}\n{'`'*n}"

def directives(s:str) -> tuple[dict, str]:
    "`#|` directives at the top of a cell, and the code after them"
    lines, d, i = s.splitlines(), {}, 0
    while i < len(lines) and (m := re.match(r'^\s*#\|\s*(.*?)\s*$', lines[i])):
        k, _, v = m.group(1).replace(':', ' ', 1).partition(' ')
        d[k.strip().lower()] = v.strip().strip('"\'').lower()
        i += 1
    return d, '\n'.join(lines[i:]).strip('\n')

def text_outputs(outs:list) -> list[str]:
    "The text of a cell's outputs: printed text, results' plain text, errors"
    res = []
    for o in outs:
        t = o.get('output_type')
        if t == 'stream': txt = src(o.get('text'))
        elif t in ('execute_result', 'display_data'):
            d = o.get('data', {})
            txt = src(d.get('text/markdown')) if 'text/markdown' in d else src(d.get('text/plain'))
            if 'text/markdown' in d and txt.strip(): res.append(('md', txt)); continue
        elif t == 'error': txt = '\n'.join(o.get('traceback') or [f"{o.get('ename')}: {o.get('evalue')}"])
        else: continue
        txt = _ansi.sub('', txt)
        if txt.strip():
            if res and res[-1][0] == 'text' and t == 'stream': res[-1] = ('text', res[-1][1] + txt)
            else: res.append(('text', txt))
    return [fence(t) if k == 'text' else t.strip() for k, t in res]

def readme(nb_path:Path=NB) -> str:
    nb = json.loads(nb_path.read_text(encoding='utf-8'))
    parts = [HEADER]
    for c in nb['cells']:
        s = src(c.get('source'))
        if c['cell_type'] == 'markdown':
            if s.strip(): parts.append(substitute(s.strip('\n')))
        elif c['cell_type'] == 'code':
            d, code = directives(s)
            if d.keys() & _hide or d.get('include') == 'false': continue
            if code.strip() and d.get('echo') != 'false': parts.append(fence(code, 'python'))
            if d.get('output') != 'false': parts += text_outputs(c.get('outputs', []))
    return '\n\n'.join(parts) + '\n'

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--check', action='store_true', help='exit 1 if README.md differs from what would be written')
    a = ap.parse_args()
    new = readme()
    if not a.check:
        README.write_text(new, encoding='utf-8'); print(f'wrote {README.relative_to(ROOT)}'); return
    old = README.read_text(encoding='utf-8') if README.exists() else ''
    if old == new: print('README.md is up to date with nbs/index.ipynb'); return
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), 'README.md (committed)', 'README.md (from nbs/index.ipynb)', lineterm='', n=1))
    print('\n'.join(diff[:60]) + ('\n...' if len(diff) > 60 else ''), file=sys.stderr)
    sys.exit('ERROR: README.md is stale or edited by hand: it must be generated from nbs/index.ipynb.\n'
             'Run `python tools/readme.py` and commit README.md (edit nbs/index.ipynb, not README.md).')

if __name__ == '__main__': main()
