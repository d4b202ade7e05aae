// RollCall's JavaScript client: presence over the broker's WebSocket (docs/javascript.md). No dependencies, no
// build step: `import { RollCall } from "rollcall-client"` in Node 20+, or `<script type="module">` in a browser.
export { RollCall } from "./client.js";
export { Session } from "./session-handle.js";
export { RollCallError } from "./errors.js";
export { Store } from "./store.js";
// The state machines, for tests and for other transports: no sockets, no timers.
export { ConnectionMachine } from "./connection.js";
export { SessionMachine } from "./session.js";
export { WatchMachine } from "./watch.js";
export { Backoff } from "./backoff.js";
export { tokenExpiry, refreshTime } from "./token.js";
