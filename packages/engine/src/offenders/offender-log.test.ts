import { describe, expect, it } from 'vitest';
import { OffenderLog } from './offender-log.js';

const MINUTE_MS = 60_000;

function logAt(startMs = 1_700_000_000_000, capacity?: number) {
  let now = startMs;
  const log = new OffenderLog({ nowMs: () => now, capacity });
  const deny = (clientKey: string, times = 1, limit = 'burst', shadow = false) => {
    for (let i = 0; i < times; i++) log.record({ rule: 'r', ruleId: 'id-r', limit, clientKey, shadow });
  };
  return { log, deny, advance: (ms: number) => (now += ms) };
}

describe('OffenderLog', () => {
  it('sums the minutes asked for, most denied first, separately per limit and shadow flag', () => {
    const { log, deny, advance } = logAt();
    deny('header:a', 3);
    deny('header:b', 1);
    advance(2 * MINUTE_MS);
    deny('header:a', 2);
    deny('header:b', 1, 'daily');
    deny('ip:10.0.0.1', 4, '', true);
    expect(log.top('id-r', 15)).toEqual([
      { client: 'header:a', limit: 'burst', denied: 5, shadow: false },
      { client: 'ip:10.0.0.1', limit: '', denied: 4, shadow: true },
      { client: 'header:b', limit: 'burst', denied: 1, shadow: false },
      { client: 'header:b', limit: 'daily', denied: 1, shadow: false },
    ]);
    // only this minute
    expect(log.top('id-r', 1).map((i) => [i.client, i.denied])).toEqual([
      ['ip:10.0.0.1', 4],
      ['header:a', 2],
      ['header:b', 1],
    ]);
    expect(log.top('other', 15)).toEqual([]);
  });

  it('forgets minutes older than 60 and lists at most 20', () => {
    const { log, deny, advance } = logAt();
    for (let i = 0; i < 30; i++) deny(`header:k${i}`, i + 1);
    expect(log.top('id-r', 60)).toHaveLength(20);
    expect(log.top('id-r', 60)[0]).toMatchObject({ client: 'header:k29', denied: 30 });
    advance(59 * MINUTE_MS);
    expect(log.top('id-r', 60)).toHaveLength(20);
    advance(MINUTE_MS);
    deny('header:new');
    expect(log.top('id-r', 60)).toEqual([{ client: 'header:new', limit: 'burst', denied: 1, shadow: false }]);
  });

  it('hands over what was recorded since the last flush, once', () => {
    const { log, deny } = logAt();
    deny('header:a', 3);
    const first = log.takeUnflushed();
    expect([...first.get('id-r')!.values()].map((members) => [...members.values()])).toEqual([[3]]);
    expect(log.takeUnflushed().size).toBe(0);
    deny('header:a');
    expect([...log.takeUnflushed().get('id-r')!.values()].map((members) => [...members.values()])).toEqual([
      [1],
    ]);
    // the local view keeps everything
    expect(log.top('id-r', 15)[0]!.denied).toBe(4);
  });
});
