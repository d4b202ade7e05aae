// Verifies a RollCall webhook (docs/webhooks.md): Standard Webhooks, symmetric v1 signatures.
const crypto = require("node:crypto");

// body: the raw request body (a Buffer), before any JSON parsing.
function verify(secret, headers, body, toleranceS = 300) {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const signed = Buffer.concat([Buffer.from(`${headers["webhook-id"]}.${headers["webhook-timestamp"]}.`), body]);
  const expected = crypto.createHmac("sha256", key).update(signed).digest();
  if (Math.abs(Date.now() / 1000 - Number(headers["webhook-timestamp"])) > toleranceS) return false;
  return headers["webhook-signature"].split(" ").some((s) => {
    const given = Buffer.from(s.slice(3), "base64");
    return s.startsWith("v1,") && given.length === expected.length && crypto.timingSafeEqual(given, expected);
  });
}

module.exports = { verify };

if (require.main === module) {
  // node webhook-verify.js SECRET ID TIMESTAMP SIGNATURE < body: exit status 0 if it verifies.
  const [secret, id, timestamp, signature] = process.argv.slice(2);
  const headers = { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signature };
  process.exit(verify(secret, headers, require("node:fs").readFileSync(0)) ? 0 : 1);
}
