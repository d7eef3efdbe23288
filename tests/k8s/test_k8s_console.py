"""The approvers' console (`toolgate console`, issue #36 part 2) on the real
API server: it runs as the chart's console ServiceAccount (rendered by real
Helm: impersonate users and groups, review tokens, list and watch Approvals
for its metadata watch), people sign in with their own Kubernetes tokens
(service accounts here), and every read and decision is made as them, so
the approver role, the webhook that pins `decidedBy` and the profile's
approvers apply unchanged. Approvals are in their tenant's namespace
(issue #46 item 1): an approver bound in one tenant's namespace sees, hears
of and decides only that tenant's; a cluster-wide reader sees all. A forged
forwarded identity is refused; an agent's `<script>` preview stays text;
a form from another site is refused; a signed-out session's cookie is
refused when replayed, a form token works only in its own session, the same
host on another port or scheme is another origin, and sign-ins are limited
per address (issue #46 item 5). A real headless Chromium signs in,
sees an approval arrive without reloading and approves it (screenshots are
kept under target/console-screenshots)."""
import http.cookiejar
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest
from k8s_env import ROOT, free_port, profile, ready, wait_for

sys.path.insert(0, str(ROOT / "scripts"))
from envtest import render_chart  # noqa: E402

RELEASE_NS = "toolgate-system"  # where the console's ServiceAccount is
PEOPLE = "console-people"
TENANT_A, TENANT_B = "console-tenant-a", "console-tenant-b"
SHOTS = pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target") / "console-screenshots"
XSS = "<script>document.title='owned'</script><img src=x onerror=\"document.title='owned'\">"


def _psql(cluster, sql):
    out = subprocess.run(["psql", cluster["database_url"], "-v", "ON_ERROR_STOP=1", "-AtXqc", sql],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _user(sa):
    return f"system:serviceaccount:{PEOPLE}:{sa}"


def _pending(kube, cluster, tenant, version, preview="make deploy"):
    """An escalated call as a sidecar records it; the controller mirrors it
    into the tenant's namespace (`tenant` names one holding the profile)."""
    approval_id = f"con-{uuid.uuid4().hex[:12]}"
    now = int(time.time() * 1000)
    preview_sql = preview.replace("'", "''")
    _psql(cluster, "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, policy_version,"
                   " decision_id, requested_by, status, created_at, expires_at, action, preview) VALUES"
                   f" ('{approval_id}', '{tenant}', 'inv-{approval_id}', 'run-7', 'bash', 'sha256:abc',"
                   f" '{version}', 'dec-{approval_id}', 'sidecar:{tenant}/agent-0', 'pending', {now},"
                   f" {now + 900_000}, 'bash', '{preview_sql}')")
    name = f"apr-{approval_id}"
    wait_for("mirrored Approval", lambda: kube.get("approval", name, "-n", tenant), 30)
    return approval_id, name


def _row(cluster, approval_id):
    return _psql(cluster, f"SELECT status, coalesce(resolved_by, '') FROM approvals WHERE id = '{approval_id}'")


def _kubeconfig(cluster, token, path):
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "console",
        "clusters": [{"name": "envtest", "cluster": {"server": cluster["server"],
                                                     "certificate-authority": cluster["ca"]}}],
        "users": [{"name": "console", "user": {"token": token}}],
        "contexts": [{"name": "console", "context": {"cluster": "envtest", "user": "console"}}],
    }))
    path.chmod(0o600)
    return path


def _start(cluster, d, name, extra):
    port = free_port()
    log = open(d / f"{name}.log", "w")
    proc = subprocess.Popen([cluster["toolgate"], "console", "--listen", f"127.0.0.1:{port}",
                             "--insecure-cookies", *extra],
                            stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, KUBECONFIG=str(d / "console.kubeconfig"), RUST_LOG="info"))
    url = f"http://127.0.0.1:{port}"
    wait_for(f"{name} /healthz", lambda: urllib.request.urlopen(url + "/healthz", timeout=2).status == 200, 30)
    return proc, url


def _tenant(kube, ns, approvers):
    """A tenant namespace holding the profile; its version once Ready."""
    kube.namespace(ns)
    kube.apply(profile("safe-coding", ns, approvals={"ttlSeconds": 900, "approvers": approvers}))
    return wait_for(f"profile Ready in {ns}", lambda: (p := kube.get("tgp", "safe-coding", "-n", ns))
                    and ready(p.get("status")) and p["status"]["version"])


