/**
 * The one JSON body parser of the rules API. Besides parsing, it refuses what would otherwise get
 * through validation and break later, for every value of the body (today's fields, nested ones and
 * whatever a future rule field adds):
 *
 * - a string (or key) Postgres cannot store: one holding U+0000 or a lone surrogate (`"\ud800"`),
 *   see `whyNotStorable`; the write would otherwise fail with a 500 or change the text;
 * - a key `__proto__` or `constructor`: names every JavaScript object has; code that copies such a
 *   key into an object can change the object's prototype (prototype pollution). No rule field has
 *   either name.
 * - a `Content-Encoding` other than `identity` (415): bodies are small, and decoding gzip would put
 *   an inflater (and its size limits) in front of every write for nothing.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { UnsupportedEncodingError, ValidationError } from '../errors.js';
import { whyNotStorable } from './storable-string.js';

/** Keys refused anywhere in a body, with the reason the 400 gives. */
const REFUSED_KEYS: ReadonlyMap<string, string> = new Map([
  ['__proto__', 'it would set the prototype of the object that receives it'],
  ['constructor', 'it names the constructor every JavaScript object has'],
]);

/** A value met by the walk, with how it was reached (the path is only spelled out for a refusal). */
interface Visit {
  value: unknown;
  parent: Visit | undefined;
  key: string | number;
}

/** `body/match/path`: JSON-pointer steps (`~` and `/` escaped), as the schema errors print them. */
function pathOf(visit: Visit): string {
  const steps: string[] = [];
  for (let at: Visit | undefined = visit; at; at = at.parent) {
    steps.push(at.parent ? String(at.key).replaceAll('~', '~0').replaceAll('/', '~1') : String(at.key));
  }
  return steps.reverse().join('/');
}

/**
 * The first value of a parsed JSON body that the API refuses, as the message of a 400
 * (`body/match/path must not contain …`), or `undefined` when there is none. Walks in document
 * order with an explicit stack, so a deeply nested body cannot overflow the call stack.
 */
export function refusedBodyValue(body: unknown, dataVar = 'body'): string | undefined {
  const stack: Visit[] = [{ value: body, parent: undefined, key: dataVar }];
  while (stack.length > 0) {
    const visit = stack.pop()!;
    const { value } = visit;
    if (typeof value === 'string') {
      const problem = whyNotStorable(value);
      if (problem) return `${pathOf(visit)} ${problem}`;
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], parent: visit, key: i });
    } else if (typeof value === 'object' && value !== null) {
      const keys = Object.keys(value);
      for (let i = keys.length - 1; i >= 0; i--) {
        const key = keys[i]!;
        const why = REFUSED_KEYS.get(key);
        if (why) return `${pathOf(visit)} must not have the key '${key}': ${why}`;
        const problem = whyNotStorable(key);
        if (problem) return `${pathOf(visit)} has a key that ${problem}`;
        stack.push({ value: (value as Record<string, unknown>)[key], parent: visit, key });
      }
    }
  }
  return undefined;
}

/** The content codings of a request other than `identity`, lower case; empty when none. */
export function contentCodings(request: FastifyRequest): string[] {
  const header = request.headers['content-encoding'];
  if (header === undefined) return [];
  return header
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
}

/**
 * Makes `application/json` the only body type (others: 415 from Fastify). An empty body with
 * `Content-Type: application/json` (a DELETE from a client that always sets the header) is no body
 * rather than a 400.
 */
export function registerJsonBodyParser(app: FastifyInstance): void {
  // Prototype keys are let through the parse (as own properties, which JSON.parse makes them) so
  // that the walk below can name the key instead of Fastify's "Body is not valid JSON".
  const parseJson = app.getDefaultJsonParser('ignore', 'ignore');
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '') return done(null, undefined);
    const codings = contentCodings(request);
    if (codings.length > 0) return done(new UnsupportedEncodingError(codings.join(', ')), undefined);
    return parseJson(request, body as string, (err, parsed) => {
      if (err) return done(err, undefined);
      const refused = refusedBodyValue(parsed);
      return refused ? done(new ValidationError(refused), undefined) : done(null, parsed);
    });
  });
}
