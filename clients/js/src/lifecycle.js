/**
 * Tab lifecycle (browser only, opt-in with `lifecycle: true` or `{hidden, afterMs}`): when the page is hidden, every
 * session asks for `hidden` ("away" by default) held by the broker for `afterMs` (5,000 by default); when it is
 * visible again, each goes back to the status it had, which cancels the held change at the broker, so switching
 * tabs for less than `afterMs` publishes nothing at all. `pagehide` says bye. Returns the function that stops it.
 */
export function watchLifecycle(rc, { hidden = "away", afterMs = 5000 } = {}, doc = globalThis.document, win = globalThis.window) {
  if (!doc?.addEventListener || !win?.addEventListener) return () => {};
  const onVisibility = () => {
    if (doc.visibilityState === "hidden") {
      for (const session of rc.sessions) session._hide(hidden, afterMs);
    } else {
      for (const session of rc.sessions) session._show();
      rc.reconnectNow(); // timers may have slept while hidden: check the connection now
    }
  };
  const onPagehide = () => {
    for (const session of rc.sessions) session._byeNow();
  };
  doc.addEventListener("visibilitychange", onVisibility);
  win.addEventListener("pagehide", onPagehide);
  if (doc.visibilityState === "hidden") queueMicrotask(onVisibility);
  return () => {
    doc.removeEventListener("visibilitychange", onVisibility);
    win.removeEventListener("pagehide", onPagehide);
  };
}
