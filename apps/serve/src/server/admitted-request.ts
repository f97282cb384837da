import type { FastifyReply } from 'fastify';
import type { AdmissionTicket } from './admission.js';
import { RequestLifetime } from './request-lifetime.js';
import type { ServerContext } from './server-context.js';

/**
 * A generation request past validation: admitted first (429 when the queue is full, before any
 * tokenization or template work), then `work` runs under the request's lifetime (client gone,
 * generation deadline). The place in the queue is given back however `work` ends.
 */
export async function runAdmitted<T>(
  ctx: ServerContext, reply: FastifyReply, generations: number, arrived: number,
  work: (lifetime: RequestLifetime, ticket: AdmissionTicket) => Promise<T>,
): Promise<T> {
  const ticket = ctx.admission.enter(generations);
  const lifetime = new RequestLifetime(reply, ctx.limits.generationTimeoutMs, arrived);
  try {
    return await work(lifetime, ticket);
  } finally {
    lifetime.dispose();
    ticket.release();
  }
}
