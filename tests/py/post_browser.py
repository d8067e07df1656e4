"""Headless Chromium posting S3 forms to the gateway (tests/tests/post_upload.rs).

Reads a job as JSON on stdin: {"endpoint", "region", "access_key", "secret_key", "bucket",
"chromium", "profile", "file", "page_port"}. Serves pages from http://127.0.0.1:page_port
(another origin than the gateway's), drives Chromium over the DevTools protocol on a pipe
(--remote-debugging-pipe: no extra python module), and prints one JSON line per case:
  form                a page's <form> with a file input set to `file` (DOM.setFileInputFiles)
                      and submitted; the browser follows the 303: {"url": where it landed}
  expired, tampered   the same with a refused form: {"text": the document the browser shows}
  fetch               a page script POSTs a FormData (a File made in JS) with fetch():
                      {"text": "<status> <key>"} when the page may read the answer
  fetch other origin  the same page from http://localhost:page_port, an origin no CORS rule
                      allows: {"text": "ERR ..."} (the browser hides the answer)
"""

import base64
import html
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
from botocore.client import Config

STEP_SECS = 60


def presigned(job, key, fields, conditions, expires_in=600):
    client = boto3.client(
        "s3",
        endpoint_url=job["endpoint"],
        aws_access_key_id=job["access_key"],
        aws_secret_access_key=job["secret_key"],
        region_name=job["region"],
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    return client.generate_presigned_post(
        job["bucket"], key, Fields=fields, Conditions=conditions, ExpiresIn=expires_in
    )


def tamper(form):
    doc = json.loads(base64.b64decode(form["fields"]["policy"]))
    doc["conditions"].append(["starts-with", "$x-amz-meta-anything", ""])
    form["fields"]["policy"] = base64.b64encode(json.dumps(doc).encode()).decode()
    return form


def form_page(form):
    inputs = "\n".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
        for k, v in form["fields"].items()
    )
    return f"""<!doctype html><html><body>
<form action="{html.escape(form['url'])}" method="post" enctype="multipart/form-data">
{inputs}
<input type="file" name="file">
<input type="submit" name="x-ignore-submit" value="Upload">
</form></body></html>"""


def fetch_page(form):
    return f"""<!doctype html><html><body><pre id="out">waiting</pre><script>
const form = {json.dumps(form)};
const data = new FormData();
for (const [k, v] of Object.entries(form.fields)) data.append(k, v);
data.append("file", new File(["made in the page"], "fetched.txt", {{type: "text/plain"}}));
fetch(form.url, {{method: "POST", body: data}})
  .then(r => r.text().then(t => {{
     const key = new DOMParser().parseFromString(t, "application/xml")
       .getElementsByTagName("Key")[0];
     document.getElementById("out").textContent = r.status + " " + (key ? key.textContent.split("/").pop() : t);
  }}))
  .catch(e => {{ document.getElementById("out").textContent = "ERR " + e; }});
</script></body></html>"""


class Pages(BaseHTTPRequestHandler):
    pages = {}

    def do_GET(self):
        path = self.path.split("?")[0]
        body = self.pages.get(path, "<html><body>DONE</body></html>" if path == "/done" else None)
        if body is None:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class Browser:
    """Chromium with the DevTools protocol on fds 3 (commands in) and 4 (replies out)."""

    def __init__(self, binary, profile):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def wire():
            # The fds the browser expects; dup2 clears close-on-exec.
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--disable-dev-shm-usage",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire,
            close_fds=False,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.next_id = 0
        self.buffer = b""
        self.events = []

    def _read_message(self):
        while b"\0" not in self.buffer:
            chunk = os.read(self.from_browser, 65536)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_browser, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def tab(self, url):
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.call("Page.enable", session=session)
        self.call("Page.navigate", {"url": url}, session=session)
        return session

    def evaluate(self, session, expression):
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
        )
        return result.get("result", {}).get("value")

    def wait_for(self, session, expression, what):
        deadline = time.time() + STEP_SECS
        while time.time() < deadline:
            value = self.evaluate(session, expression)
            if value:
                return value
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}")

    def close(self):
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def submit_form(browser, url, path):
    session = browser.tab(url)
    browser.wait_for(session, "document.readyState === 'complete' && !!document.forms[0]", "the form page")
    root = browser.call("DOM.getDocument", session=session)["root"]["nodeId"]
    node = browser.call(
        "DOM.querySelector", {"nodeId": root, "selector": "input[type=file]"}, session=session
    )["nodeId"]
    browser.call("DOM.setFileInputFiles", {"files": [path], "nodeId": node}, session=session)
    chosen = browser.evaluate(session, "document.forms[0].file.files[0].name")
    if chosen != os.path.basename(path):
        raise RuntimeError(f"the file input holds {chosen!r}")
    browser.evaluate(session, "document.forms[0].querySelector('[type=submit]').click(); true")
    # Away from the form page: on the redirect target, or on the gateway's error document.
    browser.wait_for(
        session,
        f"location.href !== {json.dumps(url)} && document.readyState === 'complete'",
        "the form's answer",
    )
    time.sleep(0.3)
    return session


def main():
    job = json.load(sys.stdin)
    port = job["page_port"]
    origin = f"http://127.0.0.1:{port}"
    redirect = f"{origin}/done"
    good = presigned(
        job,
        "browser/${filename}",
        {"success_action_redirect": redirect, "Content-Type": "image/jpeg"},
        [
            {"success_action_redirect": redirect},
            {"Content-Type": "image/jpeg"},
            ["starts-with", "$x-ignore-submit", ""],
            ["content-length-range", 1, 10 << 20],
        ],
    )
    expired = presigned(job, "browser/expired.jpg", {}, [], expires_in=-60)
    tampered = tamper(presigned(job, "browser/tampered.jpg", {}, []))
    fetched = presigned(
        job,
        "browser/${filename}",
        {"success_action_status": "201"},
        [{"success_action_status": "201"}],
    )
    other = presigned(
        job,
        "browser/fetched-other.txt",
        {"success_action_status": "201"},
        [{"success_action_status": "201"}],
    )
    Pages.pages = {
        "/form": form_page(good),
        "/expired": form_page(expired),
        "/tampered": form_page(tampered),
        "/fetch": fetch_page(fetched),
        "/fetch-other": fetch_page(other),
    }
    server = ThreadingHTTPServer(("127.0.0.1", port), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser = Browser(job["chromium"], job["profile"])
    try:
        out = []
        s = submit_form(browser, f"{origin}/form", job["file"])
        out.append({"name": "form", "url": browser.evaluate(s, "location.href")})
        for name in ["expired", "tampered"]:
            s = submit_form(browser, f"{origin}/{name}", job["file"])
            text = browser.evaluate(s, "document.documentElement.textContent")
            out.append({"name": name, "text": text, "url": browser.evaluate(s, "location.href")})
        for name, url in [
            ("fetch", f"{origin}/fetch"),
            ("fetch other origin", f"http://localhost:{port}/fetch-other"),
        ]:
            s = browser.tab(url)
            text = browser.wait_for(
                s,
                "(() => { const o = document.getElementById('out');"
                " return o && o.textContent !== 'waiting' ? o.textContent : null; })()",
                name,
            )
            out.append({"name": name, "text": text})
        for line in out:
            print(json.dumps(line), flush=True)
    finally:
        browser.close()
        server.shutdown()


if __name__ == "__main__":
    main()
