/**
 * Requests Node hands over with their socket instead of answering them itself: an upgrade
 * ('upgrade') and a CONNECT ('connect'). No HTTP parser reads that socket any more; the gateway
 * routes the request through Fastify as the 'request' event would (so it is normalised, admitted and
 * decided like any other), on a response of its own that closes the connection once sent.
 *
 * Such a request may be pipelined behind answers still being written on the same connection. Node
 * hands it over at once all the same, and giving it the socket then would throw
 * ERR_HTTP_SOCKET_ASSIGNED out of the event listener, killing the process. So it waits for its turn:
 * once the answers before it are sent it is routed; if one of them closes the connection, the
 * request is dropped unanswered and never proxied, like any request pipelined behind a close.
 */
import { type IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';

/** The answer Node is writing on a connection, if any (undeclared in Node's types). */
function pendingAnswer(socket: Socket): ServerResponse | null | undefined {
  return (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
}

/** Routes a handed-over request once the answers before it on its connection are sent. */
export function routeHandedOver(
  app: FastifyInstance,
  req: IncomingMessage,
  duplex: Duplex,
  head: Buffer,
): void {
  const socket = duplex as Socket;
  // bytes the client sent after its head: whoever reads the socket next reads them first
  if (head.length > 0) socket.unshift(head);
  // Node stops handling errors on a handed-over socket; a reset client is seen as its 'close'
  socket.on('error', () => {});
  whenTurnComes(socket, () => {
    const response = new ServerResponse(req);
    response.shouldKeepAlive = false;
    response.assignSocket(socket);
    response.once('finish', () => socket.destroySoon());
    app.routing(req, response);
  });
}

function whenTurnComes(socket: Socket, route: () => void): void {
  if (socket.destroyed || socket.writableEnded) {
    // an answer before this one closed the connection: nobody would read this one's answer
    socket.destroy();
    return;
  }
  const before = pendingAnswer(socket);
  if (before == null) {
    route();
    return;
  }
  // Node's own 'finish' listener (registered first) has moved the connection on when ours runs
  const next = () => {
    before.off('finish', next);
    before.off('close', next);
    whenTurnComes(socket, route);
  };
  before.once('finish', next);
  before.once('close', next);
}
