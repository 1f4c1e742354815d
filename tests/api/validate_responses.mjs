// validate_responses.mjs - every answer the integration suites logged
// (tests/integration/lib.sh, resp_log) checked against the OpenAPI 3.0
// document: its route, method and status must be documented, its
// Content-Type must be one the spec gives for that status, and a JSON body
// must match that status's schema.
//
// usage: node tests/api/validate_responses.mjs SPEC.yaml LOG...
//        node tests/api/validate_responses.mjs --self-check SPEC.yaml
//
// Prints "ok - ..." / "not ok - ..." lines (tests/run.sh counts them): one
// per (method, path template, status) seen, with how many answers; "#"
// lines say why an answer failed.  Exit status 1 when any line is not ok.
//
// The check is strict OpenAPI 3.0.3, not JSON Schema's looser defaults:
// - nullable: true admits null only beside a type in the same schema
//   (3.0.3's wording); an enum still has to list null.
// - An object schema without additionalProperties is closed: a member the
//   spec does not name is an undocumented field, and fails.  A schema that
//   means to be open says additionalProperties: true (or a schema).
// - A $ref's siblings are ignored.
// - Formats: int32 and int64 are integers in range, float and double any
//   number; date-time etc. as ajv-formats checks them (RFC 3339).
//
// Answers that come from the router rather than an operation, as
// info.description says: an unknown path (404 not_found), a known path
// with another method (405 method_not_allowed), a segment in an id's place
// that is no id where no operation of that shape has the request's method
// (400 invalid_id; where one has, that operation's 400), and ambiguous
// framing (400 ambiguous_length) anywhere.  They must be the Error schema
// with that code.
import { readFileSync } from 'node:fs';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { parse as parseYaml } from 'yaml';

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
// Keywords of an OpenAPI 3.0 Schema Object that JSON Schema validates as is.
const SAME = new Set(['title', 'description', 'default', 'multipleOf', 'maximum', 'minimum',
    'maxLength', 'minLength', 'pattern', 'maxItems', 'minItems', 'uniqueItems', 'maxProperties',
    'minProperties', 'required', 'enum', 'type', 'format']);
// Annotations that do not constrain an answer.
const DROP = new Set(['nullable', 'example', 'externalDocs', 'xml', 'deprecated', 'readOnly',
    'writeOnly', 'discriminator']);
const SCHEMA_REF = '#/components/schemas/';

// The JSON Schema (draft-07, for Ajv) that means what OpenAPI 3.0 schema
// `s` means, under the rules in the header.  Throws on what it cannot map.
function toJsonSchema(s, where) {
    if (typeof s !== 'object' || s === null || Array.isArray(s))
        throw new Error(`${where}: a schema must be an object`);
    if (s.$ref !== undefined) {
        if (!s.$ref.startsWith(SCHEMA_REF))
            throw new Error(`${where}: $ref ${s.$ref} is not under ${SCHEMA_REF}`);
        return { $ref: `spec#/definitions/${s.$ref.slice(SCHEMA_REF.length)}` };
    }
    const out = {};
    for (const [k, v] of Object.entries(s)) {
        if (SAME.has(k)) out[k] = v;
        else if (DROP.has(k) || k.startsWith('x-')) continue;
        else if (k === 'exclusiveMinimum' || k === 'exclusiveMaximum') {
            // 3.0's boolean modifies minimum/maximum; draft-07's is the bound.
            const bound = k === 'exclusiveMinimum' ? 'minimum' : 'maximum';
            if (v === true) { out[k] = s[bound]; delete out[bound]; }
        } else if (k === 'items' || k === 'not') out[k] = toJsonSchema(v, `${where}/${k}`);
        else if (k === 'allOf' || k === 'oneOf' || k === 'anyOf')
            out[k] = v.map((x, i) => toJsonSchema(x, `${where}/${k}/${i}`));
        else if (k === 'properties')
            out[k] = Object.fromEntries(Object.entries(v).map(([p, x]) => [p, toJsonSchema(x, `${where}/properties/${p}`)]));
        else if (k === 'additionalProperties')
            out[k] = typeof v === 'boolean' ? v : toJsonSchema(v, `${where}/additionalProperties`);
        else throw new Error(`${where}: ${k} is not an OpenAPI 3.0 schema keyword`);
    }
    if (s.nullable === true && s.type !== undefined)
        out.type = [s.type, 'null'];
    if ((s.type === 'object' || s.properties) && s.additionalProperties === undefined)
        out.additionalProperties = false;
    if (out.required && out.required.length === 0) delete out.required;
    return out;
}

