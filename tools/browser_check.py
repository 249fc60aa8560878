"""Load the built docs site in headless Chromium, offline, and fail on anything broken.

    python tools/browser_check.py [--site docs] [--shot .ci/artifacts/landing.png]

The site is served from `--site` by Python's http.server on 127.0.0.1 (a free port), under the path of
`site_url` in mkdocs.yml (`/ddpsafe/`, as on GitHub Pages). Chromium runs with every host but 127.0.0.1
unreachable. The check fails on:
- a page or file that does not exist: any request to the server answered 4xx/5xx (pages, links found in
  pages, scripts, styles, images, the search index), or a link to an anchor that its page does not have;
- a page that loads a script, style, font or image from another host (the site must work offline);
- a JavaScript error on a page (Chromium's console log: `Uncaught ...`, or console errors);
- a page whose main content (`.md-content` / `<article>`) is empty once its scripts have run;
- a page missing from the search index.
It saves a screenshot of the landing page (1280x900) to `--shot`.
"""
from __future__ import annotations
import argparse, functools, html.parser, http.server, os, re, shutil, subprocess, sys, tempfile, threading, time
import urllib.error, urllib.parse, urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync', '--disable-default-apps', '--disable-extensions',
         '--mute-audio', '--hide-scrollbars',
         '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1']   # offline: only our server resolves

def find_chromium() -> str:
    for n in ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable', 'chrome'):
        if p := shutil.which(n): return p
    sys.exit('browser_check: no Chromium found; install it with `apt-get install -y chromium`')

# ---------------------------------------------------------------------------------------------------------- server
class Server:
    "http.server in a thread, serving `root` under `prefix`; records every request and its status"
    def __init__(self, root:Path, prefix:str):
        self.log, prefix = [], '/' + prefix.strip('/') + '/' if prefix.strip('/') else '/'
        srv = self
        class H(http.server.SimpleHTTPRequestHandler):
            def translate_path(self, path):
                p = urllib.parse.urlsplit(path).path
                if not p.startswith(prefix): return str(root/'\0nonexistent')   # outside the site: 404
                return super().translate_path('/' + p[len(prefix):])
            def log_request(self, code='-', size='-'):
                srv.log.append((self.command, self.path, int(code) if str(code).isdigit() else 0,
                                self.headers.get('Referer', '')))
            def log_message(self, *a): pass
        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(H, directory=str(root)))
        self.base = f'http://127.0.0.1:{self.httpd.server_address[1]}{prefix}'
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
    def close(self): self.httpd.shutdown(); self.httpd.server_close()

# ---------------------------------------------------------------------------------------------------------- parse
class Links(html.parser.HTMLParser):
    "Every URL a page links to or loads, the ids it defines, and the text of its main content"
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links, self.loads, self.ids, self.main, self._depth, self._skip = [], [], set(), [], 0, 0
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ('id', 'name'):
            if a.get(k) and (k == 'id' or tag == 'a'): self.ids.add(a[k])
        if tag == 'a' and a.get('href'): self.links.append(a['href'])
        if tag in ('script', 'img', 'iframe', 'source', 'audio', 'video') and a.get('src'): self.loads.append(a['src'])
        if tag == 'link' and a.get('href') and set((a.get('rel') or '').split()) & {'stylesheet', 'icon', 'preload', 'modulepreload', 'manifest'}:
            self.loads.append(a['href'])
        cls = (a.get('class') or '').split()
        if self._depth: self._depth += 1
        elif tag == 'article' or 'md-content' in cls: self._depth = 1
        if self._depth and tag in ('script', 'style'): self._skip += 1
    def handle_endtag(self, tag):
        if self._depth and tag in ('script', 'style') and self._skip: self._skip -= 1
        if self._depth: self._depth -= 1
    def handle_data(self, data):
        if self._depth and not self._skip: self.main.append(data)

def parse(text:str) -> Links:
    p = Links(); p.feed(text); p.close(); return p

# ---------------------------------------------------------------------------------------------------------- chromium
def chromium(exe:str, url:str, *extra:str, timeout:float=60) -> tuple[str, str]:
    "Run headless Chromium on `url` in a fresh profile; its stdout and its log"
    with tempfile.TemporaryDirectory(prefix='chromium-') as prof:
        cmd = [exe, *FLAGS, f'--user-data-dir={prof}', '--enable-logging=stderr', '--v=0',
               '--virtual-time-budget=5000', *extra, url]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return r.stdout, r.stderr

_console = re.compile(r':CONSOLE[:(]\d*\)?\]?\s*"(.*)", source: (\S*) \((\d+)\)')
def js_errors(log:str) -> tuple[list[str], list[str]]:
    "Console messages in Chromium's log: (errors, other messages)"
    errs, other = [], []
    for line in log.splitlines():
        if m := _console.search(line):
            msg = f'{m.group(1)} ({m.group(2)}:{m.group(3)})'
            bad = 'Uncaught' in m.group(1) or re.search(r'\b(Error|TypeError|ReferenceError|SyntaxError)\b', m.group(1)) \
                  or ':ERROR:CONSOLE' in line
            (errs if bad else other).append(msg)
    return errs, other

