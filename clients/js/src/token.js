/** A JWT's `exp` in ms since 1970, or null when the token has none or cannot be read (the broker checks it anyway:
 * this is only to know when to ask for a fresh one). */
export function tokenExpiry(token) {
  if (typeof token !== "string") return null;
  const part = token.split(".")[1];
  if (!part) return null;
  try {
    const base64 = part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "=");
    const claims = JSON.parse(atob(base64));
    return typeof claims.exp === "number" ? claims.exp * 1000 : null;
  } catch {
    return null;
  }
}

/** When to ask for a fresh token: a quarter of its remaining lifetime before `exp`, at least 1 s and at most 60 s
 * before it (the Swift client's rule, docs/websocket.md §9.1). */
export function refreshTime(now, expMs) {
  const lead = Math.min(60000, Math.max(1000, (expMs - now) / 4));
  return Math.max(now, expMs - lead);
}
