import type { Socket } from 'node:net';
import type { ConnectionError } from 'fastify';
import { ApiError } from './api-error.js';

/**
 * Answers what fails before a request reaches a route (node's HTTP parser, the request timeout)
 * with an OpenAI error object, as every other answer of the server, then closes the connection.
 */
export function connectionErrorHandler(requestTimeoutMs: number): (error: ConnectionError, socket: Socket) => void {
  return (error, socket) => {
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    let api: ApiError;
    if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      api = new ApiError(408, `the request did not arrive within ${requestTimeoutMs / 1000} s; send it faster, or ask the operator to raise --request-timeout`, { code: 'request_timeout' });
    } else if (error.code === 'HPE_HEADER_OVERFLOW') {
      api = new ApiError(431, 'the request headers are too large', { code: 'headers_too_large' });
    } else {
      api = new ApiError(400, `malformed HTTP request (${error.code})`, { code: 'bad_request' });
    }
    const body = JSON.stringify(api.toBody());
    const reason = api.status === 408 ? 'Request Timeout' : api.status === 431 ? 'Request Header Fields Too Large' : 'Bad Request';
    if (socket.writable) {
      socket.write(`HTTP/1.1 ${api.status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    }
    socket.destroy();
  };
}
