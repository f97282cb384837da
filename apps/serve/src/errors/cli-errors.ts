import { MetraleError } from '@metrale/core';

/** The command line itself is wrong (a bad option value, a missing argument): exit code 2. */
export class UsageError extends MetraleError {}

/** A backend asked for by name cannot run on this machine; the message carries its probe's reason. */
export class BackendUnavailableError extends MetraleError {
  readonly backend: string;
  readonly reason: string;
  constructor(backend: string, reason: string) {
    super(`--backend ${backend}: ${backend} is not available on this machine: ${reason}; use --backend cpu, or auto to pick what is available`);
    this.backend = backend;
    this.reason = reason;
  }
}
