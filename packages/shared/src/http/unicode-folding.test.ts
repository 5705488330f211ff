/**
 * Unicode folding in matching (SPEC §4): rules see a path in its NFKC form without default-ignorable
 * code points, so fullwidth letters and zero-width characters cannot spell a limited path past its
 * rule; a path whose folded form cannot be normalised safely is refused.
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compileRules } from '../rules/match.js';
import { storedRule } from '../rules/stored-rule.js';
import { foldText } from './fold-text.js';
import { matchingPath, normalizePath } from './normalize-path.js';

/** What rules see of a raw target; throws when the target is refused. */
function seenByRules(target: string): string {
  const normalized = normalizePath(target);
  if (!normalized.ok) throw new Error(`${target}: ${normalized.code}`);
  return matchingPath(normalized.path);
}

const codeOf = (target: string) => {
  const normalized = normalizePath(target);
  return normalized.ok ? 'ok' : normalized.code;
};

/** a rule as the rules API stores it (checked, defaults, an id) */
const rule = storedRule;

describe('Unicode folding: what rules see', () => {
  it('folds fullwidth letters and drops zero-width characters, raw or percent-encoded', () => {
    expect(seenByRules('/ｓecret/x')).toBe('/secret/x');
    expect(seenByRules('/%EF%BD%93ecret/x')).toBe('/secret/x');
    expect(seenByRules('/%ef%bd%93ecret/x')).toBe('/secret/x');
    expect(seenByRules('/se%E2%80%8Bcret/x')).toBe('/secret/x'); // zero-width space
    expect(seenByRules('/se\u200dcret/x')).toBe('/secret/x'); // zero-width joiner
    expect(seenByRules('/%C2%ADsecret')).toBe('/secret'); // soft hyphen
    expect(seenByRules('/%EF%BB%BFsecret')).toBe('/secret'); // BOM
    expect(seenByRules('/%EF%BE%A0secret')).toBe('/secret'); // halfwidth Hangul filler, NFKC → U+1160
    expect(seenByRules('/ﬁle')).toBe('/file'); // ligature
    // a decomposed letter composes: `e` + U+0301 is the `é` of a rule path
    expect(seenByRules('/cafe%CC%81/a')).toBe('/caf%C3%A9/a');
    // what folding makes of the segments is normalised again: dot segments, empty segments
    expect(seenByRules('/x/.%E2%80%8B/secret')).toBe('/x/secret');
    expect(seenByRules('/%E2%80%8B/secret')).toBe('/secret');
    // characters NFKC turns into reserved ASCII stay literal: `？` is `%3F`, never a query
    expect(seenByRules('/secret%EF%BC%9Fx')).toBe('/secret%3Fx');
    // plain ASCII and text NFKC leaves alone are returned as they are (the same string)
    expect(seenByRules('/a%20b/%C3%BC')).toBe('/a%20b/%C3%BC');
  });

  it('refuses a path whose folded form cannot be normalised safely', () => {
    expect(codeOf('/x/..%E2%80%8B/x')).toBe('PATH_DOT_DOT_NAME'); // refused as sent: `..` starts the name
    expect(codeOf('/%EF%BC%8561dmin')).toBe('PATH_UNSAFE_UNICODE'); // `％61` folds to the escape `%61`
    expect(codeOf('/admin%EF%BC%9Bx')).toBe('PATH_UNSAFE_UNICODE'); // `；` folds to `;`
    expect(codeOf('/admin%E2%80%8B./x')).toBe('PATH_TRAILING_DOT_OR_SPACE'); // already refused as sent
  });

  it('matches a /secret/** rule for every folded spelling, and a fullwidth rule path for plain requests', () => {
    const secret = rule({
      name: 'secret',
      match: { path: '/secret/**' },
      limit: { capacity: 1, refill: 1, period: '1s' },
    });
    const wide = rule({
      name: 'wide',
      match: { path: '/ｗide/*' },
      limit: { capacity: 1, refill: 1, period: '1s' },
    });
    const rules = compileRules([secret, wide]);
    const match = (target: string) => {
      const normalized = normalizePath(target);
      if (!normalized.ok) throw new Error(target);
      return rules.match({ method: 'GET', host: undefined, path: normalized.path })?.name;
    };
    for (const target of [
      '/secret/a',
      '/ｓecret/a',
      '/%EF%BD%93ecret/a',
      '/se%E2%80%8Bcret/a',
      '/ｓｅｃｒｅｔ',
      '/secret%E2%80%8B/a',
    ]) {
      expect(match(target), target).toBe('secret');
    }
    expect(match('/wide/a')).toBe('wide');
    expect(match('/ｗide/a')).toBe('wide');
    expect(match('/Secret/a')).toBeUndefined();
  });
});

// ---------------------------------------------------------------- property

/** Ways to write one ASCII letter that fold back to it: fullwidth, mathematical, with zero-width company. */
const ZERO_WIDTH = ['\u200b', '\u200c', '\u200d', '\u2060', '\ufeff', '\u00ad', '\u034f', '\u180e'];
const spelling = (letter: string): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 3, arbitrary: fc.constant(letter) },
    fc.constant(String.fromCodePoint(letter.codePointAt(0)! - 0x61 + 0xff41)), // fullwidth
    fc.constant(String.fromCodePoint(letter.codePointAt(0)! - 0x61 + 0x1d41a)), // mathematical bold
    fc.constantFrom(...ZERO_WIDTH).map((zw) => `${zw}${letter}`),
    fc.constantFrom(...ZERO_WIDTH).map((zw) => `${letter}${zw}`),
  );
/** Either the raw text or its percent-encoded UTF-8 (lower or upper case hex). */
const encoded = (text: string): fc.Arbitrary<string> =>
  fc.constantFrom(
    text,
    encodeURIComponent(text),
    encodeURIComponent(text)
      .toLowerCase()
      .replace(/%[0-9a-f]{2}/g, (e) => e),
  );

describe('Unicode folding: property', () => {
  it('every spelling of a plain lower-case path built from folding forms is seen by rules as the plain path', () => {
    const plainPath = fc.array(fc.stringMatching(/^[a-z]{1,6}$/), { minLength: 1, maxLength: 4 });
    fc.assert(
      fc.property(
        plainPath.chain((segments) =>
          fc.tuple(
            fc.constant(segments),
            fc.tuple(
              ...segments.map((segment) =>
                fc.tuple(...[...segment].map(spelling)).chain((letters) => encoded(letters.join(''))),
              ),
            ),
          ),
        ),
        ([segments, spelt]) => {
          const plain = `/${segments.join('/')}`;
          expect(seenByRules(`/${spelt.join('/')}`)).toBe(plain);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('folding is stable: what rules see folds to itself', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 12 }), (text) => {
        const normalized = normalizePath(`/${encodeURIComponent(text)}`);
        if (!normalized.ok) return;
        const seen = matchingPath(normalized.path);
        expect(foldText(decodeURIComponent(seen))).toBe(decodeURIComponent(seen));
      }),
      { numRuns: 1000 },
    );
  });
});