@pytest.fixture(scope="module")
def console(kube, cluster, tmp_path_factory):
    d = tmp_path_factory.mktemp("console")
    # The chart's console RBAC, as real Helm renders it.
    objects = [o for o in render_chart({"console": {"enabled": True}})
               if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
               and o["metadata"]["name"].endswith("-console")]
    assert {o["kind"] for o in objects} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}, objects
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    granted = {(g, res, v) for r in role["rules"] for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    assert granted == {("", "users", "impersonate"), ("", "groups", "impersonate"),
                       ("", "serviceaccounts", "impersonate"),
                       ("toolgate.dev", "approvals", "list"), ("toolgate.dev", "approvals", "watch"),
                       ("authentication.k8s.io", "tokenreviews", "create")}, granted
    listing = d / "rbac.json"
    listing.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    kube("apply", "--server-side", "--field-manager", "helm", "-f", str(listing))
    sa = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    token = kube("create", "token", sa, "-n", RELEASE_NS, "--duration", "2h").stdout.strip()
    _kubeconfig(cluster, token, d / "console.kubeconfig")
    # The people: alice approves (the profile names her), bob may patch
    # Approvals but is no approver, victor may only look, mallory has no
    # rights at all, all three in the team's namespace only; dana approves
    # in tenant B only; erin may read Approvals cluster-wide.
    people = ("alice", "bob", "victor", "mallory", "dana", "erin")
    kube.namespace(PEOPLE)
    for person in people:
        kube("create", "serviceaccount", person, "-n", PEOPLE)
    team = kube.namespace("console-team")
    kube("-n", team, "create", "rolebinding", "console-approvers", "--clusterrole=toolgate-approver",
         f"--serviceaccount={PEOPLE}:alice", f"--serviceaccount={PEOPLE}:bob", "--user=carol@example.com")
    kube("-n", team, "create", "role", "approval-viewer", "--verb=get,list,watch",
         "--resource=approvals.toolgate.dev")
    kube("-n", team, "create", "rolebinding", "approval-viewers", "--role=approval-viewer",
         f"--serviceaccount={PEOPLE}:victor")
    version = _tenant(kube, team, [f"user:{_user('alice')}"])
    versions = {TENANT_A: _tenant(kube, TENANT_A, [f"user:{_user('alice')}"]),
                TENANT_B: _tenant(kube, TENANT_B, [f"user:{_user('dana')}"])}
    kube("-n", TENANT_B, "create", "rolebinding", "console-approvers", "--clusterrole=toolgate-approver",
         f"--serviceaccount={PEOPLE}:dana")
    kube("create", "clusterrole", "console-approval-reader", "--verb=get,list,watch",
         "--resource=approvals.toolgate.dev")
    kube("create", "clusterrolebinding", "console-approval-readers", "--clusterrole=console-approval-reader",
         f"--serviceaccount={PEOPLE}:erin")
    secret = d / "proxy-secret"
    secret.write_text("proxy-" + uuid.uuid4().hex)
    token_proc, token_url = _start(cluster, d, "console", [])
    proxy_proc, proxy_url = _start(cluster, d, "console-proxied", ["--proxy-secret-file", str(secret)])
    tokens = {p: kube("create", "token", p, "-n", PEOPLE, "--duration", "1h").stdout.strip() for p in people}
    yield {"url": token_url, "proxied": proxy_url, "secret": secret.read_text(), "tokens": tokens,
           "team": team, "version": version, "versions": versions, "dir": d}
    for proc in (token_proc, proxy_proc):
        proc.terminate()
        proc.wait(timeout=10)
    for name in ("console", "console-proxied"):
        print(f"--- {name}.log (tail) ---\n{(d / f'{name}.log').read_text(errors='replace')[-3000:]}")


class Browser:
    """A cookie-keeping HTTP client: what a browser sends, without the browser."""

    def __init__(self, base):
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def request(self, method, path, form=None, headers=None):
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Origin": self.base, **(headers or {})})
        try:
            with self.opener.open(req, timeout=30) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def sign_in(self, token):
        status, body, _ = self.request("POST", "/login", {"token": token})
        assert status == 200 and 'id="who"' in body, (status, body[-2000:])
        return body


def _csrf(body):
    return re.search(r'name="csrf" value="([0-9a-f]+)"', body).group(1)


def test_people_decide_as_themselves(console, kube, cluster):
    team = console["team"]
    approval_id, name = _pending(kube, cluster, console["team"], console["version"], preview=XSS)
    alice = Browser(console["url"])
    page = alice.sign_in(console["tokens"]["alice"])
    assert _user("alice") in page and name in page
    # The agent's preview is text: escaped, never markup.
    assert "<script>document.title" not in page and "<img src=x" not in page
    assert "&lt;script&gt;document.title=" in page
    status, _, headers = alice.request("GET", "/")
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert headers["x-content-type-options"] == "nosniff"

    # A form without the page's token, or from another site, changes nothing.
    status, body, _ = alice.request("POST", f"/approvals/{team}/{name}", {"csrf": "0" * 64, "decision": "approved"})
    assert status == 403 and "forbidden" in body, (status, body[-500:])
    for cross_site in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                       {"Sec-Fetch-Site": "same-site"}, {"Origin": "null"}):
        status, body, _ = alice.request("POST", f"/approvals/{team}/{name}", {"csrf": _csrf(page), "decision": "approved"},
                                        headers=cross_site)
        assert status == 403 and 'data-code="forbidden"' in body, (cross_site, status)
    # Nor can another site sign anyone in (login CSRF) or out.
    status, _, _ = Browser(console["url"]).request("POST", "/login", {"token": console["tokens"]["alice"]},
                                                   headers={"Sec-Fetch-Site": "cross-site"})
    assert status == 403
    assert _row(cluster, approval_id) == "pending|"

    # bob may patch Approvals but is no approver: the webhook refuses his
    # decision (issue #46 item 2), so nothing sticks and the console shows why.
    bob_id, bob_name = _pending(kube, cluster, console["team"], console["version"])
    bob = Browser(console["url"])
    bob_page = bob.sign_in(console["tokens"]["bob"])
    status, body, _ = bob.request("POST", f"/approvals/{team}/{bob_name}", {"csrf": _csrf(bob_page),
                                                                      "decision": "approved", "reason": "looks fine"})
    assert status == 403 and "approver_not_allowed" in body, (status, body[-1500:])
    obj = kube.get("approval", bob_name, "-n", console["team"])
    assert "decision" not in obj["spec"] and "decidedBy" not in obj["spec"], obj["spec"]
    assert _row(cluster, bob_id) == "pending|"
    # ... and the approver still can.
    status, body, _ = alice.request("POST", f"/approvals/{team}/{bob_name}", {"csrf": _csrf(page), "decision": "denied"})
    assert status == 200, body[-1500:]
    wait_for("row denied", lambda: _row(cluster, bob_id) == f"denied|{_user('alice')}", 30)

    # victor may look but not decide: the console tries, as him, and shows
    # the API server's refusal.
    victor = Browser(console["url"])
    victor_page = victor.sign_in(console["tokens"]["victor"])
    assert name in victor_page
    status, body, _ = victor.request("POST", f"/approvals/{team}/{name}", {"csrf": _csrf(victor_page),
                                                                      "decision": "approved"})
    assert status == 403 and 'data-code="kubernetes_refused"' in body and "forbidden" in body, body[-800:]
    assert _row(cluster, approval_id) == "pending|"

    # mallory has no rights: the API server's refusal is what she sees.
    mallory = Browser(console["url"])
    status, body, _ = mallory.request("POST", "/login", {"token": console["tokens"]["mallory"]})
    assert status == 403 and "forbidden" in body.lower() and name not in body, (status, body[-800:])
    status, body, _ = mallory.request("POST", f"/approvals/{team}/{name}", {"csrf": "x", "decision": "approved"})
    assert status == 403
    assert _row(cluster, approval_id) == "pending|"

    # alice approves through the console: recorded as her, the row resolves.
    status, body, _ = alice.request("POST", f"/approvals/{team}/{name}", {"csrf": _csrf(page), "decision": "approved",
                                                                     "reason": "reviewed the diff"})
    assert status == 200 and "Submitted: approved." in body, body[-1500:]
    obj = kube.get("approval", name, "-n", console["team"])
    assert (obj["spec"]["decidedBy"], obj["spec"]["reason"]) == (_user("alice"), "reviewed the diff")
    wait_for("row approved", lambda: _row(cluster, approval_id) == f"approved|{_user('alice')}", 30)


