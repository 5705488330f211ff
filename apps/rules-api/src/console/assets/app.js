// The Sluice console (docs/console.md): a small module on the public REST API of the rules API.
// Every value from the API reaches the page as text (textContent, never innerHTML); the token stays
// in this tab's sessionStorage and goes out only as `Authorization: Bearer`.

const TOKEN_KEY = 'sluice.console.token';
/** Server-set fields a rule input must not carry back in a PUT. */
const SERVER_FIELDS = ['id', 'version', 'createdAt', 'updatedAt'];
/** Fields that change on every write: not worth showing in a diff. */
const NOISY_FIELDS = new Set(['version', 'updatedAt']);

const $ = (id) => document.getElementById(id);

/** An element with attributes and children; strings become text nodes. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === 'onclick') node.addEventListener('click', value);
    else if (name === 'className') node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === 'string' || typeof child === 'number' ? String(child) : child);
  }
  return node;
}

/**
 * A table that becomes one card per row on narrow screens (style.css, `table.stack`): each data cell
 * gets its column's heading as `data-label`.
 */
function stackedTable(attrs, ...children) {
  const table = el('table', attrs, ...children);
  const headings = [...table.querySelectorAll('thead th')].map((th) => th.textContent);
  for (const row of table.querySelectorAll('tbody tr')) {
    [...row.children].forEach((cell, i) => {
      if (cell.tagName === 'TD' && headings[i]) cell.setAttribute('data-label', headings[i]);
    });
  }
  table.classList.add('stack');
  return table;
}

function say(message) {
  $('status').textContent = message;
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message ?? `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, { body, ifMatch } = {}) {
  const headers = { authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) ?? ''}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (ifMatch !== undefined) headers['if-match'] = `"${ifMatch}"`;
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : body,
    cache: 'no-store',
  });
  const text = await res.text();
  let json;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    json = { message: text };
  }
  if (res.status === 401) {
    signOut('The token was refused (401). Sign in again.');
    throw new ApiError(401, json);
  }
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}

/** Every rule, and each one's limits in words by rule id (the API's `summaries`: one wording everywhere). */
async function listRules() {
  const rules = [];
  const summaries = {};
  let cursor = null;
  do {
    const query = cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`;
    const page = await api('GET', `/rules?limit=1000${query}`);
    rules.push(...page.items);
    Object.assign(summaries, page.summaries);
    cursor = page.nextCursor;
  } while (cursor !== null);
  return { rules, summaries };
}

// ---------------------------------------------------------------- rules table

function kindOf(rule) {
  if (rule.unlimited === true) return 'unlimited';
  return Array.isArray(rule.limits) ? 'v2' : 'v1';
}

function limitsOf(rule) {
  return summaries[rule.id] ?? [];
}

/**
 * What the rule does beyond its limits, in words (docs/lifecycle.md, docs/lease-mode.md): lease mode,
 * what it charges at the response and which statuses it refunds. Empty for a rule with none of them.
 */
function lifecycleWords(rule) {
  const words = [];
  if (rule.mode === 'lease') words.push('lease mode');
  const charge = rule.charge;
  if (charge) {
    let what = `charge: ${charge.from}`;
    if (charge.from === 'header') what = `charge: response header ${charge.header}`;
    else if (charge.from === 'duration') what = `charge: 1 per ${charge.unitMs ?? 1} ms of response`;
    else if (charge.from === 'bytes') what = `charge: 1 per ${charge.unitBytes ?? 1} bytes of response`;
    words.push(charge.max === undefined ? what : `${what}, at most ${charge.max}`);
  }
  if (rule.refund?.statuses?.length) words.push(`refund: ${rule.refund.statuses.join(', ')}`);
  return words;
}

