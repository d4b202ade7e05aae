/** Waits until `check()` returns something truthy, looking again on every event loop turn (at most every 10 ms);
 * fails with `what` after `timeoutMs`. Every wait in the tests has such a deadline. */
export async function until(check, what, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${describe(last)})`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A list that records what a callback received, with `next(predicate)` to wait for the first match after `from`. */
export class Recorder {
  constructor() {
    this.items = [];
    this.fn = (item) => this.items.push(item);
  }

  async find(predicate, what, timeoutMs = 10000, from = 0) {
    return until(() => this.items.slice(from).find(predicate), what, timeoutMs);
  }
}

function describe(value) {
  if (value instanceof Error) return value.message;
  try {
    return JSON.stringify(value)?.slice(0, 300);
  } catch {
    return String(value);
  }
}

/** `promise`, or a failure naming `what` after `timeoutMs`. */
export function within(promise, what, timeoutMs = 10000) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