def test_a_forwarded_identity_needs_the_proxy(console, kube, cluster):
    # An Approval exists: someone who may list none is refused, not shown an empty list.
    _pending(kube, cluster, console["team"], console["version"])
    carol = {"X-Forwarded-User": "carol@example.com", "X-Forwarded-Groups": "oncall, sre",
             "Accept": "application/json"}
    # The token-sign-in console takes no forwarded identity at all.
    status, body, _ = Browser(console["url"]).request("GET", "/", headers=carol)
    assert status == 401 and json.loads(body)["error"]["code"] == "unauthenticated", body
    # The proxied one takes it only with the proxy's secret, sent once.
    proxied = Browser(console["proxied"])
    wrong = console["secret"][:-1] + ("0" if console["secret"][-1] != "0" else "1")  # same length
    for secret in (None, wrong):
        headers = dict(carol, **({"X-Toolgate-Proxy-Secret": secret} if secret else {}))
        status, body, _ = proxied.request("GET", "/", headers=headers)
        assert status == 401 and json.loads(body)["error"]["code"] == "unauthenticated", body
    trusted = dict(carol, **{"X-Toolgate-Proxy-Secret": console["secret"]})
    status, body, _ = proxied.request("GET", "/", headers=dict(trusted, Accept="text/html"))
    assert status == 200 and "carol@example.com" in body, body[-1000:]
    # The API server's own names are never taken from a proxy ...
    for user, groups in ((_user("alice"), "oncall"), ("carol@example.com", "system:masters")):
        status, body, _ = proxied.request("GET", "/", headers=dict(trusted, **{"X-Forwarded-User": user,
                                                                                 "X-Forwarded-Groups": groups}))
        assert status == 401 and json.loads(body)["error"]["code"] == "unauthenticated", (user, body)
    # ... and a name it vouches for is only what RBAC lets that name be.
    status, body, _ = proxied.request("GET", "/", headers=dict(trusted, **{"X-Forwarded-User": "mallory@example.com"}))
    assert status == 403 and json.loads(body)["error"]["code"] == "kubernetes_refused", body


