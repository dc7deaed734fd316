// The tracker's dashboard: loads /api/state once, then follows /api/stream (server-sent
// `state` events, one whole state document each) and renders the summary, the tuning
// sessions with their best-so-far curves (SVG drawn here), their final (re-measured)
// results, outcomes and stall warnings, the devices by key, the queues and the recent
// events. The documents are described in docs/dashboard.md.
//
// Every text from the documents goes through esc() before it reaches innerHTML. Each
// section is rebuilt with one innerHTML assignment, and only when its markup changed;
// the per-key device groups and the session cards are kept (keyed by key and session
// id) so that what a person opened, collapsed or toggled survives updates.
'use strict';

(function () {
  const ROWS_PER_KEY = 100;    // device rows shown per key until "show all"
  const JOBS_PER_SESSION = 6;  // job charts shown per session until "show all"
  const STALE_MS = 10000;      // no update for this long: say so

  const view = {
    state: null,
    receivedAt: 0,
    filter: '',
    expandedKeys: new Set(),      // keys whose every device row is shown
    collapsedKeys: new Set(),     // keys folded away
    expandedSessions: new Set(),  // sessions whose every job is shown
    openSessions: new Set(),      // ended sessions unfolded
    xAxis: new Map(),             // session id -> 'trials' | 'time'
    keyNodes: new Map(),          // key -> {root, head, body, more, html}
    sessionNodes: new Map(),      // session id -> {root, html}
    sectionHtml: new Map(),       // element id -> last markup
  };

  // ---- text -----------------------------------------------------------------------

  const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  function esc(value) {
    return String(value === undefined || value === null ? '' : value).replace(/[&<>"']/g, (c) => ESCAPES[c]);
  }

  function num(value) {
    return typeof value === 'number' && isFinite(value) ? value : 0;
  }

  function fixed(value, digits) {
    const v = num(value);
    if (v >= 1000) return Math.round(v).toLocaleString('en');
    return v.toFixed(v >= 100 ? 0 : digits);
  }

  function gflops(value) {
    return num(value) > 0 ? fixed(value, 1) : '–';
  }

  function duration(ms) {
    const s = num(ms) / 1000;
    if (s < 10) return s.toFixed(1) + ' s';
    if (s < 60) return Math.round(s) + ' s';
    const m = s / 60;
    if (m < 60) return Math.floor(m) + ' min ' + (Math.round(s) % 60) + ' s';
    const h = m / 60;
    if (h < 48) return Math.floor(h) + ' h ' + (Math.floor(m) % 60) + ' min';
    return Math.floor(h / 24) + ' d ' + (Math.floor(h) % 24) + ' h';
  }

  function ago(ms) {
    return duration(ms) + ' ago';
  }

  function bytes(n) {
    const v = num(n);
    if (v <= 0) return '';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    let x = v;
    while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
    return (x >= 10 || i === 0 ? Math.round(x) : x.toFixed(1)) + ' ' + units[i];
  }

  function words(status) {
    return String(status).replace(/_/g, ' ');
  }

  // "×1.25" and, when known, its 95% interval "1.20–1.31".
  function ratio(value) {
    return '×' + num(value).toFixed(2);
  }
  function interval(low, high) {
    return num(low) > 0 && num(high) > 0 ? num(low).toFixed(2) + '–' + num(high).toFixed(2) : '';
  }

  // A finished job's or an ended session's outcome: done, interrupted or failed.
  function outcomeBadge(outcome, message) {
    if (!outcome) return '';
    return '<span class="outcome-badge ' + esc(outcome) + '" data-outcome="' + esc(outcome) + '"' +
      (message ? ' title="' + esc(message) + '"' : '') + '>' + esc(outcome) + '</span>';
  }

  // ---- DOM helpers ----------------------------------------------------------------

  function $(id) {
    return document.getElementById(id);
  }

  // Sets an element's markup when it changed; true when it did.
  function setHtml(element, html) {
    if (view.sectionHtml.get(element.id) === html) return false;
    view.sectionHtml.set(element.id, html);
    element.innerHTML = html;
    return true;
  }

  function setText(id, text) {
    const element = $(id);
    if (element.textContent !== text) element.textContent = text;
  }

  function showEmpty(id, empty) {
    $(id).hidden = !empty;
  }

  // ---- summary --------------------------------------------------------------------

  function renderSummary(state) {
    const t = state.tracker || {};
    const keys = (state.pool && state.pool.keys) || [];
    let free = 0;
    let busy = 0;
    for (const k of keys) { free += num(k.free); busy += num(k.busy); }
    const sessions = state.sessions || [];
    const running = sessions.filter((s) => s.state === 'running').length;
    const stalled = sessions.filter((s) => s.stalled).length;

    setText('sum-uptime', duration(t.uptime_ms));
    setText('sum-devices', String(num(t.devices)));
    setText('sum-devices-detail', free + ' free · ' + busy + ' busy · ' + keys.length + (keys.length === 1 ? ' key' : ' keys'));
    setText('sum-leases', String(num(t.leases)));
    setText('sum-queued', String(num(t.queued)));
    setText('sum-rate', fixed(t.trials_per_second, 1));
    setText('sum-sessions', String(running));
    setText('sum-sessions-detail', 'running · ' + (sessions.length - running) + ' ended' +
      (stalled > 0 ? ' · ' + stalled + ' stalled' : ''));
    $('sum-sessions').parentElement.classList.toggle('attention', stalled > 0);
    setText('sum-grants', String(num(t.grants)));
    setText('sum-clients', String(num(t.clients)));
    $('sum-queued').parentElement.classList.toggle('attention', num(t.queued) > 0);

    setText('tracker-address', (t.address || '') + (t.version ? '  ·  v' + t.version : ''));
    setText('footer-facts', num(t.connections) + ' connections · snapshot built in ' + fixed(t.snapshot_ms, 2) + ' ms');
    const badges = [
      t.tls ? '<span class="badge ok" data-badge="tls">TLS</span>' : '<span class="badge plain" data-badge="tls">no TLS</span>',
      t.auth ? '<span class="badge ok" data-badge="auth">token</span>' : '<span class="badge plain" data-badge="auth">no token</span>',
    ];
    setHtml($('tracker-badges'), badges.join(''));
    document.title = 'Kestrel tracker · ' + num(t.devices) + ' devices · ' + running + ' sessions';
  }

  // ---- devices --------------------------------------------------------------------

  function capsText(caps) {
    const parts = [];
    if (caps.arch) parts.push(caps.arch);
    if (caps.cores) parts.push(caps.cores + (caps.cores === 1 ? ' core' : ' cores'));
    const memory = bytes(caps.memory_bytes);
    if (memory) parts.push(memory);
    return parts.join(' · ');
  }

  // A device's cells but its heartbeat age, which changes with every update and is set
  // as text (updateRow), so that a row is parsed again only when something else changed.
  function deviceCells(d) {
    const caps = d.caps || {};
    const busy = d.state === 'busy';
    const features = (caps.features || []).map((f) => '<span class="chip">' + esc(f) + '</span>').join('');
    const gpus = (caps.gpus || []).map((g) =>
      '<span class="chip gpu" title="' + esc(g.backend) + '">' + esc(g.backend) + ' ' + esc(g.name) +
      (g.version ? ' (' + esc(g.version) + ')' : '') + '</span>').join('');
    return '<td class="name"><span class="dot ' + (busy ? 'busy' : 'free') + '"></span>' + esc(d.name) +
        '<div class="sub">' + esc(d.address) + '</div></td>' +
      '<td><span class="state ' + (busy ? 'busy' : 'free') + '">' + esc(d.state) + '</span></td>' +
      '<td class="holder">' + (busy ? esc(d.holder || 'lease ' + num(d.lease_id)) +
        (d.lease_id !== null && d.lease_id !== undefined ? '<div class="sub">lease ' + esc(num(d.lease_id)) + '</div>' : '')
        : '<span class="muted">–</span>') + '</td>' +
      '<td class="num heartbeat"></td>' +
      '<td class="caps"><div title="' + esc(caps.triple) + '">' + esc(capsText(caps)) + '</div>' +
        (caps.cpu ? '<div class="sub">' + esc(caps.cpu) + '</div>' : '') +
        (features || gpus ? '<div class="chips">' + gpus + features + '</div>' : '') + '</td>';
  }

  // The row of device d in a key's table, made or updated in place.
  function updateRow(rows, d) {
    const id = num(d.id);
    let row = rows.get(id);
    if (!row) {
      const tr = document.createElement('tr');
      row = { tr, html: '', heartbeat: null, age: '' };
      rows.set(id, row);
    }
    const html = deviceCells(d);
    if (row.html !== html) {
      row.html = html;
      row.tr.innerHTML = html;
      row.heartbeat = row.tr.querySelector('.heartbeat');
      row.age = '';
      row.tr.dataset.deviceName = String(d.name);
      row.tr.dataset.deviceId = String(id);
      row.tr.dataset.state = String(d.state);
      row.tr.title = 'connected ' + duration(d.connected_ms) + ' ago';
    }
    const ms = num(d.heartbeat_age_ms);
    const age = duration(ms);
    if (row.age !== age) {
      row.age = age;
      row.heartbeat.textContent = age;
      row.heartbeat.classList.toggle('late', ms > 10000);
    }
    return row;
  }

  function matches(d, filter) {
    if (!filter) return true;
    const caps = d.caps || {};
    const hay = [d.name, d.key, d.address, d.state, d.holder, caps.arch, caps.cpu, caps.triple,
      (caps.features || []).join(' '), (caps.gpus || []).map((g) => g.backend + ' ' + g.name).join(' ')].join(' ').toLowerCase();
    return hay.indexOf(filter) >= 0;
  }

  function keyNode(key) {
    let node = view.keyNodes.get(key);
    if (node) return node;
    const root = document.createElement('section');
    root.className = 'key-group';
    root.dataset.key = key;
    root.innerHTML =
      '<button type="button" class="key-head" data-action="fold-key" aria-expanded="true"></button>' +
      '<div class="table-wrap"><table class="devices"><thead><tr><th>device</th><th>state</th><th>lease holder</th>' +
      '<th class="num">heartbeat</th><th>capabilities</th></tr></thead><tbody></tbody></table></div>' +
      '<button type="button" class="more" data-action="expand-key" hidden></button>';
    node = { root, head: root.querySelector('.key-head'), body: root.querySelector('tbody'),
      wrap: root.querySelector('.table-wrap'), more: root.querySelector('.more'), rows: new Map(), headHtml: '' };
    view.keyNodes.set(key, node);
    return node;
  }

  function renderDevices(state) {
    const pool = state.pool || {};
    const keys = pool.keys || [];
    const byKey = new Map();
    for (const k of keys) byKey.set(k.key, []);
    for (const d of pool.devices || []) {
      if (!byKey.has(d.key)) byKey.set(d.key, []);
      byKey.get(d.key).push(d);
    }
    const summary = new Map(keys.map((k) => [k.key, k]));
    const list = $('key-list');
    const filter = view.filter;
    const seen = new Set();
    let previous = null;
    for (const [key, devices] of byKey) {
      const shown = devices.filter((d) => matches(d, filter));
      if (filter && shown.length === 0) continue;
      seen.add(key);
      const node = keyNode(key);
      const k = summary.get(key) || { free: 0, busy: 0, queued: 0 };
      const folded = view.collapsedKeys.has(key);
      const headHtml = '<span class="chevron">' + (folded ? '▸' : '▾') + '</span>' +
        '<span class="key-name">' + esc(key) + '</span>' +
        '<span class="counts"><span class="free">' + esc(num(k.free)) + ' free</span>' +
        '<span class="busy">' + esc(num(k.busy)) + ' busy</span>' +
        (num(k.queued) > 0 ? '<span class="queued">' + esc(num(k.queued)) + ' queued</span>' : '') +
        (filter ? '<span class="muted">' + shown.length + ' of ' + devices.length + ' shown</span>' : '') + '</span>';
      if (node.headHtml !== headHtml) {
        node.headHtml = headHtml;
        node.head.innerHTML = headHtml;
        node.head.setAttribute('aria-expanded', folded ? 'false' : 'true');
      }
      node.wrap.hidden = folded;
      const limit = view.expandedKeys.has(key) ? shown.length : ROWS_PER_KEY;
      const visible = folded ? [] : shown.slice(0, limit);
      const kept = new Set();
      let before = null;
      for (const d of visible) {
        const row = updateRow(node.rows, d);
        kept.add(num(d.id));
        const expectedRow = before ? before.nextSibling : node.body.firstChild;
        if (expectedRow !== row.tr) node.body.insertBefore(row.tr, expectedRow);
        before = row.tr;
      }
      for (const [id, row] of node.rows) {
        if (!kept.has(id)) { row.tr.remove(); node.rows.delete(id); }
      }
      const hiddenRows = folded ? 0 : shown.length - Math.min(limit, shown.length);
      node.more.hidden = hiddenRows <= 0;
      if (hiddenRows > 0) node.more.textContent = 'show all ' + shown.length + ' devices of ' + key + ' (' + hiddenRows + ' more)';
      const expected = previous ? previous.nextSibling : list.firstChild;
      if (expected !== node.root) list.insertBefore(node.root, expected);
      previous = node.root;
    }
    for (const [key, node] of view.keyNodes) {
      if (!seen.has(key)) {
        node.root.remove();
        if (!byKey.has(key)) view.keyNodes.delete(key);
      }
    }
    const none = (pool.devices || []).length === 0;
    setText('devices-empty', none ? 'No device has joined yet.' : 'No device matches the filter.');
    showEmpty('devices-empty', none || seen.size === 0);
  }

  // ---- queues ---------------------------------------------------------------------

  function renderQueues(state) {
    const queues = ((state.pool && state.pool.queues) || []).filter((q) => (q.waiting || []).length > 0);
    const html = queues.map((q) =>
      '<div class="queue" data-key="' + esc(q.key) + '"><h3>' + esc(q.key) +
      ' <span class="muted">' + q.waiting.length + ' waiting</span></h3>' +
      '<table class="waiting"><thead><tr><th class="num">#</th><th>client</th><th class="num">priority</th>' +
      '<th class="num">waited</th></tr></thead><tbody>' +
      q.waiting.map((w, i) =>
        '<tr data-client="' + esc(w.client) + '" data-request="' + esc(num(w.request_id)) + '" data-priority="' + esc(num(w.priority)) + '">' +
        '<td class="num">' + (i + 1) + '</td><td>' + esc(w.client) + '</td>' +
        '<td class="num"><span class="prio' + (num(w.priority) > 0 ? ' high' : num(w.priority) < 0 ? ' low' : '') + '">' +
        esc(num(w.priority)) + '</span></td>' +
        '<td class="num">' + esc(duration(w.waited_ms)) + '</td></tr>').join('') +
      '</tbody></table></div>').join('');
    setHtml($('queue-list'), html);
    showEmpty('queues-empty', queues.length === 0);
  }

  // ---- events ---------------------------------------------------------------------

  function renderEvents(state) {
    const events = state.events || [];
    const html = events.map((e) =>
      '<li data-kind="' + esc(e.kind) + '"><span class="when">' + esc(ago(e.t_ms_ago)) + '</span>' +
      '<span class="kind kind-' + esc(e.kind) + '">' + esc(words(e.kind)) + '</span>' +
      '<span class="text">' + esc(e.text) + '</span></li>').join('');
    setHtml($('event-list'), html);
    showEmpty('events-empty', events.length === 0);
  }

  // ---- curves ---------------------------------------------------------------------

  // A "nice" upper bound and tick step (1, 2 or 5 times a power of ten) for an axis
  // from 0 to max with about `ticks` steps.
  function niceAxis(max, ticks) {
    const top = max > 0 ? max : 1;
    const raw = top / ticks;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const fraction = raw / power;
    const step = (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * power;
    return { max: Math.ceil(top / step - 1e-9) * step, step };
  }

  // The same for a time axis in ms, in steps a clock reads well.
  const TIME_STEPS = [100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000,
    900000, 1800000, 3600000, 7200000, 10800000, 21600000, 43200000, 86400000];
  function timeAxis(max, ticks) {
    const top = max > 0 ? max : 1000;
    const step = TIME_STEPS.find((candidate) => top / candidate <= ticks) || Math.ceil(top / ticks / 86400000) * 86400000;
    return { max: Math.ceil(top / step - 1e-9) * step, step };
  }

  function tickLabel(value, step, time) {
    if (time) {
      const s = Math.round(value / 100) / 10;
      if (step >= 3600000) return (value / 3600000).toFixed(value % 3600000 === 0 ? 0 : 1) + 'h';
      if (step >= 60000) return Math.round(value / 60000) + 'm';
      if (s >= 60) return Math.floor(s / 60) + ':' + String(Math.round(s % 60)).padStart(2, '0');
      return (step < 1000 ? s.toFixed(1) : Math.round(s)) + 's';
    }
    if (value >= 10000 && step >= 1000) return (value / 1000).toFixed(step % 1000 === 0 ? 0 : 1) + 'k';
    const digits = step >= 1 ? 0 : Math.min(3, Math.ceil(-Math.log10(step) - 1e-9));
    return value.toFixed(digits);
  }

  const CHART = { w: 560, h: 210, left: 46, right: 14, top: 22, bottom: 36 };

  // The job's best-so-far curve as a step line: GFLOP/s against trials or elapsed time.
  function curveSvg(job, mode) {
    const time = mode === 'time';
    const points = (job.curve || []).map((p) => [num(p[0]), num(p[1]), num(p[2])]);
    const xOf = (p) => (time ? p[1] : p[0]);
    const xNow = time ? num(job.elapsed_ms) : num(job.trials);
    const final = job.finished ? num(job.final_gflops) : 0;
    let xMax = xNow;
    let yMax = Math.max(num(job.default_gflops), final);
    for (const p of points) { xMax = Math.max(xMax, xOf(p)); yMax = Math.max(yMax, p[2]); }
    const xa = time ? timeAxis(xMax, 5) : niceAxis(Math.max(xMax, 4), 5);
    const ya = niceAxis(yMax * 1.05, 4);
    const pw = CHART.w - CHART.left - CHART.right;
    const ph = CHART.h - CHART.top - CHART.bottom;
    const sx = (x) => (CHART.left + (x / xa.max) * pw).toFixed(1);
    const sy = (y) => (CHART.top + ph - (y / ya.max) * ph).toFixed(1);

    let grid = '';
    for (let y = 0; y <= ya.max + ya.step / 2; y += ya.step) {
      grid += '<line class="grid" x1="' + CHART.left + '" x2="' + (CHART.w - CHART.right) + '" y1="' + sy(y) + '" y2="' + sy(y) + '"/>' +
        '<text class="tick" x="' + (CHART.left - 6) + '" y="' + sy(y) + '" dy="0.32em" text-anchor="end">' + esc(tickLabel(y, ya.step, false)) + '</text>';
    }
    for (let x = 0; x <= xa.max + xa.step / 2; x += xa.step) {
      grid += '<line class="tickmark" x1="' + sx(x) + '" x2="' + sx(x) + '" y1="' + (CHART.top + ph) + '" y2="' + (CHART.top + ph + 4) + '"/>' +
        '<text class="tick" x="' + sx(x) + '" y="' + (CHART.top + ph + 16) + '" text-anchor="middle">' + esc(tickLabel(x, xa.step, time)) + '</text>';
    }

    let line = '';
    let last = null;
    for (const p of points) {
      line += last === null ? 'M' + sx(xOf(p)) + ' ' + sy(p[2]) : 'H' + sx(xOf(p)) + 'V' + sy(p[2]);
      last = p;
    }
    if (last !== null && xNow > xOf(last)) line += 'H' + sx(xNow);

    const def = num(job.default_gflops);
    const baseline = def > 0
      ? '<line class="default" x1="' + CHART.left + '" x2="' + (CHART.w - CHART.right) + '" y1="' + sy(def) + '" y2="' + sy(def) + '"/>' +
        '<text class="default-label" x="' + (CHART.w - CHART.right - 2) + '" y="' + sy(def) + '" dy="-0.4em" text-anchor="end">default ' + esc(gflops(def)) + '</text>'
      : '';
    const marker = last !== null
      ? '<circle class="best" cx="' + sx(xOf(last)) + '" cy="' + sy(last[2]) + '" r="3.5"/>'
      : '';
    // The final round's recommendation, re-measured: a diamond at the curve's right end.
    let finalMark = '';
    if (final > 0) {
      const fx = Number(sx(Math.max(xNow, last !== null ? xOf(last) : 0)));
      const fy = Number(sy(final));
      const d = 5.5;
      finalMark = '<path class="final" d="M' + fx.toFixed(1) + ' ' + (fy - d).toFixed(1) + 'L' + (fx + d).toFixed(1) + ' ' + fy.toFixed(1) +
        'L' + fx.toFixed(1) + ' ' + (fy + d).toFixed(1) + 'L' + (fx - d).toFixed(1) + ' ' + fy.toFixed(1) + 'Z">' +
        '<title>final (re-measured): ' + esc(gflops(final)) + ' GFLOP/s</title></path>' +
        '<text class="final-label" x="' + (fx - d - 3).toFixed(1) + '" y="' + fy.toFixed(1) + '" dy="' + (final >= yMax * 0.9 ? '1.1em' : '-0.6em') +
        '" text-anchor="end">final ' + esc(gflops(final)) + '</text>';
    }
    const label = points.length === 0 ? '<text class="nodata" x="' + (CHART.left + pw / 2) + '" y="' + (CHART.top + ph / 2) +
      '" text-anchor="middle">waiting for the first measurement</text>' : '';

    return '<svg class="curve" viewBox="0 0 ' + CHART.w + ' ' + CHART.h + '" role="img" aria-label="best-so-far GFLOP/s against ' +
      (time ? 'time' : 'trials') + '" data-x="' + (time ? 'time' : 'trials') + '">' +
      '<title>best-so-far GFLOP/s against ' + (time ? 'elapsed time' : 'trials') + '</title>' +
      grid +
      '<line class="axis" x1="' + CHART.left + '" x2="' + (CHART.w - CHART.right) + '" y1="' + (CHART.top + ph) + '" y2="' + (CHART.top + ph) + '"/>' +
      baseline +
      '<path class="curve-line" data-points="' + points.length + '" d="' + (line || 'M0 0') + '"/>' +
      marker + finalMark + label +
      '<text class="axis-label" x="' + (CHART.left + pw) + '" y="' + (CHART.h - 3) + '" text-anchor="end">' + (time ? 'elapsed' : 'trials') + '</text>' +
      '<text class="axis-label" x="4" y="11">GFLOP/s</text>' +
      '</svg>';
  }

  // ---- sessions -------------------------------------------------------------------

  // A finished job's result: the final round's recommendation, re-measured, its speed-up
  // over the default with the 95% interval, and the verdict.
  function finalHtml(job) {
    const final = num(job.final_gflops);
    if (!job.finished || (final <= 0 && !job.verdict)) return '';
    const range = interval(job.final_speedup_low, job.final_speedup_high);
    return '<div class="job-final" data-verdict="' + esc(job.verdict || '') + '">' +
      '<span class="label">final, re-measured</span>' +
      '<span class="value final" data-field="final">' + esc(gflops(final)) + '</span><span class="muted"> GFLOP/s</span>' +
      (num(job.final_speedup) > 0 ? '<span class="speedup" data-field="final-speedup">' + esc(ratio(job.final_speedup)) + '</span>' : '') +
      (range ? '<span class="interval" title="95% interval of the speed-up over the default">95% ' + esc(range) + '</span>' : '') +
      (job.verdict ? '<span class="verdict ' + esc(String(job.verdict).replace(/ /g, '-')) + '">' + esc(job.verdict) + '</span>' : '') +
      '</div>';
  }

  function phaseHtml(job) {
    if (!job.finished) return '<span class="phase">' + esc(job.phase || 'tuning') + '</span>';
    const outcome = job.outcome || 'done';
    return '<span class="phase done ' + esc(outcome) + '" data-outcome="' + esc(outcome) + '"' +
      (job.message ? ' title="' + esc(job.message) + '"' : '') + '>' + esc(outcome === 'done' ? 'finished' : outcome) + '</span>';
  }

  function jobHtml(job, mode) {
    const trials = num(job.trials);
    const budget = num(job.budget);
    const best = num(job.best_gflops);
    const def = num(job.default_gflops);
    const failures = Object.entries(job.failures || {}).filter((e) => num(e[1]) > 0);
    const failed = failures.reduce((sum, e) => sum + num(e[1]), 0);
    const title = job.label || [job.op, job.workload].filter(Boolean).join(' ');
    const meta = [job.op, job.workload, job.strategy && 'strategy ' + job.strategy, job.target, job.key && 'key ' + job.key]
      .filter(Boolean).map(esc).join(' · ');
    const eta = !job.finished && num(job.eta_ms) > 0 ? '<span class="note" data-field="eta">ETA ' + esc(duration(job.eta_ms)) + '</span>' : '';
    return '<div class="job" data-job="' + esc(num(job.job)) + '" data-trials="' + trials + '" data-finished="' + (job.finished ? 'true' : 'false') + '"' +
        (job.finished ? ' data-outcome="' + esc(job.outcome || 'done') + '"' : '') + '>' +
      '<div class="job-head"><span class="job-title">' + esc(title) + '</span>' + phaseHtml(job) + '</div>' +
      '<div class="job-meta">' + meta + '</div>' +
      '<div class="job-figures">' +
        '<div><span class="label">trials</span><span class="value" data-field="trials">' + esc(trials) +
          (budget > 0 ? '<span class="muted"> / ' + esc(budget) + '</span>' : '') + '</span>' +
          (budget > 0 ? '<progress max="' + budget + '" value="' + Math.min(trials, budget) + '"></progress>' : '') +
          (num(job.this_session) < trials ? '<span class="note">' + esc(num(job.this_session)) + ' this session</span>' : '') + '</div>' +
        '<div><span class="label">best GFLOP/s</span><span class="value best" data-field="best">' + esc(gflops(best)) + '</span></div>' +
        '<div><span class="label">default</span><span class="value" data-field="default">' + esc(gflops(def)) + '</span>' +
          (best > 0 && def > 0 ? '<span class="speedup">×' + esc((best / def).toFixed(2)) + '</span>' : '') + '</div>' +
        '<div><span class="label">elapsed</span><span class="value">' + esc(duration(job.elapsed_ms)) + '</span>' + eta + '</div>' +
      '</div>' +
      finalHtml(job) +
      (job.finished && job.outcome === 'failed' && job.message
        ? '<div class="job-error" role="note">failed: ' + esc(job.message) + '</div>' : '') +
      curveSvg(job, mode) +
      '<div class="failures" data-failed="' + failed + '">' + (failures.length === 0
        ? '<span class="muted">no failed measurements</span>'
        : failures.map((e) => '<span class="chip fail" data-status="' + esc(e[0]) + '">' + esc(words(e[0])) + ' <span class="n">' + esc(num(e[1])) + '</span></span>').join('')) +
      '</div>' +
      (job.best_config ? '<div class="config" title="best configuration">' + esc(job.best_config) + '</div>' : '') +
      '</div>';
  }

  function jobLine(job) {
    const best = num(job.best_gflops);
    const def = num(job.default_gflops);
    const final = job.finished ? num(job.final_gflops) : 0;
    const result = final > 0
      ? 'final <span class="final">' + esc(gflops(final)) + '</span> GFLOP/s' +
        (num(job.final_speedup) > 0 ? ' <span class="speedup">' + esc(ratio(job.final_speedup)) + '</span>' : '') +
        (job.verdict ? ' <span class="verdict ' + esc(String(job.verdict).replace(/ /g, '-')) + '">' + esc(job.verdict) + '</span>' : '') +
        ' <span class="muted">(best ' + esc(gflops(best)) + ')</span>'
      : 'best <span class="best">' + esc(gflops(best)) + '</span> GFLOP/s' +
        (best > 0 && def > 0 ? ' <span class="speedup">×' + esc((best / def).toFixed(2)) + '</span>' : '');
    return '<li data-job="' + esc(num(job.job)) + '"' + (job.finished ? ' data-outcome="' + esc(job.outcome || 'done') + '"' : '') + '>' +
      '<span class="job-title">' + esc(job.label || job.op + ' ' + job.workload) +
      (job.finished && job.outcome && job.outcome !== 'done' ? ' ' + outcomeBadge(job.outcome, job.message) : '') + '</span>' +
      '<span class="muted">' + esc(num(job.trials)) + (num(job.budget) > 0 ? ' / ' + esc(num(job.budget)) : '') + ' trials</span>' +
      '<span>' + result + '</span></li>';
  }

  // A running session silent for longer than it should be: since when, how often it
  // usually reports, and the last ETA it gave.
  function stallHtml(s) {
    if (!s.stalled) return '';
    const usual = num(s.report_interval_ms) > 0 ? ' (it usually reports every ' + duration(s.report_interval_ms) + ')' : '';
    const eta = num(s.eta_ms) > 0 ? ' · last ETA ' + duration(s.eta_ms) + ', given ' + ago(s.updated_ms_ago) : '';
    return '<div class="stall" role="alert" data-field="stalled">stalled: no report for ' + esc(duration(s.updated_ms_ago)) +
      esc(usual) + esc(eta) + '</div>';
  }

  function sessionHtml(s) {
    const mode = view.xAxis.get(s.id) || 'trials';
    const jobs = s.jobs || [];
    const all = view.expandedSessions.has(s.id);
    const shown = all ? jobs : jobs.slice(0, JOBS_PER_SESSION);
    // An ended session folds to one line per job unless opened.
    const folded = s.state !== 'running' && !view.openSessions.has(s.id);
    const toggle = s.state === 'running' ? '' :
      '<button type="button" class="fold" data-action="open-session" aria-expanded="' + !folded + '">' +
      (folded ? 'show curves' : 'hide curves') + '</button>';
    return '<header class="session-head">' +
        '<div><span class="session-client">' + esc(s.client) + '</span>' +
        '<span class="state-badge ' + esc(s.state) + '">' + esc(s.state) + '</span>' +
        outcomeBadge(s.outcome, (jobs.find((j) => j.outcome === 'failed' && j.message) || {}).message) +
        (s.stalled ? '<span class="state-badge stalled">stalled</span>' : '') + '</div>' +
        '<div class="session-sub"><span class="sid">' + esc(s.id) + '</span> · started ' + esc(ago(s.started_ms_ago)) +
        ' · last report ' + esc(ago(s.updated_ms_ago)) + ' · ' + jobs.length + (jobs.length === 1 ? ' job' : ' jobs') +
        (s.state === 'running' && !s.stalled && num(s.eta_ms) > 0 ? ' · ETA ' + esc(duration(s.eta_ms)) : '') + '</div>' +
        stallHtml(s) +
        '<div class="toggle">' + toggle +
          (folded ? '' : '<span class="segment" role="group" aria-label="x axis">' +
          '<button type="button" data-action="x-axis" data-x="trials" aria-pressed="' + (mode === 'trials') + '">vs trials</button>' +
          '<button type="button" data-action="x-axis" data-x="time" aria-pressed="' + (mode === 'time') + '">vs time</button></span>') +
        '</div>' +
      '</header>' +
      (folded
        ? '<ul class="job-lines">' + jobs.map(jobLine).join('') + '</ul>'
        : '<div class="jobs">' + shown.map((j) => jobHtml(j, mode)).join('') + '</div>' +
          (jobs.length > shown.length ? '<button type="button" class="more" data-action="expand-session">show all ' + jobs.length + ' jobs</button>' : ''));
  }

  function renderSessions(state) {
    const sessions = state.sessions || [];
    const list = $('session-list');
    const seen = new Set();
    let previous = null;
    for (const s of sessions) {
      seen.add(s.id);
      let node = view.sessionNodes.get(s.id);
      if (!node) {
        const root = document.createElement('article');
        root.className = 'session';
        root.dataset.session = s.id;
        node = { root, html: '' };
        view.sessionNodes.set(s.id, node);
      }
      node.root.dataset.state = s.state;
      node.root.dataset.outcome = s.outcome || '';
      node.root.dataset.stalled = s.stalled ? 'true' : 'false';
      const html = sessionHtml(s);
      if (node.html !== html) {
        node.html = html;
        node.root.innerHTML = html;
      }
      const expected = previous ? previous.nextSibling : list.firstChild;
      if (expected !== node.root) list.insertBefore(node.root, expected);
      previous = node.root;
    }
    for (const [id, node] of view.sessionNodes) {
      if (!seen.has(id)) { node.root.remove(); view.sessionNodes.delete(id); }
    }
    showEmpty('sessions-empty', sessions.length === 0);
  }

  // ---- the whole page -------------------------------------------------------------

  function render() {
    const state = view.state;
    if (!state) return;
    renderSummary(state);
    renderSessions(state);
    renderDevices(state);
    renderQueues(state);
    renderEvents(state);
  }

  function accept(state) {
    if (!state || typeof state !== 'object') return;
    view.state = state;
    view.receivedAt = Date.now();
    render();
    setLive('live', 'live');
  }

  function setLive(status, text) {
    const live = $('live');
    live.dataset.status = status;
    if (live.textContent !== text) live.textContent = text;
  }

  // ---- interaction ----------------------------------------------------------------

  function onClick(event) {
    const button = event.target.closest('button[data-action]');
    if (!button) return;
    const action = button.dataset.action;
    if (action === 'x-axis') {
      const card = button.closest('[data-session]');
      view.xAxis.set(card.dataset.session, button.dataset.x);
    } else if (action === 'open-session') {
      const id = button.closest('[data-session]').dataset.session;
      if (view.openSessions.has(id)) view.openSessions.delete(id); else view.openSessions.add(id);
    } else if (action === 'expand-session') {
      view.expandedSessions.add(button.closest('[data-session]').dataset.session);
    } else if (action === 'fold-key') {
      const key = button.closest('[data-key]').dataset.key;
      if (view.collapsedKeys.has(key)) view.collapsedKeys.delete(key); else view.collapsedKeys.add(key);
    } else if (action === 'expand-key') {
      view.expandedKeys.add(button.closest('[data-key]').dataset.key);
    }
    render();
  }

  // ---- the feed -------------------------------------------------------------------

  let source = null;
  let retryMs = 1000;

  async function load() {
    try {
      const response = await fetch('/api/state', { credentials: 'same-origin', cache: 'no-store' });
      if (response.status === 401) {
        setLive('auth', 'token needed');
        window.location.assign('/login');
        return false;
      }
      if (!response.ok) throw new Error('api/state: HTTP ' + response.status);
      accept(await response.json());
      return true;
    } catch (error) {
      setLive('reconnecting', 'tracker unreachable');
      return true;
    }
  }

  function follow() {
    if (source) source.close();
    source = new EventSource('/api/stream', { withCredentials: true });
    source.addEventListener('state', (event) => {
      retryMs = 1000;
      try {
        accept(JSON.parse(event.data));
      } catch (error) {
        setLive('reconnecting', 'bad update');
      }
    });
    source.addEventListener('open', () => { retryMs = 1000; });
    source.addEventListener('error', () => {
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up (an HTTP error, e.g. the token expired): check why, and
        // start over after a growing pause.
        setLive('reconnecting', 'reconnecting');
        const wait = retryMs;
        retryMs = Math.min(retryMs * 2, 30000);
        setTimeout(async () => { if (await load()) follow(); }, wait);
      } else {
        setLive('reconnecting', 'reconnecting');
      }
    });
  }

  function tick() {
    const status = $('live').dataset.status;
    if (!view.state || (status !== 'live' && status !== 'stale')) return;
    const age = Date.now() - view.receivedAt;
    if (age > STALE_MS) setLive('stale', 'no update for ' + duration(age));
  }

  function start() {
    document.addEventListener('click', onClick);
    $('device-filter').addEventListener('input', (event) => {
      view.filter = event.target.value.trim().toLowerCase();
      render();
    });
    setInterval(tick, 1000);
    load().then((go) => { if (go) follow(); });
  }

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