# ---------------------------------------------------------------------------------------------------------- check
def site_prefix() -> str:
    "The path of `site_url` in mkdocs.yml (`/ddpsafe/`), where GitHub Pages will serve the site"
    f = ROOT/'mkdocs.yml'
    m = re.search(r'^site_url:\s*["\']?(\S+?)["\']?\s*$', f.read_text(), re.M) if f.exists() else None
    return urllib.parse.urlsplit(m.group(1)).path if m else '/'

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--site', default=str(ROOT/'docs'), help='the built site (default docs/)')
    ap.add_argument('--shot', default=str(ROOT/'.ci/artifacts/landing.png'), help='where to save the landing page screenshot')
    ap.add_argument('--prefix', default=None, help="URL path to serve the site under (default: site_url's path in mkdocs.yml)")
    ap.add_argument('--min-text', type=int, default=40, help='fewest characters of text a page\'s main content may have')
    a = ap.parse_args()
    site = Path(a.site).resolve()
    if not (site/'index.html').exists(): sys.exit(f'browser_check: {site}/index.html does not exist: build the docs first (bash tools/docs.sh)')
    exe = find_chromium()
    srv = Server(site, a.prefix if a.prefix is not None else site_prefix())
    base, host = srv.base, urllib.parse.urlsplit(srv.base).netloc
    fails, t0 = [], time.monotonic()
    def fail(msg):
        if msg not in fails: fails.append(msg); print('  FAIL', msg, flush=True)
    print(f'browser_check: serving {site} at {base} ({exe})', flush=True)

    # every HTML page of the site, plus every internal URL found in them (crawled)
    pages = {base + p.relative_to(site).as_posix() for p in site.rglob('*.html')}
    fetched, anchors, queue, found_on = {}, [], sorted(pages), {}
    while queue:
        url = queue.pop(0)
        if url in fetched: continue
        try:
            with urllib.request.urlopen(url, timeout=30) as r: body, ctype = r.read(), r.headers.get_content_type()
        except urllib.error.HTTPError as e: fetched[url] = None; continue   # the server log reports it
        except OSError as e: fetched[url] = None; fail(f'{url}: {e}'); continue
        fetched[url] = parse(body.decode('utf-8', 'replace')) if ctype == 'text/html' else None
        if fetched[url] is None: continue
        p = fetched[url]
        for ref, loads in [(r, False) for r in p.links] + [(r, True) for r in p.loads]:
            if ref.startswith(('mailto:', 'javascript:', 'data:', 'tel:')): continue
            full = urllib.parse.urljoin(url, ref)
            sp = urllib.parse.urlsplit(full)
            if sp.netloc != host:
                if loads and sp.scheme in ('http', 'https', ''): fail(f'{url}: loads {full} from another host (the site must work offline)')
                continue
            target = urllib.parse.urlunsplit(sp._replace(fragment='', query=''))
            if target.endswith('/'): target += 'index.html'
            if sp.fragment and not loads: anchors.append((url, target, urllib.parse.unquote(sp.fragment)))
            found_on.setdefault(urllib.parse.urlsplit(target).path, url)
            if target not in fetched and target not in queue: queue.append(target)
    for src, target, frag in anchors:
        p = fetched.get(target)
        if p is not None and frag not in p.ids: fail(f'{src}: links to {target}#{frag}, which has no such anchor')

    # the search index (mkdocs' search plugin): every page in it
    idx = site/'search'/'search_index.json'
    if not idx.exists(): fail(f'{idx} is missing: the search box has nothing to search')
    else:
        import json
        try: docs = json.loads(idx.read_text())['docs']
        except (ValueError, KeyError) as e: docs = []; fail(f'{idx} is not a search index: {e}')
        indexed = {d['location'].split('#')[0] or 'index.html' for d in docs}
        for u in sorted(pages):
            rel = u[len(base):]
            if not rel.endswith('404.html') and rel not in indexed: fail(f'search index has no entry for {rel}')

    # each page in Chromium: JavaScript errors, then the rendered main content
    n_pages = 0
    for url in sorted(u for u in pages if not u.endswith('/404.html')):
        n_pages += 1
        dom, log = chromium(exe, url, '--dump-dom')
        errs, other = js_errors(log)
        for e in errs: fail(f'{url}: JavaScript error: {e}')
        for o in other: print(f'  note {url}: console: {o}')
        p = parse(dom)
        text = re.sub(r'\s+', ' ', ''.join(p.main)).replace('¶', '').strip()
        if not dom.strip(): fail(f'{url}: Chromium returned no DOM')
        elif len(text) < a.min_text: fail(f'{url}: main content is empty ({len(text)} characters: {text[:80]!r})')
        else: print(f'  ok   {url[len(base):] or "index.html"}: {len(text)} characters of content', flush=True)

    # the landing page, as a reader sees it
    shot = Path(a.shot).resolve(); shot.parent.mkdir(parents=True, exist_ok=True); shot.unlink(missing_ok=True)
    _, log = chromium(exe, base + 'index.html', f'--screenshot={shot}', '--window-size=1280,900')
    if not shot.exists() or shot.stat().st_size < 1000: fail(f'no screenshot written to {shot}')
    else: print(f'  screenshot: {shot}')

    time.sleep(0.2)
    srv.close()
    for method, path, code, ref in srv.log:
        ref = ref or found_on.get(urllib.parse.urlsplit(path).path, '')
        if code >= 400: fail(f'{method} {path} -> {code}' + (f' (linked or loaded from {ref})' if ref else ''))
    n_req = len(srv.log)
    print(f'browser_check: {n_pages} pages in Chromium, {len(fetched)} URLs crawled, {n_req} requests, '
          f'{len(fails)} problems, {time.monotonic()-t0:.1f}s')
    if fails:
        print('browser_check: FAILED'); sys.exit(1)
    print('browser_check: OK')

if __name__ == '__main__': main()