function matchText(match) {
  const parts = [match.path];
  if (match.methods?.length) parts.push(match.methods.join(','));
  if (match.host) parts.push(`host ${match.host}`);
  if (match.headers) parts.push(`${Object.keys(match.headers).length} header cond.`);
  if (match.claims) {
    for (const [name, wanted] of Object.entries(match.claims)) {
      parts.push(`claim ${name}=${[].concat(wanted).join('|')}`);
    }
  }
  if (match.authenticated !== undefined) parts.push(match.authenticated ? 'authenticated' : 'anonymous');
  if (match.clientIps) parts.push('clientIps');
  if (match.notClientIps) parts.push('notClientIps');
  return parts.join(' · ');
}

let rules = [];
/** rule id → its limits in words, as `GET /rules` gave them */
let summaries = {};
let canWrite = true;

function renderRules() {
  const body = $('rules-body');
  body.replaceChildren(
    ...rules.map((rule) =>
      el(
        'tr',
        { 'data-rule': rule.name },
        el('th', { scope: 'row' }, el('span', { className: 'mono' }, rule.name)),
        el(
          'td',
          { 'data-label': 'State' },
          el(
            'span',
            { className: `tag ${rule.enabled ? 'on' : 'off'}` },
            rule.enabled ? 'enabled' : 'disabled',
          ),
          rule.shadow ? el('span', { className: 'tag shadow' }, 'shadow') : null,
          rule.priority !== 0 ? el('span', { className: 'tag off' }, `priority ${rule.priority}`) : null,
          ...lifecycleWords(rule).map((text) => el('span', { className: 'tag life' }, text)),
        ),
        el('td', { 'data-label': 'Kind' }, kindOf(rule)),
        el('td', { 'data-label': 'Limits' }, ...limitsOf(rule).map((text) => el('div', {}, text))),
        el('td', { className: 'mono', 'data-label': 'Match' }, matchText(rule.match)),
        el('td', { 'data-label': 'Version' }, rule.version),
        el(
          'td',
          { 'data-label': 'Actions' },
          el(
            'div',
            { className: 'actions' },
            canWrite
              ? el(
                  'button',
                  { type: 'button', onclick: () => openEditor(rule.id), 'aria-label': `Edit ${rule.name}` },
                  'Edit',
                )
              : null,
            el(
              'button',
              {
                type: 'button',
                className: 'secondary',
                onclick: () => openDetails(rule),
                'aria-label': `History of ${rule.name}`,
              },
              'History',
            ),
            canWrite
              ? el(
                  'button',
                  {
                    type: 'button',
                    className: 'danger',
                    onclick: () => deleteRule(rule),
                    'aria-label': `Delete ${rule.name}`,
                  },
                  'Delete',
                )
              : null,
          ),
        ),
      ),
    ),
  );
  $('rules-empty').hidden = rules.length > 0;
}

async function loadRules() {
  ({ rules, summaries } = await listRules());
  renderRules();
}

async function deleteRule(rule) {
  if (!window.confirm(`Delete rule "${rule.name}" (version ${rule.version})?`)) return;
  try {
    await api('DELETE', `/rules/${rule.id}`, { ifMatch: rule.version });
    say(`Deleted ${rule.name}.`);
  } catch (error) {
    if (error.status === 412)
      say(`Not deleted: ${rule.name} changed since the list was loaded. Reload and look again.`);
    else say(`Not deleted: ${error.message}`);
  }
  await loadRules();
}

// ---------------------------------------------------------------- editor

/**
 * What the editor works on: null for a new rule, else the id, the version the text came from and that
 * version's fields (`original`, to see what an edit changes).
 */
let editing = null;

/** A rule's limits as [name, algorithm]: a format-1 rule is one token bucket named "". */
function limitAlgorithms(rule) {
  if (rule?.limit !== undefined) return [['', 'token-bucket']];
  return (Array.isArray(rule?.limits) ? rule.limits : []).map((l) => [l.name, l.algorithm ?? 'token-bucket']);
}

/**
 * What saving `after` over `before` does that its fields do not show, in the words of
 * `rules apply --dry-run` (the shared algorithmChanges): a limit keeping its name under another
 * algorithm starts its counters afresh.
 */
