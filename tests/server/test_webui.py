"""The chat page of `lockstep serve` in a real browser (run by tests/cli_server_webui.sh, which
starts the main server with --draft ngram and sets LOCKSTEP_SERVER_URL; the --api-key and
--no-webui servers are started here).

Headless Debian chromium through Selenium and chromedriver (both paths given: Selenium never
looks anything up on the network). Every wait is bounded; answers use a fixed seed and
temperature 0, so they are the same on every run.
"""
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

URL = os.environ.get("LOCKSTEP_SERVER_URL", "")
CLI = os.environ.get("LOCKSTEP_CLI", "")
MODEL = os.environ.get("LOCKSTEP_MODEL", "")
CTX = int(os.environ.get("LOCKSTEP_SERVER_CTX", "2048"))
CHROMIUM = os.environ.get("LOCKSTEP_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("LOCKSTEP_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = os.environ.get("LOCKSTEP_ARTIFACT_DIR", os.getcwd())

pytestmark = pytest.mark.skipif(not URL, reason="LOCKSTEP_SERVER_URL not set (run tests/cli_server_webui.sh)")


# ---- helpers ---------------------------------------------------------------------------

def get(url, headers=None, method="GET", timeout=30):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def health(base=None):
    st, _, body = get((base or URL) + "/health")
    assert st == 200, body
    return json.loads(body)


def metric(name, base=None):
    st, _, body = get((base or URL) + "/metrics")
    assert st == 200
    m = re.search(r"^%s (\S+)$" % re.escape(name), body, re.M)
    assert m, name
    return float(m.group(1))


def wait_for(fn, timeout, what, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


class Server:
    """A `lockstep serve` child on a free loopback port (--port 0); always killed."""

    def __init__(self, *args):
        self.log = tempfile.NamedTemporaryFile(prefix="lockstep-serve-", suffix=".log", delete=False)
        cmd = [CLI, "serve", "--host", "127.0.0.1", "--port", "0", "-c", str(CTX), *args]
        if MODEL:
            cmd[2:2] = ["-m", MODEL]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        self.url = None
        deadline = time.time() + 120
        while time.time() < deadline and self.proc.poll() is None:
            with open(self.log.name) as f:
                m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", f.read())
            if m:
                self.url = m.group(1)
                try:
                    if get(self.url + "/health", timeout=5)[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError("server did not start: " + open(self.log.name).read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        log = open(self.log.name).read()
        os.unlink(self.log.name)
        assert rc == 0, "server exit status %d:\n%s" % (rc, log[-3000:])
        assert not re.search(r"ERROR: (Address|Leak|Thread)Sanitizer|runtime error:", log), log[-5000:]


def make_driver(width=1280, height=900):
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--disable-extensions", "--no-first-run", "--window-size=%d,%d" % (width, height)):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
    d.set_script_timeout(30)
    return d


@pytest.fixture(scope="module")
def driver():
    d = make_driver()
    yield d
    d.quit()


def open_page(d, base=None):
    d.get((base or URL) + "/")
    wait_for(lambda: d.execute_script("return document.readyState") == "complete", 20, "the page")
    # app.js ran (the model name comes from /health)
    wait_for(lambda: d.find_element(By.ID, "model").text.strip(), 20, "the model name")


def set_field(d, field_id, value):
    """Sets a settings field (the panel may be closed: set it through the DOM, as typing would)."""
    d.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('change'));", field_id, str(value))


def settings(d, max_tokens, seed=7, temperature=0, system=""):
    set_field(d, "max-tokens", max_tokens)
    set_field(d, "seed", seed)
    set_field(d, "temperature", temperature)
    set_field(d, "system", system)


def send(d, text):
    box = d.find_element(By.ID, "input")
    box.click()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


LAST = """const m = document.querySelectorAll('.msg.assistant'); const a = m[m.length - 1];
if (!a) return null;
const b = a.querySelector('.body'), s = a.querySelector('.stats'), e = a.querySelector('.error');
return [a.dataset.state, b ? b.textContent.length : 0, s ? s.textContent : '', e ? e.textContent : '',
        m.length];"""


def last_answer(d):
    return d.execute_script(LAST)


def n_answers(d):
    return d.execute_script("return document.querySelectorAll('.msg.assistant').length")


def watch_stream(d, n_before, until=None, timeout=120):
    """Polls the newest answer while it streams; returns the distinct text lengths seen while
    its state was "streaming" (until `until(lengths)` is true, or the stream ends)."""
    wait_for(lambda: n_answers(d) > n_before, 20, "the answer to appear")
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        state, n, _, _, _ = last_answer(d)
        if state != "streaming":
            return seen, state
        if n and (not seen or seen[-1] != n):
            seen.append(n)
        if until and until(seen):
            return seen, state
        time.sleep(0.03)
    raise AssertionError("answer still streaming after %d s" % timeout)


def footer_numbers(stats):
    m = re.search(r"(\d+) tokens · ([\d.]+) tok/s", stats)
    assert m, stats
    p = re.search(r"prompt (\d+) tokens \((\d+) from cache\)", stats)
    assert p, stats
    return int(m.group(1)), float(m.group(2)), int(p.group(1)), int(p.group(2))


def screenshot(d, name):
    path = os.path.join(ARTIFACTS, name)
    assert d.save_screenshot(path), path
    print("screenshot:", path)
    return path


# ---- the page as served ----------------------------------------------------------------

def test_page_is_self_contained():
    st, hdrs, html = get(URL + "/")
    assert st == 200
    h = {k.lower(): v for k, v in hdrs.items()}
    assert h["content-type"] == "text/html; charset=utf-8"
    csp = h["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert h.get("x-content-type-options") == "nosniff"
    texts = [html]
    for path in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert not re.match(r"^([a-z]+:)?//", path, re.I), path  # nothing from another origin
        if path.startswith("data:"):
            continue
        st, _, body = get(URL + "/" + path)
        assert st == 200, path
        texts.append(body)
    assert len(texts) == 3  # index.html, app.js, style.css
    for t in texts:
        assert "http://" not in t and "https://" not in t
    # /index.html is the same page; the API key is not needed for it (see test_api_key_prompt)
    assert get(URL + "/index.html")[2] == html


def test_final_chunk_has_the_footer_stats():
    """What the footer reads: the stream's final chunk carries `timings` (tok/s, cache_n, drafts
    proposed / checked / accepted) and, with include_usage, `usage` with the cached tokens."""
    body = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 16, "temperature": 0, "seed": 7,
            "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(URL + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        events = [ln[6:] for ln in r.read().decode().split("\n") if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    fin = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(fin) == 1, chunks
    t = fin[0]["timings"]
    assert t["predicted_n"] > 0 and t["predicted_per_second"] > 0 and t["cache_n"] >= 0
    assert 0 <= t["draft_n_accepted"] <= t["draft_n_checked"] <= t["draft_n"], t
    u = chunks[-1]["usage"]
    assert u["prompt_tokens"] == t["prompt_n"] + t["cache_n"]
    assert u["prompt_tokens_details"]["cached_tokens"] == t["cache_n"]


def test_browser_loads_only_this_server(driver):
    open_page(driver)
    origin = URL.rstrip("/")
    res = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert res, "no resources loaded"
    for r in res:
        assert r.startswith(origin + "/"), r
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors  # no CSP violation, no script error
    h = health()
    assert h["model"] in driver.find_element(By.ID, "model").text
    badge = driver.find_element(By.ID, "spec")
    assert badge.is_displayed() and "ngram" in badge.text


# ---- conversation ----------------------------------------------------------------------

def test_streamed_answer_and_footer(driver):
    open_page(driver)
    settings(driver, max_tokens=64)
    # HTML in the user's text stays text (and the model may echo it: its output is never HTML)
    send(driver, 'Write three short sentences about the sea. <img src=x id=pwn onerror="window.pwned=1">')
    seen, state = watch_stream(driver, 0)
    assert state == "done", last_answer(driver)
    # streamed: the text grew over several observations before the answer was done
    assert len(seen) >= 2 and seen == sorted(seen), seen
    _, n, stats, err, _ = last_answer(driver)
    assert n > 0 and not err
    n_tok, tps, prompt, cached = footer_numbers(stats)
    assert 0 < n_tok <= 64 and tps > 0 and 0 <= cached < prompt, stats
    # --draft ngram: acceptance and the exactness verdict from /health
    assert re.search(r"drafter ngram · (acceptance \d+% \(\d+/\d+ drafts\)|no drafts)", stats), stats
    assert health()["speculation"]["state"] == "passed"
    assert "byte-identical to plain decoding" in stats, stats
    assert not driver.find_elements(By.CSS_SELECTOR, "#log img, #pwn")
    assert driver.execute_script("return window.pwned === undefined")
    assert "<img src=x" in driver.find_elements(By.CSS_SELECTOR, ".msg.user .body")[-1].text

    # a follow-up in the same conversation: its prompt starts with the first turn, which the
    # slot's cache still holds (the footer shows the cached tokens). A slot turns idle only after
    # its response is sent, and only idle slots are matched by prefix: wait for it first.
    wait_for(lambda: health()["slots"]["processing"] == 0, 10, "the slot to be idle")
    send(driver, "Now one more sentence.")
    seen, state = watch_stream(driver, 1)
    assert state == "done", last_answer(driver)
    n_tok2, tps2, prompt2, cached2 = footer_numbers(last_answer(driver)[2])
    assert prompt2 > prompt and cached2 > cached, (prompt2, cached2, cached)


def test_stop_midway(driver):
    driver.find_element(By.ID, "new-chat").click()  # a fresh conversation: a known long answer
    assert n_answers(driver) == 0 and driver.find_element(By.ID, "empty").is_displayed()
    n0 = 0
    cancelled0 = metric("lockstep_requests_cancelled_total")
    settings(driver, max_tokens=1500)
    send(driver, "Count from 1 to 500, one number per line.")
    seen, state = watch_stream(driver, n0, until=lambda s: len(s) >= 3 and s[-1] > 40)
    assert state == "streaming", (seen, last_answer(driver))
    stop_btn = driver.find_element(By.ID, "stop")
    assert stop_btn.is_displayed() and not driver.find_element(By.ID, "send").is_displayed()
    stop_btn.click()
    wait_for(lambda: last_answer(driver)[0] == "stopped", 10, "the answer to stop")
    _, n_stop, stats, err, _ = last_answer(driver)
    assert "stopped" in stats and not err, stats
    assert n_stop >= seen[-1]
    # the text does not grow any more, and the server cancelled the request: its slot is idle
    # and the cancellation is counted (the request did not run to its 1500 tokens)
    time.sleep(1.0)
    assert last_answer(driver)[1] == n_stop
    wait_for(lambda: health()["slots"]["processing"] == 0, 10, "the slot to be idle")
    wait_for(lambda: metric("lockstep_requests_cancelled_total") > cancelled0, 10, "the cancellation")
    assert driver.find_element(By.ID, "send").is_displayed() and not driver.find_element(By.ID, "stop").is_displayed()

    # Esc stops too (keyboard)
    n1 = n_answers(driver)
    send(driver, "Count from 500 to 1000, one number per line.")
    watch_stream(driver, n1, until=lambda s: len(s) >= 2)
    driver.find_element(By.ID, "input").send_keys(Keys.ESCAPE)
    wait_for(lambda: last_answer(driver)[0] == "stopped", 10, "Esc to stop the answer")
    wait_for(lambda: health()["slots"]["processing"] == 0, 10, "the slot to be idle")


def test_markdown_is_rendered_safely(driver):
    md = ("# Title\n\nSome **bold**, *italic* and `code <b>x</b>`.\n\n"
          "- one\n- two <script>window.pwned2=1</script>\n  - nested\n\n"
          "1. first\n2. second\n\n"
          "```html\n<img src=x onerror=\"window.pwned3=1\">\n```\n\n"
          "> quoted <iframe src=\"x\"></iframe>\n\n"
          "[ok](https://example.invalid/) [bad](javascript:window.pwned4=1)\n\n"
          "| a | b |\n|---|---|\n| <u>1</u> | 2 |\n")
    r = driver.execute_script(
        "const d = document.createElement('div'); d.appendChild(window.lockstepMarkdown(arguments[0]));"
        "document.body.appendChild(d);"
        "const out = {tags: Array.from(d.querySelectorAll('*')).map(e => e.tagName.toLowerCase()),"
        "  text: d.textContent, links: Array.from(d.querySelectorAll('a')).map(a => a.getAttribute('href')),"
        "  attrs: Array.from(d.querySelectorAll('*')).flatMap(e => Array.from(e.attributes).map(a => a.name))};"
        "d.remove(); return out;", md)
    tags = set(r["tags"])
    assert {"h1", "strong", "em", "code", "ul", "ol", "li", "pre", "blockquote", "table", "td"} <= tags, tags
    assert not tags & {"script", "img", "iframe", "b", "u", "style"}, tags
    assert "<img src=x onerror=" in r["text"] and "<script>" in r["text"] and "<b>x</b>" in r["text"]
    assert r["links"] == ["https://example.invalid/"], r["links"]  # javascript: stays text
    assert not [a for a in r["attrs"] if a.startswith("on") or a == "style"], r["attrs"]
    assert driver.execute_script("return [window.pwned2, window.pwned3, window.pwned4]") == [None, None, None]


def test_screenshots(driver):
    """Artifacts: the conversation so far (two stopped answers, then a finished one with its
    footer) at desktop and phone width."""
    n0 = n_answers(driver)
    settings(driver, max_tokens=40)
    send(driver, "Thanks. Now say hello in **bold**.")
    _, state = watch_stream(driver, n0)
    assert state == "done", last_answer(driver)
    assert "tok/s" in last_answer(driver)[2]
    driver.set_window_size(1280, 900)
    driver.execute_script("document.getElementById('log').scrollTop = 1e9")
    time.sleep(0.3)
    screenshot(driver, "webui.png")
    # a phone's viewport (headless chromium windows are at least 500 px wide: emulate it)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    time.sleep(0.3)
    assert driver.execute_script("return window.innerWidth") == 390
    assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1"), \
        "the page scrolls sideways at phone width"
    for id_ in ("input", "send", "settings-toggle"):
        e = driver.find_element(By.ID, id_)
        assert e.is_displayed() and e.rect["x"] >= 0 and e.rect["x"] + e.rect["width"] <= 391, (id_, e.rect)
    driver.execute_script("document.getElementById('log').scrollTop = 1e9")
    time.sleep(0.3)
    screenshot(driver, "webui-phone.png")
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


# ---- --api-key and --no-webui ----------------------------------------------------------

def test_api_key_prompt():
    s = Server("--parallel", "1", "--api-key", "s3cret")
    d = make_driver()
    try:
        # the page itself needs no key; the API does, and the page asks for it at once
        assert get(s.url + "/")[0] == 200
        assert get(s.url + "/v1/models")[0] == 401
        open_page(d, s.url)
        dlg = d.find_element(By.ID, "key-dialog")
        wait_for(lambda: dlg.get_attribute("open") is not None, 10, "the API key dialog")
        assert "API key" in dlg.text
        d.find_element(By.ID, "key-input").send_keys("wrong" + Keys.ENTER)
        wait_for(lambda: "refused" in d.find_element(By.ID, "key-msg").text and dlg.get_attribute("open") is not None,
                 10, "the wrong key to be refused")
        d.find_element(By.ID, "key-input").send_keys("s3cret" + Keys.ENTER)
        wait_for(lambda: dlg.get_attribute("open") is None, 10, "the dialog to close")
        # the dialog's `close` event, whose handler stores the key, is queued as a task after the `open`
        # attribute goes: wait for the key rather than read it at once
        wait_for(lambda: d.execute_script("return sessionStorage.getItem('lockstep.apiKey')") == "s3cret", 10,
                 "the key to be kept for the session")
        assert d.execute_script("return localStorage.getItem('lockstep.apiKey')") is None
        settings(d, max_tokens=8)
        send(d, "Hello")
        _, state = watch_stream(d, 0, timeout=60)
        assert state == "done", last_answer(d)
        footer_numbers(last_answer(d)[2])
        screenshot(d, "webui-key.png")
    finally:
        d.quit()
        s.stop()


def test_no_webui():
    s = Server("--parallel", "1", "--no-webui")
    try:
        for p in ("/", "/index.html", "/webui/app.js", "/webui/style.css"):
            st, hdrs, body = get(s.url + p)
            assert st == 404, (p, st)
            assert json.loads(body)["error"]["code"] == "not_found"
        assert get(s.url + "/health")[0] == 200
        assert get(s.url + "/v1/models")[0] == 200
    finally:
        s.stop()
