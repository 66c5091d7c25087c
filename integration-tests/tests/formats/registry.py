#!/usr/bin/env python3
"""A small stand-in for a Confluent Schema Registry, for the tests: the REST calls that
Confluent's serialisers and Tidemark make, kept in memory.

    POST /subjects/{subject}/versions    register (the same schema keeps its id)
    POST /subjects/{subject}             look a schema up under a subject
    GET  /schemas/ids/{id}               a schema by id
    GET  /subjects                       the subjects
    GET  /subjects/{subject}/versions    a subject's versions
    GET  /subjects/{subject}/versions/{n|latest}
    GET  /stats                          (tests only) how often each path was asked for

Usage: registry.py [--user U --password P]. Listens on 127.0.0.1, a free port, and prints
`listening on PORT` on its first line. With --user, every call needs that basic auth (401
otherwise).
"""
import base64
import json
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
SCHEMAS = []  # id - 1 -> {"schema", "schemaType", "references"}
SUBJECTS = {}  # subject -> [id, ...] (version n is index n - 1)
STATS = {}
AUTH = None


def canonical(body):
    return (body.get("schema", ""), body.get("schemaType", "AVRO"),
            json.dumps(body.get("references", []), sort_keys=True))


def schema_json(sid, extra=None):
    s = SCHEMAS[sid - 1]
    out = {"schema": s["schema"]}
    if s["schemaType"] != "AVRO":
        out["schemaType"] = s["schemaType"]
    if s["references"]:
        out["references"] = s["references"]
    out.update(extra or {})
    return out


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("registry: " + (fmt % args) + "\n")

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_found(self, code, message):
        self.reply(404, {"error_code": code, "message": message})

    def authorised(self):
        if AUTH is None:
            return True
        if self.headers.get("Authorization") == AUTH:
            return True
        self.reply(401, {"error_code": 401, "message": "Unauthorized"})
        return False

    def parts(self):
        path = urllib.parse.urlsplit(self.path).path
        with LOCK:
            key = self.command + " " + path
            STATS[key] = STATS.get(key, 0) + 1
        return [urllib.parse.unquote(p) for p in path.strip("/").split("/")]

    def do_GET(self):
        parts = self.parts()
        if parts == ["stats"]:
            return self.reply(200, STATS)
        if not self.authorised():
            return
        with LOCK:
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
                sid = int(parts[2])
                if not 1 <= sid <= len(SCHEMAS):
                    return self.not_found(40403, "Schema %d not found" % sid)
                return self.reply(200, schema_json(sid))
            if parts == ["subjects"]:
                return self.reply(200, sorted(SUBJECTS))
            if len(parts) >= 3 and parts[0] == "subjects" and parts[2] == "versions":
                subject = parts[1]
                if subject not in SUBJECTS:
                    return self.not_found(40401, "Subject '%s' not found." % subject)
                ids = SUBJECTS[subject]
                if len(parts) == 3:
                    return self.reply(200, list(range(1, len(ids) + 1)))
                v = len(ids) if parts[3] == "latest" else int(parts[3])
                if not 1 <= v <= len(ids):
                    return self.not_found(40402, "Version %s not found." % parts[3])
                return self.reply(200, schema_json(ids[v - 1], {
                    "subject": subject, "version": v, "id": ids[v - 1]}))
        self.not_found(404, "no such path")

    def do_POST(self):
        parts = self.parts()
        if not self.authorised():
            return
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        key = canonical(body)
        with LOCK:
            known = [i + 1 for i, s in enumerate(SCHEMAS) if canonical(s) == key]
            if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                subject = parts[1]
                if known:
                    sid = known[0]
                else:
                    SCHEMAS.append({"schema": body["schema"],
                                    "schemaType": body.get("schemaType", "AVRO"),
                                    "references": body.get("references", [])})
                    sid = len(SCHEMAS)
                ids = SUBJECTS.setdefault(subject, [])
                if sid not in ids:
                    ids.append(sid)
                return self.reply(200, {"id": sid})
            if len(parts) == 2 and parts[0] == "subjects":
                subject = parts[1]
                if subject not in SUBJECTS:
                    return self.not_found(40401, "Subject '%s' not found." % subject)
                for v, sid in enumerate(SUBJECTS[subject], 1):
                    if known and sid == known[0]:
                        return self.reply(200, schema_json(sid, {
                            "subject": subject, "version": v, "id": sid}))
                return self.not_found(40403, "Schema not found")
        self.not_found(404, "no such path")


def main():
    global AUTH
    args = sys.argv[1:]
    if "--user" in args:
        user = args[args.index("--user") + 1]
        password = args[args.index("--password") + 1]
        AUTH = "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening on %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
