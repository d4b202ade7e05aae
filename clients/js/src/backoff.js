/** Capped, jittered exponential backoff (protocol.md §10.5): `initialMs`, doubling up to `maxMs`, each delay made
 * random within ±`jitter` so that many clients do not return in lockstep after a broker restart. */
export class Backoff {
  /** @param {{initialMs?: number, maxMs?: number, jitter?: number, random?: () => number}} [options] */
  constructor({ initialMs = 500, maxMs = 30000, jitter = 0.2, random = Math.random } = {}) {
    this.initialMs = initialMs;
    this.maxMs = maxMs;
    this.jitter = jitter;
    this.random = random;
    this.failures = 0;
  }

  /** The delay before the next attempt, in ms. */
  next() {
    const base = Math.min(this.maxMs, this.initialMs * 2 ** Math.min(this.failures, 30));
    this.failures += 1;
    return Math.round(base * (1 - this.jitter + 2 * this.jitter * this.random()));
  }

  /** An attempt succeeded: start again from `initialMs`. */
  reset() {
    this.failures = 0;
  }
}
