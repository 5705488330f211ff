/**
 * Redis Cluster: which checks of a request can share one script call. Keys whose hash tags are equal
 * live in one slot (that is what `limitKey`'s `{<ruleId>:<clientKey>}` is for); keys with different tags
 * are put in different calls, even when they happen to share a slot (then one call more, never a
 * CROSSSLOT error).
 */

/** The part of `key` Redis Cluster hashes: the first non-empty `{…}`, else the whole key. */
export function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) return key.slice(open + 1, close);
  }
  return key;
}

/**
 * The indexes of `keys` grouped by hash tag, groups in the order of their first key, indexes in order
 * within each group: a request's limits are decided group by group in the rule's order.
 */
export function slotGroups(keys: readonly string[]): number[][] {
  const byTag = new Map<string, number[]>();
  for (let i = 0; i < keys.length; i++) {
    const tag = hashTagOf(keys[i]!);
    const group = byTag.get(tag);
    if (group) group.push(i);
    else byTag.set(tag, [i]);
  }
  return [...byTag.values()];
}

/** Redis Cluster's number of hash slots. */
export const HASH_SLOTS = 16_384;

const encoder = new TextEncoder();

/** CRC16-CCITT (XModem), the checksum Redis Cluster hashes keys with. */
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The hash slot of `key` (`CLUSTER KEYSLOT`): what batching groups a Cluster's requests by. */
export function slotOf(key: string): number {
  return crc16(encoder.encode(hashTagOf(key))) % HASH_SLOTS;
}