def _card(namespace, name):
    return f'article[data-namespace="{namespace}"][data-name="{name}"]'


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


def test_a_browser_sees_approvals_arrive_and_approves_one(console, kube, cluster):
    chromium, driver_bin = _chromium(), shutil.which("chromedriver")
    if not (chromium and driver_bin):
        if os.environ.get("CI") == "true":
            pytest.fail("chromium and chromedriver are required (Debian: apt-get install chromium chromium-driver)")
        pytest.skip("no chromium/chromedriver here")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_bin), options=options)
    SHOTS.mkdir(parents=True, exist_ok=True)
    wait = WebDriverWait(driver, 30)
    try:
        driver.get(console["url"] + "/")
        assert driver.current_url.endswith("/login")
        driver.save_screenshot(str(SHOTS / "1-sign-in.png"))
        driver.find_element(By.ID, "token").send_keys(console["tokens"]["alice"])
        driver.find_element(By.ID, "sign-in").click()
        try:
            wait.until(ec.text_to_be_present_in_element((By.ID, "who"), _user("alice")))
        except Exception:
            raise AssertionError(f"{driver.current_url}: {driver.page_source[-3000:]}")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "on")
        title = driver.title

        # An escalation arrives while the page is open: it appears, no reload.
        marker = driver.execute_script("window.stillHere = 1; return window.stillHere")
        approval_id, name = _pending(kube, cluster, console["team"], console["version"], preview=XSS)
        card = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, _card(console["team"], name))))
        assert marker == driver.execute_script("return window.stillHere"), "the page was reloaded"
        # The XSS preview is shown as its text and ran nothing.
        assert card.find_element(By.CSS_SELECTOR, "pre.preview").text == XSS
        assert driver.title == title and "owned" not in driver.title
        driver.save_screenshot(str(SHOTS / "2-pending.png"))

        card.find_element(By.NAME, "reason").send_keys("checked in the browser")
        # Buttons pause for a moment after the list changes (nothing that
        # appears may take a click meant for something else).
        approve = card.find_element(By.CSS_SELECTOR, "button.approve")
        wait.until(lambda d: approve.is_enabled())
        approve.click()
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "p.notice"), "Submitted: approved."))
        driver.save_screenshot(str(SHOTS / "3-approved.png"))
        wait_for("row approved", lambda: _row(cluster, approval_id) == f"approved|{_user('alice')}", 30)
        # Decided elsewhere (kubectl), it leaves the open page by itself.
        other_id, other = _pending(kube, cluster, console["team"], console["version"])
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, _card(console["team"], other))))
        kube("patch", "approval", other, "-n", console["team"], "--type", "merge", "-p",
             json.dumps({"spec": {"decision": "denied", "decidedBy": _user("alice"),
                                  "decidedByGroups": []}}), as_user=_user("alice"))
        wait.until(ec.invisibility_of_element_located((By.CSS_SELECTOR, _card(console["team"], other))))
        driver.save_screenshot(str(SHOTS / "4-decided-elsewhere.png"))
    finally:
        driver.quit()


