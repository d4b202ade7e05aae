/** An error from the broker (its `code` and `message`), or from the client itself (`disconnected`, `timeout`,
 * `closed`, `unauthorized`, `token_expired`). */
export class RollCallError extends Error {
  /**
   * @param {string} code a stable code: the broker's (docs/protocol.md §7) or one of the client's own
   * @param {string} message for people
   */
  constructor(code, message) {
    super(message);
    this.name = "RollCallError";
    this.code = code;
  }
}

/** The error a reply's `{"ok":false,"error":{code,message}}` stands for. */
export function errorOf(reply) {
  const error = reply?.error ?? {};
  return new RollCallError(String(error.code ?? "unknown"), String(error.message ?? "the broker refused the request"));
}

/** An exception from the application's own callback: reported where the platform reports uncaught errors (the
 * browser's `reportError`, else thrown from a microtask), so that it neither disappears nor breaks the client. */
export function report(error) {
  if (typeof globalThis.reportError === "function") globalThis.reportError(error);
  else
    queueMicrotask(() => {
      throw error;
    });
}

/** Calls the application's `fn(...args)`; an exception is reported, not thrown at the caller. */
export function callSafely(fn, ...args) {
  try {
    fn(...args);
  } catch (error) {
    report(error);
  }
}
