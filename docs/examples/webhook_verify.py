"""Verifies a RollCall webhook (docs/webhooks.md): Standard Webhooks, symmetric v1 signatures."""
import base64, hashlib, hmac, sys, time


def verify(secret: str, headers: dict, body: bytes, tolerance_s: int = 300) -> bool:
    """True if a v1 entry of webhook-signature signs "id.timestamp.body" with the whsec_ secret, sent recently."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    fresh = abs(time.time() - int(headers["webhook-timestamp"])) <= tolerance_s
    return fresh and any(hmac.compare_digest(s[3:], expected)
                         for s in headers["webhook-signature"].split() if s.startswith("v1,"))


if __name__ == "__main__":
    # python3 webhook_verify.py SECRET ID TIMESTAMP SIGNATURE < body: exit status 0 if it verifies.
    secret, id, timestamp, signature = sys.argv[1:5]
    headers = {"webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signature}
    sys.exit(0 if verify(secret, headers, sys.stdin.buffer.read()) else 1)
