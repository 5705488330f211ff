/**
 * Client keys for the gateway: the shared spelling (`@sluice/shared` http/client-key.ts) plus the ip
 * key of a socket peer, which never changes and so is computed once per connection.
 */
import type { Socket } from 'node:net';
import { ipClientKey } from '@sluice/shared';

export {
  boundedKey,
  forwardedClientIp,
  GLOBAL_CLIENT_KEY,
  headerClientKey,
  ipClientKey,
  MAX_CLIENT_KEY_BYTES,
  parseIPv6,
} from '@sluice/shared';

const kSocketIpKey = Symbol('sluice.socketIpKey');
type KeyedSocket = Socket & { [kSocketIpKey]?: string };

/** The ip key of the socket peer, cached on the socket. */
export function socketIpKey(socket: Socket): string {
  const keyed = socket as KeyedSocket;
  let key = keyed[kSocketIpKey];
  if (key === undefined) {
    key = ipClientKey(socket.remoteAddress);
    keyed[kSocketIpKey] = key;
  }
  return key;
}