function newAjv() {
    const ajv = new Ajv({ strict: true, allowUnionTypes: true, allErrors: true, validateFormats: true });
    addFormats(ajv);
    const int = (bits) => (n) => Number.isInteger(n) && n >= -(2 ** (bits - 1)) && n < 2 ** (bits - 1);
    ajv.addFormat('int32', { type: 'number', validate: int(32) });
    ajv.addFormat('int64', { type: 'number', validate: int(64) });
    ajv.addFormat('float', { type: 'number', validate: Number.isFinite });
    ajv.addFormat('double', { type: 'number', validate: Number.isFinite });
    ajv.addFormat('binary', { type: 'string', validate: () => true });
    return ajv;
}

// The path of an absolute URL as the router gets it: as sent (no dot
// segments resolved), %XX decoded except %00 (http_unescape in
// server/http/http_limits.c); null if `url` is not absolute.
function requestPath(url) {
    const m = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*([^?#]*)/i.exec(url);
    if (!m) return null;
    return (m[1] || '/').replace(/%([0-9a-fA-F]{2})/g, (all, h) => (h === '00' ? all : String.fromCharCode(parseInt(h, 16))));
}

// "/v1/jobs/" -> "/jobs": the router's own normalisation (server/http/router.c):
// the optional "/v1" prefix and one trailing slash dropped.
function normalisePath(p) {
    if (p.startsWith('/v1') && (p.length === 3 || p[3] === '/')) p = p.slice(3);
    if (p === '') p = '/';
    if (p.length > 1 && p.endsWith('/')) p = p.slice(0, -1);
    return p;
}

// 1: `path` matches `template`; -1: it would but for a segment in an id's
// place that is no id (1 to 18 digits; {id} from 1, others from 0); 0: no.
function matchTemplate(template, path) {
    const t = template.split('/'), p = path.split('/');
    if (t.length !== p.length) return 0;
    let bad = false;
    for (let i = 0; i < t.length; i++) {
        const m = /^\{(\w+)\}$/.exec(t[i]);
        if (!m) { if (t[i] !== p[i]) return 0; continue; }
        if (!/^[0-9]{1,18}$/.test(p[i]) || (m[1] === 'id' && Number(p[i]) < 1)) bad = true;
    }
    return bad ? -1 : 1;
}

// The spec made ready to check answers: `ops` maps "METHOD template" to
// { template, method, responses: { status: { media type: validate|null } },
// description }.
export function loadSpec(doc) {
    if (!/^3\.0\.\d+$/.test(String(doc.openapi)))
        throw new Error(`openapi is ${doc.openapi}; this checks OpenAPI 3.0 documents`);
    const ajv = newAjv();
    const definitions = {};
    for (const [name, s] of Object.entries(doc.components?.schemas ?? {}))
        definitions[name] = toJsonSchema(s, `${SCHEMA_REF}${name}`);
    ajv.addSchema({ $id: 'spec', definitions });
    const resolveResponse = (r, where) => {
        if (r.$ref === undefined) return r;
        const m = /^#\/components\/responses\/(.+)$/.exec(r.$ref);
        if (!m || !doc.components?.responses?.[m[1]]) throw new Error(`${where}: cannot resolve ${r.$ref}`);
        return doc.components.responses[m[1]];
    };
    const ops = new Map();
    for (const [template, item] of Object.entries(doc.paths ?? {})) {
        for (const method of METHODS) {
            const op = item[method];
            if (!op) continue;
            const responses = {};
            for (const [status, r0] of Object.entries(op.responses ?? {})) {
                const where = `${method.toUpperCase()} ${template} ${status}`;
                const r = resolveResponse(r0, where);
                responses[status] = {};
                for (const [mt, media] of Object.entries(r.content ?? {})) {
                    responses[status][mt] = /json/.test(mt) && media.schema
                        ? ajv.compile(toJsonSchema(media.schema, where)) : null;
                }
            }
            ops.set(`${method.toUpperCase()} ${template}`,
                { template, method: method.toUpperCase(), responses, description: op.description ?? '' });
        }
    }
    const error = ajv.compile({ $ref: 'spec#/definitions/Error' });
    return { ops, error };
}

// Splits a log written by resp_log into records
// { method, status, contentType, url, body }.
export function parseLog(buf) {
    const records = [];
    let pos = 0;
    while (pos < buf.length) {
        const eol = buf.indexOf(0x0a, pos);
        const head = (eol < 0 ? buf.subarray(pos) : buf.subarray(pos, eol)).toString('utf8').split('\t');
        if (eol < 0 || head.length !== 6 || head[0] !== 'SHOAL-RESPONSE' || !/^\d+$/.test(head[5]))
            throw new Error(`byte ${pos}: not a SHOAL-RESPONSE record: ${head.join(' ').slice(0, 120)}`);
        const n = Number(head[5]);
        const body = buf.subarray(eol + 1, eol + 1 + n);
        if (body.length !== n || buf[eol + 1 + n] !== 0x0a)
            throw new Error(`byte ${pos}: the record's body is cut short`);
        records.push({ method: head[1], status: head[2], contentType: head[3], url: head[4],
                       body: body.toString('utf8') });
        pos = eol + 2 + n;
    }
    return records;
}

const excerpt = (s) => (s.length > 300 ? `${s.slice(0, 300)}...` : s).replace(/\n/g, ' ');

// What to hold one record to: { key, op?, router?: code } or { key, problem }.
function classify(spec, rec) {
    const path = requestPath(rec.url);
    if (path === null) return { key: `${rec.method} ${rec.url}`, problem: 'not an absolute URL' };
    const norm = normalisePath(path);
    let body = null;
    try { body = JSON.parse(rec.body); } catch { /* not JSON: judged below */ }
    if (rec.status === '400' && body?.error?.code === 'ambiguous_length')
        return { key: '(router) any path 400', router: 'ambiguous_length' };
    let known = false, badIdOp = null, badId = false;
    for (const op of spec.ops.values()) {
        const m = matchTemplate(normalisePath(op.template), norm);
        if (m === 1 && op.method === rec.method) return { key: `${op.method} ${op.template} ${rec.status}`, op };
        if (m === 1) known = true;
        if (m === -1) { badId = true; if (op.method === rec.method && !badIdOp) badIdOp = op; }
    }
    if (known) return { key: '(router) known path, another method 405', router: 'method_not_allowed', want: '405' };
    if (badIdOp) return { key: `${badIdOp.method} ${badIdOp.template} ${rec.status}`, op: badIdOp };
    if (badId) return { key: '(router) bad id 400', router: 'invalid_id', want: '400' };
    return { key: '(router) unknown path 404', router: 'not_found', want: '404' };
}

// Problems with one record, as strings (none: it matches the spec).
function check(spec, rec, c) {
    if (c.problem) return [c.problem];
    const mediaType = rec.contentType.split(';')[0].trim().toLowerCase();
    let body;
    const json = () => {
        try { body = JSON.parse(rec.body); return true; } catch (e) { return false; }
    };
    if (c.router) {
        if (c.want && rec.status !== c.want) return [`status ${rec.status}, want ${c.want}`];
        if (mediaType !== 'application/json') return [`Content-Type '${rec.contentType}', want application/json`];
        if (!json()) return [`the body is not JSON: ${excerpt(rec.body)}`];
        if (!spec.error(body)) return spec.error.errors.map((e) => `${e.instancePath || '/'} ${e.message}`);
        if (body.error.code !== c.router) return [`error code ${body.error.code}, want ${c.router}`];
        return [];
    }
    const documented = c.op.responses[rec.status] ?? c.op.responses[`${rec.status[0]}XX`] ?? c.op.responses.default;
    if (!documented) return [`status ${rec.status} is not documented (documented: ${Object.keys(c.op.responses).join(', ')})`];
    const types = Object.keys(documented);
    if (types.length === 0)
        return rec.body.length === 0 ? [] : [`the spec gives no body, the answer has one: ${excerpt(rec.body)}`];
    const mt = types.find((t) => t === mediaType || (t.endsWith('/*') && mediaType.startsWith(t.slice(0, -1))));
    if (!mt) return [`Content-Type '${rec.contentType}' is not documented (documented: ${types.join(', ')})`];
    const validate = documented[mt];
    if (!validate) return [];
    if (!json()) return [`the body is not JSON: ${excerpt(rec.body)}`];
    if (validate(body)) return [];
    return validate.errors.map((e) => {
        const extra = e.keyword === 'additionalProperties' ? ` (undocumented field '${e.params.additionalProperty}')` : '';
        return `${e.instancePath || '/'} ${e.message}${extra}`;
    });
}

// The family names a /metrics answer declares ("# TYPE name type").
function metricFamilies(text) {
    return [...text.matchAll(/^# TYPE (\S+) \S+$/gm)].map((m) => m[1]);
}

// Checks `records` against `spec`; returns lines { ok, text, detail[] },
// one per (method, template, status) in first-seen order, plus one for
// /metrics' description if any /metrics answer was logged.
export function validate(spec, records) {
    const groups = new Map();
    const families = new Set();
    let metricsOp = null;
    for (const rec of records) {
        const c = classify(spec, rec);
        const problems = check(spec, rec, c);
        let g = groups.get(c.key);
        if (!g) groups.set(c.key, (g = { n: 0, bad: 0, detail: [] }));
        g.n++;
        if (problems.length) {
            g.bad++;
            if (g.detail.length < 6)
                g.detail.push(`${rec.method} ${rec.url}: ${problems.slice(0, 4).join('; ')}`,
                              `  body: ${excerpt(rec.body)}`);
        }
        if (c.op && c.op.template === '/metrics' && rec.status === '200') {
            metricsOp = c.op;
            for (const f of metricFamilies(rec.body)) families.add(f);
        }
    }
    const lines = [];
    for (const [key, g] of groups) {
        const what = g.n === 1 ? '1 answer' : `${g.n} answers`;
        lines.push(g.bad === 0
            ? { ok: true, text: `api: ${key} (${what}) as the spec says`, detail: [] }
            : { ok: false, text: `api: ${key}: ${g.bad} of ${what} not as the spec says`, detail: g.detail });
    }
    if (metricsOp) {
        const missing = [...families].filter((f) => !new RegExp(`\\b${f}\\b`).test(metricsOp.description));
        lines.push(missing.length === 0
            ? { ok: true, text: `api: GET /metrics's description names all ${families.size} families served`, detail: [] }
            : { ok: false, text: `api: GET /metrics's description lacks ${missing.length} of the ${families.size} families served`,
                detail: [missing.join(', ')] });
    }
    return lines;
}

function print(lines) {
    for (const l of lines) {
        console.log(`${l.ok ? 'ok' : 'not ok'} - ${l.text}`);
        for (const d of l.detail) console.log(`#   ${d}`);
    }
    return lines.every((l) => l.ok);
}

// ---- self-check: the rules above on a small document, each case a record
// and whether it must pass.  Proves the check can fail, and fails where a
// looser one (JSON Schema's defaults) would not.
const SELF_SPEC = {
    openapi: '3.0.3',
    info: { title: 'self-check', version: '1' },
    paths: {
        '/v1/things/{id}': {
            get: {
                responses: {
                    200: { description: 'a thing', content: { 'application/json': { schema: { $ref: '#/components/schemas/Thing' } } } },
                    404: { $ref: '#/components/responses/NotFound' },
                },
            },
        },
        '/metrics': { get: { description: 'Families: shoal_a, shoal_b.', responses: { 200: { description: 'm', content: { 'text/plain': { schema: { type: 'string' } } } } } } },
    },
    components: {
        responses: { NotFound: { description: 'none', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } } },
        schemas: {
            Error: { type: 'object', additionalProperties: false, required: ['error'],
                     properties: { error: { type: 'object', required: ['code', 'message'],
                                            properties: { code: { type: 'string' }, message: { type: 'string' } } } } },
            JsonNull: { type: 'object', nullable: true, enum: [null] },
            Part: { type: 'object', properties: { x: { type: 'integer' } } },
            Thing: {
                type: 'object',   // no additionalProperties: closed
                required: ['id', 'name'],
                properties: {
                    id: { type: 'integer', format: 'int32' },
                    name: { type: 'string', nullable: true },
                    at: { type: 'string', format: 'date-time' },
                    kind: { type: 'string', nullable: true, enum: ['a', 'b'] },
                    loose: { nullable: true, allOf: [{ $ref: '#/components/schemas/Part' }] },
                    part: { oneOf: [{ $ref: '#/components/schemas/Part' }, { $ref: '#/components/schemas/JsonNull' }] },
                },
            },
        },
    },
};
const J = 'application/json';
const thing = (extra) => JSON.stringify({ id: 7, name: 'n', ...extra });
const SELF_CASES = [
    ['a documented answer passes', true, 'GET', '200', J, '/v1/things/7', thing({})],
    ['the same path without /v1 and with a trailing slash', true, 'GET', '200', `${J}; charset=utf-8`, '/things/7/', thing({})],
    ['an undocumented field fails (closed by default)', false, 'GET', '200', J, '/v1/things/7', thing({ extra: 1 })],
    ['an undocumented field in a nested object fails', false, 'GET', '200', J, '/v1/things/7', thing({ part: { x: 1, y: 2 } })],
    ['a wrong type fails', false, 'GET', '200', J, '/v1/things/7', thing({ id: '7' })],
    ['a missing required field fails', false, 'GET', '200', J, '/v1/things/7', JSON.stringify({ id: 7 })],
    ['null where nullable with a type passes', true, 'GET', '200', J, '/v1/things/7', thing({ name: null })],
    ['null where not nullable fails', false, 'GET', '200', J, '/v1/things/7', thing({ id: null })],
    ['null outside a nullable enum fails', false, 'GET', '200', J, '/v1/things/7', thing({ kind: null })],
    ['null where nullable has no type fails (3.0.3)', false, 'GET', '200', J, '/v1/things/7', thing({ loose: null })],
    ['null by oneOf [$ref, JsonNull] passes', true, 'GET', '200', J, '/v1/things/7', thing({ part: null })],
    ['a bad date-time fails', false, 'GET', '200', J, '/v1/things/7', thing({ at: 'yesterday' })],
    ['an int32 out of range fails', false, 'GET', '200', J, '/v1/things/7', thing({ id: 2 ** 31 })],
    ['an undocumented status fails', false, 'GET', '418', J, '/v1/things/7', thing({})],
    ['an undocumented Content-Type fails', false, 'GET', '200', 'text/html', '/v1/things/7', '<p>'],
    ['a body that is not JSON fails', false, 'GET', '200', J, '/v1/things/7', '{"id":7,'],
    ['a documented error passes', true, 'GET', '404', J, '/v1/things/8', '{"error":{"code":"not_found","message":"m"}}'],
    ['an unknown path\'s 404 error passes', true, 'GET', '404', J, '/v1/nothing', '{"error":{"code":"not_found","message":"m"}}'],
    ['another method\'s 405 error passes', true, 'PUT', '405', J, '/v1/things/7', '{"error":{"code":"method_not_allowed","message":"m"}}'],
    ['a router error that is not the Error schema fails', false, 'GET', '404', J, '/v1/nothing', '{"error":"none"}'],
].map(([name, pass, method, status, contentType, path, body]) =>
    ({ name, pass, rec: { method, status, contentType, url: `http://127.0.0.1:1${path}`, body } }));

function selfCheck(specPath) {
    const lines = [];
    const self = loadSpec(SELF_SPEC);
    for (const c of SELF_CASES) {
        const got = validate(self, [c.rec]).every((l) => l.ok);
        lines.push({ ok: got === c.pass, text: `api validator self-check: ${c.name}`,
                     detail: got === c.pass ? [] : [`the validator said ${got ? 'pass' : 'fail'}`] });
    }
    const metrics = (text) => validate(self, [{ method: 'GET', status: '200', contentType: 'text/plain; version=0.0.4',
                                                 url: 'http://h/metrics', body: text }]).every((l) => l.ok);
    const fams = '# TYPE shoal_a gauge\n# TYPE shoal_b counter\n';
    lines.push({ ok: metrics(fams) && !metrics(`${fams}# TYPE shoal_c gauge\n`),
                 text: 'api validator self-check: a /metrics family missing from the description fails', detail: [] });
    // The real document: it loads, and holds a record to it.
    try {
        const real = loadSpec(parseYaml(readFileSync(specPath, 'utf8')));
        const healthz = (body) => validate(real, [{ method: 'GET', status: '200', contentType: J,
                                                     url: 'http://h/healthz', body }]).every((l) => l.ok);
        lines.push({ ok: healthz('{"status":"ok"}') && !healthz('{"status":"ok","uptime_s":3}'),
                     text: `api validator self-check: ${specPath} compiles, and an undocumented field of /healthz fails`,
                     detail: [] });
    } catch (e) {
        lines.push({ ok: false, text: `api validator self-check: ${specPath} compiles`, detail: [e.message] });
    }
    return lines;
}

// ---- main
const args = process.argv.slice(2);
let good;
if (args[0] === '--self-check' && args.length === 2) {
    good = print(selfCheck(args[1]));
} else if (args.length >= 2 && !args[0].startsWith('-')) {
    const [specPath, ...logs] = args;
    let spec, records = [];
    try {
        spec = loadSpec(parseYaml(readFileSync(specPath, 'utf8')));
        for (const l of logs) records = records.concat(parseLog(readFileSync(l)));
    } catch (e) {
        console.log(`not ok - api: answers checked against ${specPath}: ${e.message}`);
        process.exit(1);
    }
    if (records.length === 0) {
        console.log(`not ok - api: answers checked against ${specPath}: the log holds none (was SHOAL_RESPONSE_LOG set?)`);
        process.exit(1);
    }
    const lines = validate(spec, records);
    let documented = 0;
    for (const op of spec.ops.values()) documented += Object.keys(op.responses).length;
    const seen = lines.filter((l) => /^api: [A-Z]+ \//.test(l.text)).length;
    console.log(`# ${records.length} answers from ${logs.join(' ')}: ${seen} (method, path, status) seen,` +
                ` of the ${documented} the spec documents`);
    good = print(lines);
} else {
    console.error('usage: validate_responses.mjs SPEC.yaml LOG... | --self-check SPEC.yaml');
    process.exit(2);
}
process.exit(good ? 0 : 1);