def _session_cookie(browser):
    return next(f"{c.name}={c.value}" for h in browser.opener.handlers
                if isinstance(h, urllib.request.HTTPCookieProcessor)
                for c in h.cookiejar if c.name == "toolgate_session")


def _replay(url, path, cookie, method="GET", form=None, origin=None):
    """A plain HTTP client sending a copied cookie (no jar, no browser)."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    headers = {"Cookie": cookie, "Accept": "application/json", **({"Origin": origin} if origin else {})}
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_sessions_forms_and_origins_are_tight(console, kube, cluster):
    """Issue #46 item 5, on a console of its own (its sign-ins are counted
    apart): a signed-out session's cookie is refused when replayed; a form
    token works only in its own session; the same host on another port or
    scheme is another origin; one sign-in too many from an address waits."""
    proc, url = _start(cluster, console["dir"], "console-sessions", [])
    team = console["team"]
    try:
        approval_id, name = _pending(kube, cluster, console["team"], console["version"])
        first, second = Browser(url), Browser(url)
        page_one = first.sign_in(console["tokens"]["alice"])
        page_two = second.sign_in(console["tokens"]["alice"])
        assert _csrf(page_one) != _csrf(page_two), "every session has its own form token"
        # A form token from alice's other session is refused in this one.
        status, body, _ = second.request("POST", f"/approvals/{team}/{name}", {"csrf": _csrf(page_one),
                                                                         "decision": "approved"})
        assert status == 403 and 'data-code="forbidden"' in body, (status, body[-500:])
        # Same host, another port or scheme: another origin.
        host, port = url.removeprefix("http://").split(":")
        for other in (f"http://{host}:{int(port) + 1}", f"https://{host}:{port}", f"http://{host}"):
            status, body, _ = second.request("POST", f"/approvals/{team}/{name}",
                                             {"csrf": _csrf(page_two), "decision": "approved"},
                                             headers={"Origin": other})
            assert status == 403 and 'data-code="forbidden"' in body, (other, status)
        assert _row(cluster, approval_id) == "pending|"

        # Signing out revokes the session on the server: a copy of the
        # cookie replayed by a plain HTTP client is refused.
        cookie = _session_cookie(first)
        assert _replay(url, "/fragment", cookie)[0] == 200
        status, body, _ = first.request("POST", "/logout")
        assert status == 200 and 'id="token"' in body, (status, body[-500:])
        for path in ("/fragment", "/", "/events"):
            status, body = _replay(url, path, cookie)
            assert status == 401 and json.loads(body)["error"]["code"] == "unauthenticated", (path, status, body)
        status, _ = _replay(url, f"/approvals/{team}/{name}", cookie, "POST",
                            {"csrf": _csrf(page_one), "decision": "approved"}, origin=url)
        assert status == 401
        assert _row(cluster, approval_id) == "pending|"
        # alice's other session is untouched, and decides as her.
        status, body, _ = second.request("POST", f"/approvals/{team}/{name}", {"csrf": _csrf(page_two),
                                                                         "decision": "denied"})
        assert status == 200 and "Submitted: denied." in body, body[-1500:]
        wait_for("row denied", lambda: _row(cluster, approval_id) == f"denied|{_user('alice')}", 30)

        # Ten sign-in attempts a minute from one address; the next waits.
        for _ in range(8):  # two made above
            status, _, _ = Browser(url).request("POST", "/login", {"token": "not-a-token"})
            assert status == 401, status
        status, body, headers = Browser(url).request("POST", "/login", {"token": console["tokens"]["alice"]})
        assert status == 429 and "too many sign-in attempts" in body, (status, body[-500:])
        assert 1 <= int(headers["retry-after"]) <= 60, headers
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class Events:
    """A live-update stream (`/events`) read off a raw socket: how many
    `change` events it has said."""

    def __init__(self, url, cookie):
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.sendall(f"GET /events HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: {cookie}\r\n"
                          "Accept: text/event-stream\r\n\r\n".encode())
        self.seen = b""

    def count(self):
        return self.seen.count(b"event: change")

    def wait(self, count, seconds):
        """Whether `count` changes in all were said within `seconds`."""
        deadline = time.monotonic() + seconds
        while self.count() < count:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(4096)
            except socket.timeout:
                return False
            if not chunk:
                return False
            self.seen += chunk
        return True

    def quiet(self, seconds=2, most=30):
        """Reads until nothing is said for `seconds` (the controller may
        still be updating what it just mirrored)."""
        deadline = time.monotonic() + most
        while self.wait(self.count() + 1, seconds):
            assert time.monotonic() < deadline, f"the stream never went quiet: {self.seen[-500:]!r}"

    def close(self):
        self.sock.close()


def test_an_approver_of_one_tenant_sees_and_hears_of_only_that_tenant(console, kube, cluster):
    """Issue #46 item 1: each approval waits in its tenant's namespace; dana,
    bound to toolgate-approver in tenant B only, sees B's and not A's (on the
    page and in the refreshed list), cannot decide A's (the API server's
    refusal), and her live updates ping for a change in B, never for one in
    A; erin, who may read Approvals cluster-wide, sees and hears of both."""
    a_id, a_name = _pending(kube, cluster, TENANT_A, console["versions"][TENANT_A], preview="deploy tenant A")
    b_id, b_name = _pending(kube, cluster, TENANT_B, console["versions"][TENANT_B], preview="deploy tenant B")
    dana, erin = Browser(console["url"]), Browser(console["url"])
    page = dana.sign_in(console["tokens"]["dana"])
    assert b_name in page and 'data-namespace="console-tenant-b"' in page, page[-3000:]
    assert a_name not in page and "deploy tenant A" not in page and TENANT_A not in page, page[-3000:]
    status, fragment, _ = dana.request("GET", "/fragment")
    assert status == 200 and b_name in fragment and a_name not in fragment and TENANT_A not in fragment
    assert f'action="/approvals/{TENANT_B}/{b_name}"' in fragment, fragment[-2000:]
    everything = erin.sign_in(console["tokens"]["erin"])
    assert a_name in everything and b_name in everything, everything[-3000:]

    # A's approval, named by dana anyway: the API server refuses her.
    status, body, _ = dana.request("POST", f"/approvals/{TENANT_A}/{a_name}", {"csrf": _csrf(page),
                                                                            "decision": "approved"})
    assert status == 403 and 'data-code="kubernetes_refused"' in body, (status, body[-800:])
    assert _row(cluster, a_id) == "pending|"
    # A path that names no namespace never reaches it.
    status, body, _ = dana.request("POST", f"/approvals/Not_A_Namespace/{b_name}",
                                   {"csrf": _csrf(page), "decision": "approved"},
                                   headers={"Accept": "application/json"})
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_name", (status, body)

    hers, all_of_them = Events(console["url"], _session_cookie(dana)), Events(console["url"], _session_cookie(erin))
    try:
        for stream in (hers, all_of_them):
            assert stream.wait(1, 15), stream.seen  # the first ping, on connecting
            assert stream.seen.startswith(b"HTTP/1.1 200"), stream.seen[:300]
            stream.quiet()
        # A change in A: erin hears of it, dana hears nothing at all.
        before = hers.count()
        kube("label", "approval", a_name, "-n", TENANT_A, "probe=a")
        assert all_of_them.wait(all_of_them.count() + 1, 15), "the change in A reached the console"
        assert not hers.wait(before + 1, 3), f"dana heard of a change in tenant A: {hers.seen[-500:]!r}"
        # A change in B: dana hears of it.
        kube("label", "approval", b_name, "-n", TENANT_B, "probe=b")
        assert hers.wait(before + 1, 15), f"no ping for the change in tenant B: {hers.seen[-500:]!r}"
    finally:
        hers.close()
        all_of_them.close()

    # And she decides B's, as herself.
    status, body, _ = dana.request("POST", f"/approvals/{TENANT_B}/{b_name}", {"csrf": _csrf(page),
                                                                            "decision": "approved"})
    assert status == 200 and "Submitted: approved." in body, body[-1500:]
    wait_for("B's row approved", lambda: _row(cluster, b_id) == f"approved|{_user('dana')}", 30)
    assert _row(cluster, a_id) == "pending|"
