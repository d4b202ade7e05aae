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
