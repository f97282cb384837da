/** The `type` of an OpenAI error object, by HTTP status. */
function errorType(status: number): string {
  // OpenAI answers a missing or wrong key with an invalid_request_error (code invalid_api_key).
  if (status === 401) return 'invalid_request_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'rate_limit_exceeded';
  if (status === 503) return 'service_unavailable';
  return status >= 500 ? 'server_error' : 'invalid_request_error';
}

/**
 * An error the server answers with, as an OpenAI error object
 * (`{"error": {"message", "type", "param", "code"}}`) so OpenAI clients raise their usual errors.
 */
export class ApiError extends Error {
  readonly status: number;
  /** The request field at fault (`messages[0].content`), or null. */
  readonly param: string | null;
  readonly code: string | null;

  constructor(status: number, message: string, options: { param?: string | null; code?: string | null } = {}) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.param = options.param ?? null;
    this.code = options.code ?? null;
  }

  toBody(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: errorType(this.status), param: this.param, code: this.code } };
  }
}

export const notReady = (state: string, failure?: Error): ApiError =>
  state === 'failed'
    ? new ApiError(503, `the engine failed${failure ? ` (${failure.message})` : ''} and serves nothing more; restart the server`, { code: 'engine_failed' })
    : new ApiError(503, `the model is ${state === 'loading' || state === 'starting' ? 'still loading' : state}; retry when /health answers 200`, { code: 'model_not_ready' });