function algorithmChangeNotices(before, after) {
  const old = new Map(limitAlgorithms(before));
  return limitAlgorithms(after)
    .filter(([name, to]) => old.has(name) && old.get(name) !== to)
    .map(
      ([name, to]) =>
        `limit \`${name}\` changes algorithm: its counters start afresh (${old.get(name)} → ${to})`,
    );
}

function writable(rule) {
  const copy = { ...rule };
  for (const field of SERVER_FIELDS) delete copy[field];
  return copy;
}

const NEW_RULE = {
  name: 'my-rule',
  match: { path: '/api/**' },
  limits: [
    { name: 'burst', capacity: 20, refill: 10, period: '1s' },
    { name: 'daily', algorithm: 'sliding-window', max: 10000, window: '1d' },
  ],
};

function showEditor(title, text, hint) {
  $('editor').hidden = false;
  $('editor-title').textContent = title;
  $('rule-json').value = text;
  $('rule-hint').textContent = hint;
  showLifecycle();
  clearEditorErrors();
  $('rule-json').focus();
}

/** The editor's text's mode, charge and refund in words, defaults included; kept as is while the text is not JSON. */
function showLifecycle() {
  let rule;
  try {
    rule = JSON.parse($('rule-json').value);
  } catch {
    return;
  }
  if (rule === null || typeof rule !== 'object' || rule.unlimited === true) {
    $('rule-lifecycle').textContent = 'At the response: nothing (an unlimited rule).';
    return;
  }
  const words = lifecycleWords(rule);
  if (rule.mode !== 'lease') words.unshift('exact mode');
  if (!rule.charge) words.push('no charge at the response');
  if (!rule.refund) words.push('no refund');
  $('rule-lifecycle').textContent = `Mode and settling: ${words.join(' · ')}.`;
}

function clearEditorErrors() {
  $('rule-error').textContent = '';
  $('rule-json').removeAttribute('aria-invalid');
  $('conflict').hidden = true;
}

function openNewRule() {
  editing = null;
  showEditor('New rule', JSON.stringify(NEW_RULE, null, 2), 'Create: POST /rules.');
}

async function openEditor(id) {
  try {
    const rule = await api('GET', `/rules/${id}`);
    editing = { id: rule.id, version: rule.version, name: rule.name, original: writable(rule) };
    showEditor(
      `Edit ${rule.name}`,
      JSON.stringify(writable(rule), null, 2),
      `Editing version ${rule.version}; saving sends If-Match: "${rule.version}".`,
    );
  } catch (error) {
    say(`Cannot open the rule: ${error.message}`);
  }
}

function fieldError(message) {
  $('rule-error').textContent = message;
  $('rule-json').setAttribute('aria-invalid', 'true');
  $('rule-json').focus();
}

async function showConflict() {
  try {
    const current = await api('GET', `/rules/${editing.id}`);
    $('conflict-text').textContent =
      `You edited version ${editing.version}; the rule is now at version ${current.version}. ` +
      'Nothing was saved. Load the current version, or keep your text and compare.';
    $('conflict-current').textContent = JSON.stringify(writable(current), null, 2);
    $('conflict').dataset.version = String(current.version);
    $('conflict').hidden = false;
    $('conflict-reload').focus();
  } catch (error) {
    if (error.status === 404) fieldError('Nothing was saved: the rule was deleted meanwhile.');
    else fieldError(`Nothing was saved (412), and the current version could not be read: ${error.message}`);
  }
}

