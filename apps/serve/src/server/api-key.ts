import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ApiError } from './api-error.js';

/** Paths anyone may read, as in vLLM: probes and scrapers carry no key. */
const OPEN_PATHS = new Set(['/health', '/metrics']);

/**
 * The keys a server accepts: every `--api-key`, else `METRALE_API_KEY`, else `VLLM_API_KEY` (so a
 * vLLM deployment's environment works unchanged). Empty: no key is asked for.
 */
export function apiKeysFrom(cli: readonly string[] | undefined, env: NodeJS.ProcessEnv): string[] {
  if (cli && cli.length > 0) return [...cli];
  const fromEnv = env.METRALE_API_KEY || env.VLLM_API_KEY;
  return fromEnv ? [fromEnv] : [];
}

const digest = (key: string): Buffer => createHash('sha256').update(key, 'utf8').digest();

/**
 * Bearer-key authentication as OpenAI's API and vLLM answer it: every path but /health and
 * /metrics needs `Authorization: Bearer <key>`; without it, a 401 OpenAI error object. Keys are
 * compared as SHA-256 digests in constant time, so neither their content nor their length leaks
 * through timing.
 */
export class ApiKeyCheck {
  readonly #digests: Buffer[];

  constructor(keys: readonly string[]) {
    this.#digests = keys.map(digest);
  }

  get required(): boolean {
    return this.#digests.length > 0;
  }

  /** Throws the 401 when `request` needs a key and does not carry a valid one. */
  check(request: Pick<FastifyRequest, 'url' | 'headers'>): void {
    if (!this.required) return;
    const path = request.url.split('?', 1)[0]!;
    if (OPEN_PATHS.has(path)) return;
    const header = request.headers.authorization;
    const [scheme, ...rest] = (header ?? '').split(' ');
    if (!header || scheme!.toLowerCase() !== 'bearer') {
      throw new ApiError(401, "You didn't provide an API key. Send it in an Authorization header using Bearer auth (Authorization: Bearer YOUR_KEY); OpenAI clients do so with their api_key setting.", { code: 'invalid_api_key' });
    }
    const given = digest(rest.join(' '));
    let match = false;
    // Every key is compared, whichever matches, so the time taken says nothing about which.
    for (const d of this.#digests) match = timingSafeEqual(given, d) || match;
    if (!match) throw new ApiError(401, 'Incorrect API key provided. Use the key the server was started with (--api-key, METRALE_API_KEY or VLLM_API_KEY).', { code: 'invalid_api_key' });
  }
}
