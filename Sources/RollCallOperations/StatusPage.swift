/// The live status page at `GET /`: one HTML document with its script and style inline (the broker may have no
/// internet), polling `/api/status` every second and `/api/users/<id>` for the look-up box.
enum StatusPage {
    static let html = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>RollCall</title>
        <style>
          body { font: 15px/1.4 system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1d2330; }
          header { background: #1d2330; color: #fff; padding: 12px 24px; display: flex; gap: 16px; align-items: baseline; }
          header h1 { font-size: 20px; margin: 0; }
          header span { opacity: .7; font-size: 13px; }
          main { padding: 16px 24px; display: grid; gap: 16px; grid-template-columns: 1fr 1fr; }
          .tiles { grid-column: 1 / 3; display: grid; grid-template-columns: repeat(6, 1fr); gap: 12px; }
          .tile { background: #fff; border-radius: 8px; padding: 12px; box-shadow: 0 1px 2px #0001; }
          .tile b { display: block; font-size: 26px; }
          .tile small { color: #667; }
          section { background: #fff; border-radius: 8px; padding: 12px 16px; box-shadow: 0 1px 2px #0001; }
          h2 { font-size: 15px; margin: 0 0 8px; }
          table { width: 100%; border-collapse: collapse; font-size: 13px; }
          td { padding: 3px 6px; border-bottom: 1px solid #eee; white-space: nowrap; }
          .dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 6px; }
          .online { background: #22a35a; } .busy { background: #d93636; } .away { background: #e0a800; }
          .offline { background: #9aa0a8; }
          input { font: inherit; padding: 6px 8px; width: 60%; } button { font: inherit; padding: 6px 12px; }
          pre { background: #f3f4f6; padding: 8px; border-radius: 6px; white-space: pre-wrap; font-size: 12px; }
          #error { color: #d93636; }
        </style>
        </head>
        <body>
        <header><h1>RollCall</h1><span id="who">connecting…</span><span id="error"></span></header>
        <main>
          <div class="tiles">
            <div class="tile"><small>sessions</small><b id="sessions">–</b></div>
            <div class="tile"><small>users online</small><b id="users_available">–</b></div>
            <div class="tile"><small>changes / s</small><b id="rate">–</b></div>
            <div class="tile"><small>connections</small><b id="connections">–</b></div>
            <div class="tile"><small>subscribed topics</small><b id="subscriptions">–</b></div>
            <div class="tile"><small>groups</small><b id="groups">–</b></div>
          </div>
          <section><h2>Latest changes</h2><table id="recent"></table></section>
          <section id="webhooks-section" hidden><h2>Webhooks</h2><table id="webhooks"></table></section>
          <section><h2>Look up a user</h2>
            <form id="lookup"><input id="user" placeholder="user id, such as alice" autocomplete="off">
            <button>Look up</button></form><div id="found"></div></section>
        </main>
        <script>
        "use strict";
        let last = null;
        const $ = (id) => document.getElementById(id);
        function row(r) {
          const tr = document.createElement("tr");
          const when = new Date(r.since || 0).toLocaleTimeString();
          for (const [text, dot] of [[r.user, r.status], [r.status + (r.reason ? " (" + r.reason + ")" : ""), null],
                                     [r.text || "", null], [r.sessions + (r.sessions === 1 ? " session" : " sessions"), null],
                                     [when, null]]) {
            const td = document.createElement("td");
            if (dot) { const d = document.createElement("span"); d.className = "dot " + dot; td.appendChild(d); }
            td.appendChild(document.createTextNode(text));
            tr.appendChild(td);
          }
          return tr;
        }
        function webhook(w) {
          const tr = document.createElement("tr");
          const state = w.failures === 0 ? "ok" : "failing (" + w.failures + " attempts: " + (w.last_error || "") + ")";
          const by = w.delivering ? (w.holder ? "delivered here (" + w.holder + ")" : "")
                                  : "delivered by " + (w.holder || "a node etcd cannot name now");
          for (const [text, dot] of [[w.url, w.failures === 0 ? "online" : "busy"], [w.type, null], [by, null],
                                     [w.pending.toLocaleString() + " pending", null],
                                     ["after offset " + w.acknowledged, null],
                                     [w.delivered_batches.toLocaleString() + " batches", null],
                                     [w.skipped_batches ? w.skipped_batches + " skipped" : "", null],
                                     [w.trimmed_gaps ? w.trimmed_gaps + " trimmed before delivery" : "", null],
                                     [state, null]]) {
            const td = document.createElement("td");
            if (dot) { const d = document.createElement("span"); d.className = "dot " + dot; td.appendChild(d); }
            td.appendChild(document.createTextNode(text));
            tr.appendChild(td);
          }
          return tr;
        }
        async function refresh() {
          try {
            const response = await fetch("/api/status", { cache: "no-store" });
            if (!response.ok) throw new Error(await response.text());
            const s = await response.json();
            $("who").textContent = s.broker + " · epoch " + s.epoch;
            $("error").textContent = "";
            for (const k of ["sessions", "users_available", "connections", "subscriptions", "groups"]) {
              $(k).textContent = s[k].toLocaleString();
            }
            if (last && s.epoch === last.epoch && s.time > last.time) {
              $("rate").textContent = Math.round((s.published - last.published) * 1000 / (s.time - last.time)).toLocaleString();
            }
            last = s;
            const table = $("recent");
            table.replaceChildren(...s.recent.slice().reverse().map(row));
            $("webhooks-section").hidden = s.webhooks.length === 0;
            $("webhooks").replaceChildren(...s.webhooks.map(webhook));
          } catch (e) {
            $("error").textContent = "broker not answering: " + e.message;
          }
        }
        $("lookup").addEventListener("submit", async (event) => {
          event.preventDefault();
          const user = $("user").value.trim();
          const response = await fetch("/api/users/" + encodeURIComponent(user), { cache: "no-store" });
          const found = $("found");
          found.replaceChildren();
          if (!response.ok) { found.textContent = await response.text(); return; }
          const view = await response.json();
          const table = document.createElement("table");
          table.appendChild(row(view.record));
          found.appendChild(table);
          const groups = document.createElement("p");
          groups.textContent = view.groups.length ? "groups: " + view.groups.join(", ") : "in no group";
          found.appendChild(groups);
          const raw = document.createElement("pre");
          raw.textContent = JSON.stringify(view.record);
          found.appendChild(raw);
        });
        refresh();
        setInterval(refresh, 1000);
        </script>
        </body>
        </html>
        """#
}