async function saveRule(event) {
  event.preventDefault();
  clearEditorErrors();
  const text = $('rule-json').value;
  let wanted;
  try {
    wanted = JSON.parse(text);
  } catch (error) {
    fieldError(`Not JSON: ${error.message}`);
    return;
  }
  const notices = editing === null ? [] : algorithmChangeNotices(editing.original, wanted);
  if (notices.length > 0 && !window.confirm(`${notices.join('\n')}\n\nSave anyway?`)) {
    fieldError(`Not saved: ${notices.join('; ')}.`);
    return;
  }
  try {
    const saved =
      editing === null
        ? await api('POST', '/rules', { body: text })
        : await api('PUT', `/rules/${editing.id}`, { body: text, ifMatch: editing.version });
    say(`Saved ${saved.name} (version ${saved.version}).`);
    editing = { id: saved.id, version: saved.version, name: saved.name, original: writable(saved) };
    $('editor').hidden = true;
    await loadRules();
    $('rules-title').scrollIntoView();
  } catch (error) {
    if (error.status === 412) await showConflict();
    else fieldError(`${error.status}: ${error.message}`);
  }
}

async function reloadFromConflict() {
  const text = $('conflict-current').textContent;
  const version = Number($('conflict').dataset.version);
  editing = { ...editing, version, original: JSON.parse(text) };
  $('rule-json').value = text;
  $('rule-hint').textContent = `Editing version ${version}; saving sends If-Match: "${version}".`;
  showLifecycle();
  clearEditorErrors();
  say(`Loaded version ${version}.`);
  $('rule-json').focus();
  // the list showed the version this edit started from: show what is current now
  try {
    await loadRules();
  } catch (error) {
    say(`Loaded version ${version}; the list could not be refreshed: ${error.message}`);
  }
}

// ---------------------------------------------------------------- history and offenders

/** `{ a: { b: 1 } }` → `Map { 'a.b' → 1 }`; arrays of scalars stay whole, arrays of objects go by index. */
function flatten(value, prefix = '', out = new Map()) {
  if (value !== null && typeof value === 'object') {
    const scalarArray = Array.isArray(value) && value.every((v) => v === null || typeof v !== 'object');
    if (scalarArray) {
      out.set(prefix, JSON.stringify(value));
      return out;
    }
    for (const [key, inner] of Object.entries(value))
      flatten(inner, prefix === '' ? key : `${prefix}.${key}`, out);
    return out;
  }
  out.set(prefix, JSON.stringify(value));
  return out;
}

/** The changed fields between two versions: `[field, old | undefined, new | undefined]`. */
function diff(before, after) {
  const a = flatten(before);
  const b = flatten(after);
  const changes = [];
  for (const key of new Set([...a.keys(), ...b.keys()])) {
    if (NOISY_FIELDS.has(key) || a.get(key) === b.get(key)) continue;
    changes.push([key, a.get(key), b.get(key)]);
  }
  return changes.sort((x, y) => (x[0] < y[0] ? -1 : 1));
}

function changeItem([field, before, after]) {
  return el(
    'li',
    {},
    el('code', {}, field),
    ': ',
    before === undefined ? el('em', {}, '(none)') : el('span', { className: 'old mono' }, before),
    ' → ',
    after === undefined ? el('em', {}, '(removed)') : el('span', { className: 'new mono' }, after),
  );
}

async function openDetails(rule) {
  $('details').hidden = false;
  $('details-title').textContent = `History of ${rule.name}`;
  const list = $('history-list');
  list.replaceChildren(el('li', {}, 'Loading…'));
  $('details-title').focus();
  try {
    const { items } = await api('GET', `/rules/${rule.id}/history?limit=50`);
    list.replaceChildren(
      ...items.map((item, i) => {
        const older = items[i + 1];
        const head = `version ${item.version} · ${item.action} · ${new Date(item.at).toLocaleString()} · by ${item.actor}`;
        let detail;
        if (item.action === 'create') detail = el('p', { className: 'hint' }, 'created');
        else if (item.action === 'delete') detail = el('p', { className: 'hint' }, 'deleted');
        else if (older === undefined) detail = el('p', { className: 'hint' }, 'older versions not shown');
        else {
          const changes = diff(older.rule, item.rule);
          detail =
            changes.length === 0
              ? el('p', { className: 'hint' }, 'no field changed')
              : el('ul', { className: 'changes' }, ...changes.map(changeItem));
        }
        return el('li', { 'data-version': item.version }, el('strong', {}, head), detail);
      }),
    );
  } catch (error) {
    list.replaceChildren(el('li', { className: 'error' }, `History not available: ${error.message}`));
  }
  await loadOffenders(rule);
}

