// thrashscope live page: refreshes the status and the figures, and drives
// the run API (start, abort) with fetch. No framework, no external code.
'use strict';

(() => {
  const refreshMs = Number(document.body.dataset.refreshMs) || 2000;
  const tokenKey = 'thrashscope-api-token';
  const message = document.getElementById('run-message');
  const tokenInput = document.getElementById('token');
  let generation = document.getElementById('summary')?.dataset.generation;

  // The status fragment holds elements with the ids of the page's live
  // parts; each replaces its namesake. One refresh at a time: one asked
  // for meanwhile (after a start or an abort) follows at once.
  let timer = null;
  let inFlight = false;
  let again = false;
  async function refresh() {
    clearTimeout(timer);
    if (inFlight) {
      again = true;
      return;
    }
    inFlight = true;
    try {
      const resp = await fetch('/live/status', { cache: 'no-store' });
      if (!resp.ok) throw new Error(`status ${resp.status}`);
      const tpl = document.createElement('template');
      tpl.innerHTML = await resp.text();
      for (const part of tpl.content.children) {
        const old = part.id && document.getElementById(part.id);
        // An unchanged part stays, with its focus and a click in progress.
        if (old && !old.isEqualNode(part)) old.replaceWith(part.cloneNode(true));
      }
      document.body.classList.remove('stale');
      const gen = document.getElementById('summary')?.dataset.generation;
      if (gen && gen !== generation) {
        generation = gen;
        for (const img of document.querySelectorAll('img.figure')) {
          img.src = `${img.dataset.src}?v=${encodeURIComponent(gen)}`;
        }
      }
    } catch (e) {
      document.body.classList.add('stale');
    } finally {
      inFlight = false;
      if (again) {
        again = false;
        refresh();
      } else {
        timer = setTimeout(refresh, refreshMs);
      }
    }
  }

  function show(text, isError, code) {
    if (!message) return;
    message.replaceChildren();
    message.classList.toggle('error', isError);
    if (code) {
      const c = document.createElement('span');
      c.className = 'code';
      c.textContent = code;
      message.append(c);
    }
    message.append(document.createTextNode(text));
  }

  function headers(json) {
    const h = {};
    if (json) h['Content-Type'] = 'application/json';
    const tok = tokenInput ? tokenInput.value.trim() : '';
    if (tokenInput) sessionStorage.setItem(tokenKey, tok);
    if (tok) h.Authorization = `Bearer ${tok}`;
    return h;
  }

  // call sends a run API request and shows the API's own error message,
  // verbatim, when it refuses.
  async function call(method, path, body) {
    let resp;
    try {
      resp = await fetch(path, { method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      show(`the observer did not answer: ${e.message}`, true);
      return null;
    }
    const text = await resp.text();
    let data = null;
    try { data = JSON.parse(text); } catch (e) { /* not JSON: shown as text */ }
    if (!resp.ok) {
      show(data && typeof data.error === 'string' ? data.error : text, true, String(resp.status));
      return null;
    }
    return data;
  }

  async function loadPresets() {
    const select = document.getElementById('preset');
    if (!select) return;
    try {
      const resp = await fetch('/api/v1/presets');
      if (!resp.ok) return;
      const presets = await resp.json();
      const keep = select.value;
      select.replaceChildren();
      for (const p of presets) {
        const o = document.createElement('option');
        o.value = p.name;
        o.textContent = `${p.name}: ${p.description}`;
        o.selected = p.name === keep;
        select.append(o);
      }
    } catch (e) { /* the e4 default stays */ }
  }

  // spec builds the run spec from the form. A value that is not a number
  // goes as typed, so the API's 400 names the field.
  function spec(form) {
    const s = { preset: form.preset.value };
    const scale = form.scale.value.trim();
    if (scale !== '') s.scale = Number.isFinite(Number(scale)) ? Number(scale) : scale;
    const mib = form.memory_limit_mib.value.trim();
    if (mib !== '') s.memory_limit_bytes = Number.isFinite(Number(mib)) ? Math.round(Number(mib) * 1048576) : mib;
    return s;
  }

  const form = document.getElementById('run-form');
  if (form) {
    if (tokenInput) tokenInput.value = sessionStorage.getItem(tokenKey) || '';
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const button = document.getElementById('start');
      button.disabled = true;
      show('starting…', false);
      const rec = await call('POST', '/api/v1/runs', spec(form));
      button.disabled = false;
      if (rec) show(`run ${rec.id} started: ${rec.state}`, false);
      refresh();
    });
  }

  document.addEventListener('click', async (ev) => {
    const button = ev.target.closest('button#abort');
    if (!button) return;
    const id = button.dataset.run;
    button.disabled = true;
    show(`aborting run ${id}…`, false);
    const rec = await call('DELETE', `/api/v1/runs/${encodeURIComponent(id)}`);
    if (rec) show(`run ${rec.id} ${rec.state}`, false);
    refresh();
  });

  loadPresets();
  timer = setTimeout(refresh, refreshMs);
})();
