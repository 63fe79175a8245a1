// lockstep serve's chat page: streams /v1/chat/completions (SSE) and shows each answer's
// stats (the final chunk's `timings` and `usage`) and, with a drafter, the exactness verdict
// from /health. Model output is never parsed as HTML: the Markdown renderer below builds DOM
// nodes and sets only text (textContent / text nodes) and a few checked attributes.
'use strict';

(function () {
  // ---- DOM helpers -----------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // ---- Markdown (safe subset) -------------------------------------------------------------
  // Blocks: fenced code (``` or ~~~, unterminated while streaming), ATX headings, lists
  // (nested by indentation), block quotes, tables, rules, paragraphs (a single newline is a
  // line break). Inline: code spans, **bold**, __bold__, *italic*, _italic_, ~~strike~~,
  // [text](link) (http, https and mailto only; other links stay text).

  const FENCE_RE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
  const HEADING_RE = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE_RE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const LIST_RE = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const QUOTE_RE = /^ {0,3}> ?(.*)$/;
  const TABLE_ROW_RE = /^\s*\|.*\|\s*$/;
  const TABLE_SEP_RE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;
  const SAFE_LINK_RE = /^(https?:|mailto:)/i;

  function inline(parent, text) {
    const re = new RegExp(
      [
        '(`+)([\\s\\S]*?[^`])\\1(?!`)', // 1,2 code span
        '\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*', // 3 bold
        '(?<![\\w])__(?=\\S)([\\s\\S]*?\\S)__(?![\\w])', // 4 bold
        '~~(?=\\S)([\\s\\S]*?\\S)~~', // 5 strike
        '\\*(?=[^\\s*])([\\s\\S]*?[^\\s*])\\*(?!\\*)', // 6 italic
        '(?<![\\w])_(?=[^\\s_])([\\s\\S]*?[^\\s_])_(?![\\w])', // 7 italic
        '\\[([^\\]\\n]+)\\]\\(([^()\\s]+)\\)', // 8,9 link
        '\\n', // line break
      ].join('|'),
      'g'
    );
    let last = 0;
    let m;
    while ((m = re.exec(text)) !== null) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      if (m[1] !== undefined) {
        let code = m[2];
        if (code.length > 2 && code[0] === ' ' && code[code.length - 1] === ' ') code = code.slice(1, -1);
        parent.appendChild(el('code', null, code));
      } else if (m[3] !== undefined || m[4] !== undefined) {
        const b = el('strong');
        inline(b, m[3] !== undefined ? m[3] : m[4]);
        parent.appendChild(b);
      } else if (m[5] !== undefined) {
        const s = el('del');
        inline(s, m[5]);
        parent.appendChild(s);
      } else if (m[6] !== undefined || m[7] !== undefined) {
        const i = el('em');
        inline(i, m[6] !== undefined ? m[6] : m[7]);
        parent.appendChild(i);
      } else if (m[8] !== undefined) {
        if (SAFE_LINK_RE.test(m[9])) {
          const a = el('a');
          a.href = m[9];
          a.rel = 'noopener noreferrer nofollow';
          a.target = '_blank';
          inline(a, m[8]);
          parent.appendChild(a);
        } else {
          parent.appendChild(document.createTextNode(m[0]));
        }
      } else {
        parent.appendChild(el('br'));
      }
      last = re.lastIndex;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  function codeBlock(code, lang) {
    const wrap = el('div', 'code');
    const bar = el('div', 'code-bar');
    bar.appendChild(el('span', 'lang', lang || 'code'));
    const copy = el('button', null, 'Copy');
    copy.type = 'button';
    copy.addEventListener('click', () => {
      const done = () => {
        copy.textContent = 'Copied';
        setTimeout(() => (copy.textContent = 'Copy'), 1200);
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(code).then(done, () => {});
      } else {
        const sel = window.getSelection();
        const range = document.createRange();
        range.selectNodeContents(pre);
        sel.removeAllRanges();
        sel.addRange(range);
      }
    });
    bar.appendChild(copy);
    const pre = el('pre');
    const c = el('code', null, code);
    if (lang && /^[\w+#.-]{1,32}$/.test(lang)) c.className = 'language-' + lang;
    pre.appendChild(c);
    wrap.appendChild(bar);
    wrap.appendChild(pre);
    return wrap;
  }

  function splitRow(line) {
    let s = line.trim();
    if (s.startsWith('|')) s = s.slice(1);
    if (s.endsWith('|')) s = s.slice(0, -1);
    return s.split('|').map((c) => c.trim());
  }

  function renderMarkdown(src) {
    const frag = document.createDocumentFragment();
    const lines = String(src).replace(/\r\n?/g, '\n').split('\n');
    let para = [];
    const flush = () => {
      if (!para.length) return;
      const p = el('p');
      inline(p, para.join('\n'));
      frag.appendChild(p);
      para = [];
    };
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if ((m = FENCE_RE.exec(line))) {
        flush();
        const fence = m[1];
        const code = [];
        for (i++; i < lines.length; i++) {
          const t = lines[i].trim();
          if (t.startsWith(fence) && /^[`~]+$/.test(t)) break;
          code.push(lines[i]);
        }
        i++;
        frag.appendChild(codeBlock(code.join('\n'), m[2]));
        continue;
      }
      if (/^\s*$/.test(line)) {
        flush();
        i++;
        continue;
      }
      if ((m = HEADING_RE.exec(line))) {
        flush();
        const h = el('h' + m[1].length);
        inline(h, m[2]);
        frag.appendChild(h);
        i++;
        continue;
      }
      if (RULE_RE.test(line)) {
        flush();
        frag.appendChild(el('hr'));
        i++;
        continue;
      }
      if (QUOTE_RE.test(line)) {
        flush();
        const inner = [];
        while (i < lines.length && (m = QUOTE_RE.exec(lines[i]))) {
          inner.push(m[1]);
          i++;
        }
        const q = el('blockquote');
        q.appendChild(renderMarkdown(inner.join('\n')));
        frag.appendChild(q);
        continue;
      }
      if (TABLE_ROW_RE.test(line) && i + 1 < lines.length && TABLE_SEP_RE.test(lines[i + 1])) {
        flush();
        const table = el('table');
        const head = el('thead');
        const tr = el('tr');
        for (const cell of splitRow(line)) {
          const th = el('th');
          inline(th, cell);
          tr.appendChild(th);
        }
        head.appendChild(tr);
        table.appendChild(head);
        const body = el('tbody');
        for (i += 2; i < lines.length && TABLE_ROW_RE.test(lines[i]); i++) {
          const row = el('tr');
          for (const cell of splitRow(lines[i])) {
            const td = el('td');
            inline(td, cell);
            row.appendChild(td);
          }
          body.appendChild(row);
        }
        table.appendChild(body);
        frag.appendChild(table);
        continue;
      }
      if (LIST_RE.test(line)) {
        flush();
        const stack = []; // {indent, ordered, list, li}
        while (i < lines.length) {
          const mm = LIST_RE.exec(lines[i]);
          if (mm && !RULE_RE.test(lines[i])) {
            const indent = mm[1].replace(/\t/g, '    ').length;
            const ordered = /\d/.test(mm[2]);
            while (stack.length && indent < stack[stack.length - 1].indent) stack.pop();
            let top = stack[stack.length - 1];
            if (!top || indent > top.indent + 1) {
              const list = el(ordered ? 'ol' : 'ul');
              if (ordered && parseInt(mm[2], 10) !== 1) list.start = parseInt(mm[2], 10);
              (top ? top.li : frag).appendChild(list);
              top = { indent, ordered, list, li: null };
              stack.push(top);
            } else if (top.ordered !== ordered) {
              const list = el(ordered ? 'ol' : 'ul');
              (stack.length > 1 ? stack[stack.length - 2].li : frag).appendChild(list);
              top.list = list;
              top.ordered = ordered;
            }
            const li = el('li');
            inline(li, mm[3]);
            top.list.appendChild(li);
            top.li = li;
            i++;
          } else if (stack.length && /^\s+\S/.test(lines[i]) && !FENCE_RE.test(lines[i])) {
            const li = stack[stack.length - 1].li;
            li.appendChild(el('br'));
            inline(li, lines[i].trim());
            i++;
          } else {
            break;
          }
        }
        continue;
      }
      para.push(line);
      i++;
    }
    flush();
    return frag;
  }
  // For tests and the curious: window.lockstepMarkdown('**x**') returns a DOM fragment.
  window.lockstepMarkdown = renderMarkdown;

  // ---- settings (kept in localStorage; the API key in sessionStorage) ---------------------

  const SETTINGS = ['system', 'temperature', 'max-tokens', 'seed'];

  function loadSettings() {
    for (const id of SETTINGS) {
      try {
        const v = localStorage.getItem('lockstep.' + id);
        if (v !== null) $(id).value = v;
      } catch (e) {
        /* storage may be off */
      }
      $(id).addEventListener('change', () => {
        try {
          localStorage.setItem('lockstep.' + id, $(id).value);
        } catch (e) {
          /* ignore */
        }
      });
    }
  }

  function numberSetting(id, min, max, integer) {
    const raw = $(id).value.trim();
    if (raw === '') return undefined;
    let v = Number(raw);
    if (!Number.isFinite(v)) return undefined;
    if (integer) v = Math.round(v);
    return Math.min(max, Math.max(min, v));
  }

  function getKey() {
    try {
      return sessionStorage.getItem('lockstep.apiKey') || '';
    } catch (e) {
      return '';
    }
  }

  function setKey(k) {
    try {
      if (k) sessionStorage.setItem('lockstep.apiKey', k);
      else sessionStorage.removeItem('lockstep.apiKey');
    } catch (e) {
      /* ignore */
    }
  }

  function authHeaders() {
    const h = { 'Content-Type': 'application/json' };
    const k = getKey();
    if (k) h.Authorization = 'Bearer ' + k;
    return h;
  }

  // Opens the key dialog; resolves with the key entered, or '' when dismissed.
  let keyPromise = null;
  function askKey(message) {
    if (keyPromise) return keyPromise;
    const dlg = $('key-dialog');
    $('key-msg').textContent = message;
    $('key-input').value = '';
    keyPromise = new Promise((resolve) => {
      const onClose = () => {
        dlg.removeEventListener('close', onClose);
        keyPromise = null;
        const k = dlg.returnValue === 'ok' ? $('key-input').value.trim() : '';
        if (k) setKey(k);
        resolve(k);
        $('input').focus();
      };
      dlg.addEventListener('close', onClose);
    });
    dlg.returnValue = '';
    dlg.showModal();
    $('key-input').focus();
    return keyPromise;
  }

  // GET /v1/models needs the key when the server has one: ask for it at once.
  async function checkKey() {
    let message = 'This server needs an API key (lockstep serve --api-key).';
    for (;;) {
      let res;
      try {
        res = await fetch('v1/models', { headers: authHeaders() });
      } catch (e) {
        return;
      }
      if (res.status !== 401) return;
      if (getKey()) message = 'That key was refused. Enter the server\u2019s API key.';
      setKey('');
      if (!(await askKey(message))) return;
    }
  }

  // ---- /health: model name, drafter and the exactness probe's verdict ----------------------

  let health = null;
  let healthTimer = null;

  async function refreshHealth() {
    let status = 'server not reachable';
    try {
      const res = await fetch('health', { cache: 'no-store' });
      const h = await res.json();
      if (res.ok && h && h.status === 'ok') health = h;
      else if (h && h.status) status = h.status; // "loading model", "shutting down"
    } catch (e) {
      /* keep the last one */
    }
    if (!health && !healthTimer) {
      healthTimer = setTimeout(() => {
        healthTimer = null;
        refreshHealth();
      }, 2000); // until the model is loaded
    }
    const model = $('model');
    model.textContent = health ? health.model + ' \u00b7 ' + health.backend : status;
    const badge = $('spec');
    const sp = health && health.speculation;
    if (sp && sp.drafter && sp.drafter !== 'none') {
      const v = verdict(sp);
      badge.textContent = 'drafter ' + sp.drafter + ' \u00b7 ' + v.short;
      badge.title = sp.detail || '';
      badge.className = 'badge ' + v.cls;
      badge.hidden = false;
    } else {
      badge.hidden = true;
    }
    return health;
  }

  // What /health's speculation state says about the bytes of an answer.
  function verdict(sp) {
    switch (sp.state) {
      case 'passed':
        return { cls: 'ok', short: 'exact', text: 'byte-identical to plain decoding \u2713 (' + (sp.detail || 'exactness probe passed') + ')' };
      case 'declined':
        return { cls: 'warn', short: 'declined', text: 'speculation declined: plain decoding served (' + (sp.detail || 'probe failed') + ')' };
      case 'inexact':
        return { cls: 'warn', short: 'INEXACT', text: '\u26a0 not guaranteed byte-identical to plain decoding (' + (sp.detail || '--allow-inexact') + ')' };
      default:
        return { cls: '', short: sp.state, text: 'exactness: ' + sp.state + (sp.detail ? ' (' + sp.detail + ')' : '') };
    }
  }

  // ---- conversation ------------------------------------------------------------------------

  const log = $('log');
  const input = $('input');
  let history = []; // {role, content}
  let busy = null; // {ctrl, stopped}

  function nearBottom() {
    return log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  }

  function scrollDown(force) {
    if (force || nearBottom()) log.scrollTop = log.scrollHeight;
  }

  function addMessage(role, text) {
    $('empty').hidden = true;
    const m = el('div', 'msg ' + role);
    m.appendChild(el('div', 'who', role === 'user' ? 'You' : 'Assistant'));
    const body = el('div', role === 'user' ? 'body' : 'body md');
    if (role === 'user') body.textContent = text;
    m.appendChild(body);
    log.appendChild(m);
    scrollDown(true);
    return m;
  }

  function setBusy(b) {
    busy = b;
    $('send').hidden = !!b;
    $('stop').hidden = !b;
    if (!b) input.focus();
  }

  function fmt(x, digits) {
    return typeof x === 'number' && Number.isFinite(x) ? x.toFixed(digits) : '?';
  }

  // The footer of a finished answer (final chunk: timings + usage; /health: verdict).
  function footer(msg, info) {
    const stats = el('div', 'stats');
    const add = (text, cls) => stats.appendChild(el('span', cls || null, text));
    const t = info.timings;
    const u = info.usage;
    if (info.stopped) add('stopped \u00b7 request cancelled', 'warn');
    if (t) {
      add(t.predicted_n + ' tokens \u00b7 ' + fmt(t.predicted_per_second, 1) + ' tok/s');
      const prompt = u ? u.prompt_tokens : t.prompt_n + t.cache_n;
      const cached = u && u.prompt_tokens_details ? u.prompt_tokens_details.cached_tokens : t.cache_n;
      add('prompt ' + prompt + ' tokens (' + cached + ' from cache) \u00b7 ' + fmt(t.prompt_per_second, 0) + ' tok/s');
    } else if (info.stopped) {
      add('~' + info.chunks + ' chunks in ' + fmt(info.elapsed / 1000, 1) + ' s');
    }
    if (info.finish) add('finish: ' + info.finish);
    if (!info.stopped) add(fmt(info.elapsed / 1000, 1) + ' s');
    const sp = info.health && info.health.speculation;
    if (sp && sp.drafter && sp.drafter !== 'none') {
      if (t) {
        const checked = typeof t.draft_n_checked === 'number' ? t.draft_n_checked : t.draft_n;
        if (checked > 0)
          add('drafter ' + sp.drafter + ' \u00b7 acceptance ' + fmt((100 * t.draft_n_accepted) / checked, 0) + '% (' + t.draft_n_accepted + '/' + checked + ' drafts)');
        else add('drafter ' + sp.drafter + ' \u00b7 no drafts');
      }
      const v = verdict(sp);
      add(v.text, v.cls);
    }
    msg.appendChild(stats);
  }

  async function errorText(res) {
    let text = 'HTTP ' + res.status;
    try {
      const j = await res.json();
      if (j && j.error && j.error.message) text += ': ' + j.error.message;
    } catch (e) {
      /* not JSON */
    }
    return text;
  }

  function buildRequest(hist) {
    const messages = [];
    const sys = $('system').value.trim();
    if (sys) messages.push({ role: 'system', content: sys });
    for (const m of hist) messages.push(m);
    const req = { messages, stream: true, stream_options: { include_usage: true } };
    const temp = numberSetting('temperature', 0, 2, false);
    const max = numberSetting('max-tokens', 1, 1 << 24, true);
    const seed = numberSetting('seed', 0, Number.MAX_SAFE_INTEGER, true);
    if (temp !== undefined) req.temperature = temp;
    if (max !== undefined) req.max_tokens = max;
    if (seed !== undefined) req.seed = seed;
    return req;
  }

  async function send(text) {
    if (busy || !text.trim()) return;
    const hist = history; // New chat during this answer starts another one
    hist.push({ role: 'user', content: text });
    addMessage('user', text);
    const msg = addMessage('assistant');
    const body = msg.querySelector('.body');
    msg.dataset.state = 'streaming';
    const state = { ctrl: new AbortController(), stopped: false };
    setBusy(state);
    const start = performance.now();
    const info = { chunks: 0, timings: null, usage: null, finish: null, stopped: false, elapsed: 0, health: null };
    let content = '';
    let pending = false;
    const render = () => {
      pending = false;
      const stick = nearBottom();
      body.replaceChildren(renderMarkdown(content));
      if (stick) scrollDown(true);
    };
    const schedule = () => {
      if (!pending) {
        pending = true;
        requestAnimationFrame(render);
      }
    };
    let error = null;
    try {
      let res;
      for (let attempt = 0; ; attempt++) {
        res = await fetch('v1/chat/completions', {
          method: 'POST',
          headers: authHeaders(),
          body: JSON.stringify(buildRequest(hist)),
          signal: state.ctrl.signal,
        });
        if (res.status !== 401 || attempt >= 3) break;
        const had = getKey();
        setKey('');
        const k = await askKey(had ? 'That key was refused. Enter the server\u2019s API key.' : 'This server needs an API key (lockstep serve --api-key).');
        if (!k) break;
      }
      if (!res.ok) throw new Error(await errorText(res));
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      let done = false;
      while (!done) {
        const r = await reader.read();
        if (r.done) break;
        buf += dec.decode(r.value, { stream: true });
        let k;
        while (!done && (k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          for (const line of ev.split('\n')) {
            if (!line.startsWith('data:')) continue;
            const data = line.slice(5).trim();
            if (data === '[DONE]') {
              done = true;
              break;
            }
            let o;
            try {
              o = JSON.parse(data);
            } catch (e) {
              continue;
            }
            if (o.error) throw new Error(o.error.message || 'server error');
            const ch = o.choices && o.choices[0];
            if (ch && ch.delta && typeof ch.delta.content === 'string' && ch.delta.content) {
              content += ch.delta.content;
              info.chunks++;
              schedule();
            }
            if (ch && ch.finish_reason) info.finish = ch.finish_reason;
            if (o.timings) info.timings = o.timings;
            if (o.usage) info.usage = o.usage;
          }
        }
      }
    } catch (e) {
      if (state.stopped || (e && e.name === 'AbortError')) info.stopped = true;
      else error = e && e.message ? e.message : String(e);
    }
    info.elapsed = performance.now() - start;
    render();
    if (content) hist.push({ role: 'assistant', content });
    else if (hist[hist.length - 1] && hist[hist.length - 1].role === 'user') hist.pop(); // no answer: not sent again
    if (error) {
      msg.appendChild(el('div', 'error', error));
      if (!content) body.remove();
    }
    if (!error) {
      info.health = await refreshHealth();
      footer(msg, info);
    }
    // The final state is set last, once the footer is in place: whoever watches data-state
    // (the tests, a user script) then reads a finished answer, never one still awaiting /health.
    msg.dataset.state = info.stopped ? 'stopped' : error ? 'error' : 'done';
    scrollDown(false);
    setBusy(null);
  }

  function stop() {
    if (!busy) return;
    busy.stopped = true;
    busy.ctrl.abort();
  }

  function newChat() {
    stop();
    history = [];
    for (const m of Array.from(log.querySelectorAll('.msg'))) m.remove();
    $('empty').hidden = false;
    input.focus();
  }

  function autosize() {
    input.style.height = 'auto';
    input.style.height = Math.min(input.scrollHeight + 2, 200) + 'px';
  }

  // ---- wiring --------------------------------------------------------------------------------

  loadSettings();
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = input.value;
    if (busy || !text.trim()) return;
    input.value = '';
    autosize();
    send(text);
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  input.addEventListener('input', autosize);
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', newChat);
  $('settings-toggle').addEventListener('click', () => {
    const s = $('settings');
    s.hidden = !s.hidden;
    $('settings-toggle').setAttribute('aria-expanded', String(!s.hidden));
    if (!s.hidden) $('system').focus();
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && busy && !$('key-dialog').open) {
      e.preventDefault();
      stop();
    } else if (e.altKey && (e.key === 's' || e.key === 'S')) {
      e.preventDefault();
      $('settings-toggle').click();
    } else if (e.altKey && (e.key === 'n' || e.key === 'N')) {
      e.preventDefault();
      newChat();
    }
  });
  refreshHealth();
  checkKey();
  input.focus();
})();