async function loadOffenders(rule) {
  const box = $('offenders');
  box.replaceChildren(el('p', {}, 'Loading…'));
  try {
    const { items } = await api('GET', `/rules/${rule.id}/offenders?minutes=15`);
    if (items.length === 0) {
      box.replaceChildren(el('p', {}, 'Nobody was denied in the last 15 minutes.'));
      return;
    }
    box.replaceChildren(
      stackedTable(
        {},
        el(
          'thead',
          {},
          el('tr', {}, ...['Client', 'Limit', 'Denied', 'Shadow'].map((h) => el('th', { scope: 'col' }, h))),
        ),
        el(
          'tbody',
          {},
          ...items.map((o) =>
            el(
              'tr',
              {},
              el('td', { className: 'mono' }, o.client),
              el('td', {}, o.limit === '' ? '(the limit)' : o.limit),
              el('td', {}, o.denied),
              el('td', {}, o.shadow ? 'would be denied (shadow)' : 'denied'),
            ),
          ),
        ),
      ),
    );
  } catch (error) {
    const notServed = error.status === 404 && error.body?.code === 'SLUICE_ROUTE_NOT_FOUND';
    // no Redis configured for analytics (the embedded demo): the API's message says what to do
    const noAnalytics = error.body?.code === 'SLUICE_ANALYTICS_UNAVAILABLE';
    let note = `Offenders: ${error.message}`;
    if (notServed) note = 'Top offenders are not available on this server.';
    else if (noAnalytics) note = `${error.message.charAt(0).toUpperCase()}${error.message.slice(1)}.`;
    box.replaceChildren(el('p', { className: 'hint' }, note));
  }
}

// ---------------------------------------------------------------- explain

function parseHeaders(text) {
  const headers = {};
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const colon = line.indexOf(':');
    if (colon <= 0) throw new Error(`header line "${line}" has no "name: value"`);
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = name in headers ? [].concat(headers[name], value) : value;
  }
  return headers;
}

async function explain(event) {
  event.preventDefault();
  $('explain-error').textContent = '';
  const out = $('explain-result');
  const request = { method: $('x-method').value, path: $('x-path').value };
  if ($('x-host').value.trim() !== '') request.host = $('x-host').value.trim();
  if ($('x-ip').value.trim() !== '') request.clientIp = $('x-ip').value.trim();
  try {
    request.headers = parseHeaders($('x-headers').value);
  } catch (error) {
    $('explain-error').textContent = error.message;
    return;
  }
  try {
    const result = await api('POST', '/rules/explain', { body: JSON.stringify(request) });
    out.replaceChildren(...explanationNodes(result));
  } catch (error) {
    out.replaceChildren();
    $('explain-error').textContent = `${error.status}: ${error.message}`;
  }
}

