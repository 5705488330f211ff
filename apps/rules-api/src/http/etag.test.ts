import { describe, expect, it } from 'vitest';
import { etagOf, parseTagCondition, tagMatches } from './etag.js';

describe('entity tags', () => {
  it('are the version in quotes', () => {
    expect(etagOf(3)).toBe('"3"');
  });

  it.each([
    [undefined, undefined],
    ['', undefined],
    ['   ', undefined],
    ['*', { any: true }],
    ['"3"', { any: false, versions: [3] }],
    ['W/"3"', { any: false, versions: [3] }],
    ['3', { any: false, versions: [3] }],
    ['"1", W/"2" ,"3"', { any: false, versions: [1, 2, 3] }],
    ['"abc"', { any: false, versions: [] }],
    ['"-1"', { any: false, versions: [] }],
    ['"1e3"', { any: false, versions: [] }],
    ['garbage, "4"', { any: false, versions: [4] }],
    [['"5"', '"6"'], { any: false, versions: [5, 6] }],
  ])('parse %j', (header, expected) => {
    expect(parseTagCondition(header)).toEqual(expected);
  });

  it('match by version; * matches anything; a tag naming no version matches nothing', () => {
    expect(tagMatches(parseTagCondition('"3"')!, 3)).toBe(true);
    expect(tagMatches(parseTagCondition('"3"')!, 4)).toBe(false);
    expect(tagMatches(parseTagCondition('*')!, 99)).toBe(true);
    expect(tagMatches(parseTagCondition('"x"')!, 0)).toBe(false);
  });
});
