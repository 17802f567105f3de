#!/usr/bin/env python3
"""A hostd client written from docs/openapi.json alone, Python 3 standard
library only. Run: python3 hostd_client.py http://127.0.0.1:7070 [TOKEN]

It creates a topic, broadcasts to it, appends to and reads a vchannel,
acquires and releases a lease, and checks an error answer, printing one
line per step; it exits 1 on the first step that does not go as the spec
says.
"""
import json
import sys
import urllib.error
import urllib.request


class APIError(Exception):
    """A non-2xx answer: {"error": {"code", "message", "details"}}."""

    def __init__(self, status, body):
        err = body.get("error", {}) if isinstance(body, dict) else {}
        self.status = status
        self.code = err.get("code", "")
        self.message = err.get("message", "")
        self.details = err.get("details", {})
        super().__init__(f"{self.code} ({status}): {self.message}")


class Client:
    def __init__(self, base, token=None):
        self.base = base.rstrip("/")
        self.token = token

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raise APIError(e.code, json.loads(e.read() or b"{}")) from None

    # Operations, named after the spec's operationIds.
    def post_topics(self, req):
        return self.call("POST", "/v1/topics", req)[1]

    def post_broadcasts(self, req):
        return self.call("POST", "/v1/broadcasts", req)[1]

    def post_channels_messages(self, topic, queue, req):
        return self.call("POST", f"/v1/channels/{topic}/{queue}/messages", req)[1]

    def get_channels_messages(self, topic, queue, frm=0, limit=100):
        return self.call("GET", f"/v1/channels/{topic}/{queue}/messages?from={frm}&limit={limit}")[1]

    def post_locks(self, req):
        return self.call("POST", "/v1/locks", req)[1]

    def post_locks_release(self, grant_id, token):
        return self.call("POST", f"/v1/locks/{grant_id}/release", {"token": token})[1]


def tick(v):
    """Time ticks are strings of digits (above 2^53); parse them exactly."""
    if not isinstance(v, str) or not v.isdigit():
        raise AssertionError(f"time tick {v!r} is not a string of digits")
    return int(v)


def main(argv):
    c = Client(argv[1], argv[2] if len(argv) > 2 else None)
    ch = c.post_topics({"topic": "py-orders", "queues": 2})
    assert ch["kind"] == "create" and len(ch["info"]["queues"]) == 2, ch
    print("topic created: py-orders, 2 logic queues, epoch", ch["epoch"])

    res = c.post_broadcasts({"type": "noop", "payload_text": "hello from python",
                             "vchannels": ["py-orders/0", "py-orders/1"], "idempotency_key": "py-1"})
    assert res["state"] == "TOMBSTONE" and len(res["appends"]) == 3, res
    ticks = [tick(a["time_tick"]) for a in res["appends"]]
    assert all(t > 2**53 for t in ticks), ticks
    print("broadcast", res["id"], res["state"], "appends", len(res["appends"]))

    app = c.post_channels_messages("py-orders", 0, {"records": [{"payload_text": "m1"}, {"payload_text": "m2"}]})
    assert len(app["positions"]) == 2, app
    read = c.get_channels_messages("py-orders", 0)
    texts = [__import__("base64").b64decode(m["payload"]).decode() for m in read["messages"]]
    assert "m1" in texts and "m2" in texts, texts
    for m in read["messages"]:
        tick(m["time_tick"])
    print("channel py-orders/0: read", len(read["messages"]), "messages, next", read["next"])

    g = c.post_locks({"keys": [{"domain": "py", "key": "k1"}], "owner": "python", "ttl": "30s"})
    assert g["token"] and g["fence"] >= 1, g
    try:
        c.post_locks({"keys": [{"domain": "py", "key": "k1"}], "owner": "someone-else"})
        raise AssertionError("second acquire of a held key succeeded")
    except APIError as e:
        assert e.status == 409 and e.code == "locked", e
    assert c.post_locks_release(g["id"], g["token"]) == {"released": True}
    print("lease", g["id"], "fence", g["fence"], "acquired, refused to another owner (409 locked), released")

    try:
        c.post_broadcasts({"vchannels": ["py-orders/0"]})
        raise AssertionError("a broadcast without a type was accepted")
    except APIError as e:
        assert e.status == 400 and e.code == "invalid_argument" and e.details.get("field") == "type", e
    print("error case: 400 invalid_argument, field type")
    print("ok")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (AssertionError, APIError) as e:
        print("FAIL:", e, file=sys.stderr)
        sys.exit(1)