function explanationNodes(result) {
  if (result.error !== null) {
    return [
      el(
        'p',
        { className: 'error' },
        `The gateway would answer 400 ${result.error.code}: ${result.error.message}`,
      ),
    ];
  }
  const nodes = [
    el(
      'p',
      {},
      'Normalised path: ',
      el('code', {}, result.path),
      result.host === null ? '' : ' · host ',
      result.host === null ? '' : el('code', {}, result.host),
    ),
    el(
      'p',
      { className: 'chosen', id: 'explain-chosen' },
      result.rule === null
        ? 'No rule applies: the request is proxied without a limit.'
        : [
            'Rule chosen: ',
            el('strong', { className: 'mono' }, result.rule.name),
            result.unlimited ? ' (unlimited: no limit)' : '',
          ],
    ),
  ];
  // which verified identity the rules were matched and keyed with (JWT_* on the rules API)
  const identity = result.identity;
  if (identity !== undefined) {
    nodes.push(
      el(
        'p',
        { id: 'explain-identity' },
        identity.authenticated
          ? ['Verified token, claims: ', el('code', {}, JSON.stringify(identity.claims))]
          : `Unauthenticated (${identity.reason}${identity.message ? `: ${identity.message}` : ''}): keyed by IP, no claim matches.`,
      ),
    );
  }
  if (result.limits.length > 0) {
    nodes.push(
      stackedTable(
        {},
        el('caption', { className: 'sr-only' }, 'Limits the request would be charged against'),
        el(
          'thead',
          {},
          el('tr', {}, ...['Limit', 'Algorithm', 'Client key'].map((h) => el('th', { scope: 'col' }, h))),
        ),
        el(
          'tbody',
          {},
          ...result.limits.map((l) =>
            el(
              'tr',
              {},
              el('td', {}, l.name === '' ? '(the limit)' : l.name),
              el('td', {}, l.algorithm),
              el('td', { className: 'mono' }, l.clientKey),
            ),
          ),
        ),
      ),
    );
  }
  if (result.considered.length > 0) {
    nodes.push(
      el('h3', {}, 'Rules considered (path, method and host fit)'),
      stackedTable(
        { id: 'explain-considered' },
        el(
          'thead',
          {},
          el('tr', {}, ...['Rule', 'Conditions hold', 'Why'].map((h) => el('th', { scope: 'col' }, h))),
        ),
        el(
          'tbody',
          {},
          ...result.considered.map((c) =>
            el(
              'tr',
              {},
              el('td', { className: 'mono' }, c.name),
              el('td', {}, c.matched ? 'yes' : 'no'),
              el('td', {}, c.reason),
            ),
          ),
        ),
      ),
    );
  }
  return nodes;
}

// ---------------------------------------------------------------- sign in

function signOut(message = '') {
  sessionStorage.removeItem(TOKEN_KEY);
  $('app').hidden = true;
  $('sign-out').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message;
  $('token').value = '';
  $('token').focus();
}

async function enter() {
  $('login').hidden = true;
  $('app').hidden = false;
  $('sign-out').hidden = false;
  // What this token may do, asked before the list is drawn and without trying a write (GET /auth/me).
  let note = null;
  try {
    canWrite = (await api('GET', '/auth/me')).canWrite === true;
  } catch (error) {
    if (error.status === 401) return;
    canWrite = false;
    note = `Cannot tell what this token may do (${error.message}): changes are disabled.`;
  }
  $('new-rule').hidden = !canWrite;
  try {
    await loadRules();
  } catch (error) {
    if (error.status !== 401) say(`Cannot list rules: ${error.message}`);
    return;
  }
  say(note ?? (canWrite ? 'Signed in.' : 'Signed in with the read token: changes are disabled.'));
  $('main').focus();
}

function start() {
  $('login').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
    $('token').value = '';
    enter();
  });
  $('sign-out').addEventListener('click', () => signOut());
  $('reload-rules').addEventListener('click', () => loadRules().then(() => say('Rules reloaded.')));
  $('new-rule').addEventListener('click', openNewRule);
  $('editor-form').addEventListener('submit', saveRule);
  $('rule-json').addEventListener('input', showLifecycle);
  $('cancel-edit').addEventListener('click', () => {
    $('editor').hidden = true;
    $('rules-title').focus();
  });
  $('conflict-reload').addEventListener('click', reloadFromConflict);
  $('conflict-keep').addEventListener('click', () => {
    $('conflict').hidden = true;
    $('rule-json').focus();
  });
  $('explain-form').addEventListener('submit', explain);
  if (sessionStorage.getItem(TOKEN_KEY)) enter();
  else signOut();
}

start();
