#!/usr/bin/env python3
"""The tracker's dashboard end to end (issue 16): a real `kestrel tracker --http`, real
`kestrel-device` processes, a real `kestrel tune --tracker` session and a `kestrel profile`
that must wait for a busy key; the page loaded in headless Chromium (selenium with Debian's
chromium and chromedriver) and checked for what a person sees; /metrics parsed with
prometheus_client's text-format parser; and, with a token, the page, the API and /metrics
refused without it and served with it.

Run through tests/dashboard/run_dashboard_test.sh (ctest: "dashboard: ..."), which finds
the Python and skips when selenium, prometheus_client, chromium or chromedriver is missing.
Environment: KESTREL_BIN, KESTREL_DEVICE_BIN (the binaries under test), KESTREL_CHROMIUM,
KESTREL_CHROMEDRIVER (default /usr/bin/chromium, /usr/bin/chromedriver);
KESTREL_DASHBOARD_SCREENSHOT=PATH saves a screenshot of the page with a live session
there (docs/dashboard.png is one).
"""
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.parse

from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

KESTREL = os.environ.get("KESTREL_BIN", "kestrel")
DEVICE = os.environ.get("KESTREL_DEVICE_BIN", "kestrel-device")
CHROMIUM = os.environ.get("KESTREL_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("KESTREL_CHROMEDRIVER", "/usr/bin/chromedriver")
CSP = "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:"


# ---- processes ------------------------------------------------------------------------

def wait_for(condition, timeout=20.0, interval=0.1, what="a condition"):
    """Polls condition() until it returns something true; returns it, or fails the test."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except (OSError, WebDriverException, ValueError, KeyError) as error:
            last_error = error
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}" +
                         (f" (last error: {last_error})" if last_error else ""))


def read_text(path):
    with open(path, errors="replace") as f:
        return f.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """Child processes with their output in files under one folder; all stopped at close()."""

    def __init__(self, folder):
        self.folder = folder
        self.children = []

    def start(self, name, argv):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        log = open(os.path.join(self.folder, safe + ".log"), "wb")
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        child.log_path = log.name
        log.close()
        self.children.append(child)
        return child

    @staticmethod
    def log(child):
        return read_text(child.log_path)

    def logs(self):
        return "\n".join(f"--- {os.path.basename(c.log_path)} (exit {c.poll()}):\n{self.log(c)[-3000:]}"
                         for c in self.children)

    def close(self):
        for child in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in reversed(self.children):
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


class Tracker:
    """`kestrel tracker --http PORT` on free ports, its devices and clients."""

    def __init__(self, folder, extra=(), scheme="http"):
        self.folder = folder
        self.processes = Processes(folder)
        port_file = os.path.join(folder, "tracker.port")
        self.http_port = free_port()
        self.scheme = scheme
        self.process = self.processes.start("tracker", [
            KESTREL, "tracker", "--port", "0", "--port-file", port_file, "--http", str(self.http_port),
            "--http-interval-ms", "250", *extra])
        wait_for(lambda: self.process.poll() is not None or (os.path.exists(port_file) and read_text(port_file).strip()),
                 what="the tracker's port file")
        if self.process.poll() is not None:
            raise AssertionError("the tracker did not start:\n" + self.processes.logs())
        self.address = "127.0.0.1:" + read_text(port_file).strip()
        self.url = f"{scheme}://127.0.0.1:{self.http_port}/"
        wait_for(lambda: self.get("healthz")[0] == 200, what="the dashboard's /healthz")

    def device(self, key, name, extra=()):
        return self.processes.start(f"device-{name}", [DEVICE, "--tracker", self.address, "--key", key, "--name", name,
                                                       "--max-backoff-ms", "300", *extra])

    def connection(self):
        if self.scheme == "https":
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # the tracker's certificate is self-signed
            return http.client.HTTPSConnection("127.0.0.1", self.http_port, timeout=10, context=context)
        return http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)

    def get(self, path, headers=None):
        """(status, headers, body) of GET /path; redirects are not followed."""
        connection = self.connection()
        try:
            connection.request("GET", "/" + path, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.headers, response.read()
        finally:
            connection.close()

    def api(self, path, headers=None):
        status, _, body = self.get(path, headers)
        if status != 200:
            raise AssertionError(f"GET /{path}: HTTP {status}: {body[:300]!r}")
        return json.loads(body)

    def close(self):
        self.processes.close()


def tune(tracker, key, name, trials, extra=()):
    return tracker.processes.start(name, [
        KESTREL, "tune", "--tracker", tracker.address, "--key", key, "--op", "gemm", "--shape", "48x40x32",
        "--trials", str(trials), "--batch", "4", "--repeat", "2", "--min-repeat-ms", "2", "--final-top", "0",
        "--vendors", "none", "--reconnect-ms", "0", "--quiet", "--db", os.path.join(tracker.folder, name + ".db"),
        *extra])


def profile(tracker, key, name, priority, extra=()):
    return tracker.processes.start(name, [
        KESTREL, "profile", "--tracker", tracker.address, "--key", key, "--op", "gemm", "--shape", "48x40x32",
        "--repeat", "2", "--min-repeat-ms", "2", "--wait-ms", "60000", "--priority", str(priority), *extra])


# ---- the browser ----------------------------------------------------------------------

def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1440,1400", "--ignore-certificate-errors", "--hide-scrollbars",
                     "--force-device-scale-factor=1"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def console_errors(driver, expected=()):
    """The page's console errors (script errors, Content-Security-Policy violations, failed
    loads) since the last call, but those containing one of `expected`."""
    return [e["message"] for e in driver.get_log("browser")
            if e.get("level") == "SEVERE" and not any(x in e["message"] for x in expected)]


def query(driver, selector, attribute=None):
    """The rendered text (or `attribute`) of every element matching `selector`, read in one
    script: the page rebuilds sections on each update, so element handles do not last."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        "  .map(e => arguments[1] ? e.getAttribute(arguments[1]) : e.innerText.trim());", selector, attribute)


def click(driver, selector):
    """Clicks the first element matching `selector` as a person would; True once done."""
    driver.find_element(By.CSS_SELECTOR, selector).click()
    return True


def points(driver, key):
    """data-points of the first curve of the running session on `key`, or 0."""
    return driver.execute_script(
        "const job = [...document.querySelectorAll('article.session[data-state=running] .job')]"
        "  .find(j => j.querySelector('.job-meta').textContent.includes('key ' + arguments[0]));"
        "return job ? Number(job.querySelector('path.curve-line').dataset.points) : 0;", key)


def families(text):
    """{family name: family} of a Prometheus text exposition. The parser drops a counter's
    _total suffix from the family name (not from its samples), so both names are kept."""
    out = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = family
        if family.type == "counter":
            out[family.name + "_total"] = family
    return out


def value(family, name, **labels):
    for sample in family.samples:
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    raise AssertionError(f"no sample {name}{labels} in {family.name}: {family.samples}")


# ---- the tests ------------------------------------------------------------------------

class OpenDashboard(unittest.TestCase):
    """One tracker without a token: keys dash-a (two free devices, one of them named with
    markup, which the page must show as text) and dash-b (one device, held by a tuning
    session, a profile with --priority 7 waiting for it)."""

    MARKUP = "dash-a-<b>2</b>"

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="kestrel-dashboard-")
        cls.tracker = Tracker(cls.folder)
        try:
            t = cls.tracker
            t.device("dash-a", "dash-a-1")
            t.device("dash-a", cls.MARKUP)
            t.device("dash-b", "dash-b-1")
            wait_for(lambda: len(t.api("api/pool")["devices"]) == 3, what="three devices in /api/pool")
            cls.holder = tune(t, "dash-b", "tune", 100000)
            wait_for(lambda: any(d["state"] == "busy" for d in t.api("api/pool")["devices"] if d["key"] == "dash-b"),
                     what="the tuning session's lease on dash-b")
            cls.waiter = profile(t, "dash-b", "profile", 7)
            wait_for(lambda: any(q["key"] == "dash-b" and q["waiting"] for q in t.api("api/pool")["queues"]),
                     what="the profile's request in the queue of dash-b")
        except BaseException:
            print(cls.tracker.processes.logs())
            cls.tracker.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.tracker.close()
        shutil.rmtree(cls.folder, ignore_errors=True)

    def fail_with_logs(self, error):
        raise AssertionError(f"{error}\n{self.tracker.processes.logs()}") from error

    def test_the_page_shows_the_devices_by_key_a_queue_and_a_curve_that_grows_as_trials_land(self):
        """The dashboard in headless Chromium shows the devices under their keys, the waiting
        profile with its priority, and the tuning session's best-so-far curve gaining points
        live, without reloading; no script error and no CSP violation."""
        driver = browser()
        try:
            driver.get(self.tracker.url)
            # The devices, grouped by key, with the busy one's lease holder.
            wait_for(lambda: len(query(driver, "tr[data-device-name]")) == 3, what="three device rows")
            for key, names in {"dash-a": ["dash-a-1", self.MARKUP], "dash-b": ["dash-b-1"]}.items():
                group = f"section.key-group[data-key='{key}']"
                self.assertEqual(sorted(query(driver, group + " tr[data-device-name]", "data-device-name")), names)
                self.assertIn(key, query(driver, group + " .key-head")[0])
            wait_for(lambda: query(driver, "tr[data-device-name='dash-b-1']", "data-state") == ["busy"],
                     what="dash-b-1 shown busy")
            self.assertIn("tune", query(driver, "tr[data-device-name='dash-b-1'] .holder")[0])
            self.assertEqual(query(driver, "tr[data-device-name='dash-a-1']", "data-state"), ["free"])
            self.assertEqual(query(driver, "#sum-devices"), ["3"])
            # A name with markup is shown as text, never parsed.
            self.assertIn(self.MARKUP, query(driver, f"tr[data-device-name='{self.MARKUP}'] td.name")[0])
            self.assertEqual(query(driver, "main b"), [])

            # The queue of dash-b: the profile, with its priority.
            entry = wait_for(lambda: query(driver, ".queue[data-key='dash-b'] tr[data-priority='7']"),
                             what="the waiting profile in the queue of dash-b")
            self.assertIn("profile", entry[0])

            # The session's curve grows while the page stays loaded.
            first = wait_for(lambda: points(driver, "dash-b"), what="a curve with a point")
            driver.execute_script("window.kestrelNoReload = 1;")
            grown = wait_for(lambda: points(driver, "dash-b") >= first + 2 and points(driver, "dash-b"), timeout=30,
                             what=f"the curve to grow past {first} points")
            self.assertGreater(grown, first)
            self.assertEqual(driver.execute_script("return window.kestrelNoReload;"), 1, "the page reloaded")
            card = "article.session[data-state='running']"
            self.assertGreater(int(query(driver, card + " .job", "data-trials")[0]), 0)
            self.assertIn("/ 100000", query(driver, card + " [data-field='trials']")[0])
            self.assertNotEqual(query(driver, card + " [data-field='best']")[0], "–")

            # The same curve against time.
            wait_for(lambda: click(driver, card + " button[data-x='time']"), what="the vs-time button")
            wait_for(lambda: query(driver, card + " svg.curve", "data-x") == ["time"], what="the curve drawn against time")

            # The events: three devices joined.
            joins = wait_for(lambda: (lambda found: len(found) >= 3 and found)(query(driver, "#event-list li[data-kind='join']")),
                             what="three join events")
            self.assertTrue(any("dash-a-1" in j for j in joins), joins)
            self.assertTrue(any(self.MARKUP in j for j in joins), joins)
            self.assertEqual(query(driver, "main b"), [])
            self.assertEqual(query(driver, "#live", "data-status"), ["live"])

            shot = os.environ.get("KESTREL_DASHBOARD_SCREENSHOT")
            if shot:
                wait_for(lambda: click(driver, card + " button[data-x='trials']"), what="the vs-trials button")
                wait_for(lambda: points(driver, "dash-b") >= 12, timeout=30, what="a curve worth a screenshot")
                driver.execute_script("window.scrollTo(0, 0)")
                height = driver.execute_script("return document.documentElement.scrollHeight")
                driver.set_window_size(1440, min(max(height, 900), 1800))
                time.sleep(0.5)
                driver.save_screenshot(shot)
            self.assertEqual(console_errors(driver), [])
        except AssertionError as error:
            self.fail_with_logs(error)
        finally:
            driver.quit()

    def test_metrics_parse_as_prometheus_text_with_the_contracted_families(self):
        """GET /metrics parses with prometheus_client's text-format parser and carries the
        devices by key and state, the queue depth, the lease-wait histogram, the grants and
        the trials the session reported."""
        status, headers, body = self.tracker.get("metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers["Content-Type"])
        wait_for(lambda: value(families(self.tracker.get("metrics")[2].decode())["kestrel_trials_total"],
                               "kestrel_trials_total") > 0, what="reported trials in kestrel_trials_total")
        text = self.tracker.get("metrics")[2].decode()
        found = families(text)
        for name in ["kestrel_devices", "kestrel_queue_depth", "kestrel_lease_wait_seconds", "kestrel_grants_total",
                     "kestrel_requests_failed_total", "kestrel_trials_total", "kestrel_trials_per_second",
                     "kestrel_measurement_failures_total", "kestrel_sessions", "kestrel_connections",
                     "kestrel_connections_refused_total", "kestrel_connections_rejected_total",
                     "kestrel_uptime_seconds", "kestrel_device_losses_total", "kestrel_dashboard_snapshot_seconds"]:
            self.assertIn(name, found, f"no family {name} in /metrics:\n{text}")
            self.assertTrue(found[name].documentation, f"{name} has no HELP")
        self.assertEqual(found["kestrel_devices"].type, "gauge")
        self.assertEqual(value(found["kestrel_devices"], "kestrel_devices", key="dash-a", state="free"), 2)
        self.assertEqual(value(found["kestrel_devices"], "kestrel_devices", key="dash-b", state="busy"), 1)
        self.assertEqual(value(found["kestrel_queue_depth"], "kestrel_queue_depth", key="dash-b"), 1)
        wait = found["kestrel_lease_wait_seconds"]
        self.assertEqual(wait.type, "histogram")
        self.assertGreaterEqual(value(wait, "kestrel_lease_wait_seconds_count", key="dash-b"), 1)
        self.assertEqual(value(wait, "kestrel_lease_wait_seconds_bucket", key="dash-b", le="+Inf"),
                         value(wait, "kestrel_lease_wait_seconds_count", key="dash-b"))
        self.assertEqual(found["kestrel_grants_total"].type, "counter")
        self.assertGreaterEqual(value(found["kestrel_grants_total"], "kestrel_grants_total"), 1)
        self.assertEqual(value(found["kestrel_sessions"], "kestrel_sessions", state="running"), 1)
        self.assertGreaterEqual(value(found["kestrel_uptime_seconds"], "kestrel_uptime_seconds"), 0)

    def test_the_json_api_serves_the_documents_the_page_reads(self):
        """/api/state, /api/pool, /api/sessions and /api/events are the documents of
        docs/dashboard.md; every response carries the CSP; an unknown path is a JSON 404."""
        state = self.tracker.api("api/state")
        self.assertEqual(set(state), {"tracker", "pool", "sessions", "events"})
        self.assertEqual(state["tracker"]["devices"], 3)
        self.assertFalse(state["tracker"]["auth"])
        pool = self.tracker.api("api/pool")
        self.assertIn("tracker", pool)
        self.assertEqual(sorted(d["name"] for d in pool["devices"]), sorted(["dash-a-1", self.MARKUP, "dash-b-1"]))
        for device in pool["devices"]:
            self.assertTrue(device["caps"]["arch"], device)
            self.assertGreaterEqual(device["caps"]["cores"], 1)
        waiting = [w for q in pool["queues"] if q["key"] == "dash-b" for w in q["waiting"]]
        self.assertEqual([w["priority"] for w in waiting], [7])
        sessions = self.tracker.api("api/sessions")
        running = [s for s in sessions if s["state"] == "running"]
        self.assertEqual(len(running), 1)
        job = running[0]["jobs"][0]
        self.assertEqual((job["op"], job["key"], job["budget"]), ("gemm", "dash-b", 100000))
        events = self.tracker.api("api/events")
        self.assertTrue(any(e["kind"] == "join" and "dash-b-1" in e["text"] for e in events), events)
        for path in ["", "assets/dashboard.js", "assets/dashboard.css", "api/state", "metrics"]:
            status, headers, _ = self.tracker.get(path)
            self.assertEqual(status, 200, path)
            self.assertEqual(headers["Content-Security-Policy"], CSP, path)
            self.assertEqual(headers["X-Content-Type-Options"], "nosniff", path)
        status, headers, body = self.tracker.get("no/such/page")
        self.assertEqual(status, 404)
        self.assertIn("error", json.loads(body))


class GuardedDashboard(unittest.TestCase):
    """A tracker with a token: its dashboard is HTTPS only (a self-signed certificate)."""

    TOKEN = "dashboard-test-token-0123456789abcdef"

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="kestrel-dashboard-token-")
        token_file = os.path.join(cls.folder, "token")
        with open(token_file, "w") as f:
            f.write(cls.TOKEN + "\n")
        os.chmod(token_file, 0o600)
        cls.token_file = token_file
        cls.tracker = Tracker(cls.folder, ["--host", "127.0.0.1", "--token-file", token_file], scheme="https")
        try:
            cls.tracker.device("sec", "sec-1", ["--token-file", token_file])
            bearer = {"Authorization": "Bearer " + cls.TOKEN}
            wait_for(lambda: len(cls.tracker.api("api/pool", bearer)["devices"]) == 1, what="the device in /api/pool")
        except BaseException:
            print(cls.tracker.processes.logs())
            cls.tracker.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.tracker.close()
        shutil.rmtree(cls.folder, ignore_errors=True)

    def test_the_dashboard_refuses_a_request_without_the_token(self):
        """Without the token (or with a wrong one) the page sends the browser to /login and
        the API, the stream and /metrics answer 401 with a Bearer challenge; plain HTTP is
        not served."""
        for headers in [{}, {"Authorization": "Bearer wrong-token"}, {"Cookie": "kestrel_dashboard=00ff"}]:
            status, response, _ = self.tracker.get("", headers)
            self.assertEqual(status, 303, headers)
            self.assertEqual(urllib.parse.urlparse(response["Location"]).path, "/login")
            for path in ["api/state", "api/pool", "api/stream", "metrics"]:
                status, response, body = self.tracker.get(path, headers)
                self.assertEqual(status, 401, (path, headers))
                self.assertTrue(response["WWW-Authenticate"].startswith("Bearer"), path)
                self.assertIn("error", json.loads(body))
                self.assertNotIn(b"sec-1", body)
        self.assertEqual(self.tracker.get("healthz")[0], 200)
        # Plain HTTP to the HTTPS port gets no page.
        plain = http.client.HTTPConnection("127.0.0.1", self.tracker.http_port, timeout=10)
        try:
            plain.request("GET", "/api/state")
            self.assertNotEqual(plain.getresponse().status, 200)
        except (OSError, http.client.HTTPException):
            pass  # closed: what the contract allows
        finally:
            plain.close()

    def test_the_dashboard_accepts_the_bearer_token_and_the_login_form(self):
        """With `Authorization: Bearer <token>` the page, the API and /metrics answer; in
        Chromium, the login form takes the token and the page then shows the device."""
        bearer = {"Authorization": "Bearer " + self.TOKEN}
        for path in ["", "api/state", "metrics"]:
            self.assertEqual(self.tracker.get(path, bearer)[0], 200, path)
        state = self.tracker.api("api/state", bearer)
        self.assertTrue(state["tracker"]["auth"])
        self.assertTrue(state["tracker"]["tls"])
        families(self.tracker.get("metrics", bearer)[2].decode())

        driver = browser()
        try:
            driver.get(self.tracker.url)
            wait_for(lambda: urllib.parse.urlparse(driver.current_url).path == "/login", what="the login form")
            self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "tr[data-device-name]"), [])
            # A mark on this document tells when the answer to the wrong token has replaced it.
            # (Selenium's staleness_of can meet an error other than "stale" mid-navigation.)
            driver.execute_script("window.kestrelOldPage = true")
            driver.find_element(By.CSS_SELECTOR, "input[name='token']").send_keys("not-the-token" + Keys.ENTER)
            wait_for(lambda: driver.execute_script("return window.kestrelOldPage !== true"),
                     what="the answer to the wrong token")
            field = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "input[name='token']"),
                             what="the form again after a wrong token")[0]
            self.assertEqual(urllib.parse.urlparse(driver.current_url).path, "/login")
            self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "tr[data-device-name]"), [])
            field.send_keys(self.TOKEN + Keys.ENTER)
            wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "tr[data-device-name='sec-1']"),
                     what="the device on the page after logging in")
            self.assertEqual(urllib.parse.urlparse(driver.current_url).path, "/")
            wait_for(lambda: query(driver, "#live", "data-status") == ["live"], what="the live stream")
            self.assertEqual(query(driver, "#tracker-badges .badge"), ["TLS", "token"])
            # The wrong token's answer was a 401; nothing else went wrong (the login page
            # names an inline icon, so no /favicon.ico request fails either).
            self.assertEqual(console_errors(driver, expected=["status of 401"]), [])
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.tracker.processes.logs()}") from error
        finally:
            driver.quit()


class LocalTuneDashboard(unittest.TestCase):
    """`kestrel tune --http PORT` without --tracker: the embedded pool's page."""

    def test_a_local_tune_shows_its_embedded_pool_and_its_growing_curve(self):
        """The page of a local `kestrel tune --http` shows the embedded device under key
        local, busy, and this session's curve gaining points; /metrics parses there too."""
        folder = tempfile.mkdtemp(prefix="kestrel-dashboard-local-")
        processes = Processes(folder)
        port = free_port()
        os.environ["KESTREL_DEVICE_BIN"] = DEVICE  # the embedded pool's device
        processes.start("tune", [
            KESTREL, "tune", "--http", str(port), "--op", "gemm", "--shape", "48x40x32", "--trials", "100000",
            "--batch", "4", "--repeat", "2", "--min-repeat-ms", "2", "--final-top", "0", "--vendors", "none",
            "--quiet", "--db", os.path.join(folder, "local.db")])
        driver = None
        try:
            url = f"http://127.0.0.1:{port}/"

            def healthy():
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                try:
                    connection.request("GET", "/healthz")
                    return connection.getresponse().status == 200
                finally:
                    connection.close()
            wait_for(healthy, what="the local tune's dashboard")
            driver = browser()
            driver.get(url)
            wait_for(lambda: query(driver, "section.key-group[data-key='local'] tr[data-device-name]", "data-state") == ["busy"],
                     what="the embedded device under key local, busy")
            first = wait_for(lambda: points(driver, "local"), what="a curve with a point")
            wait_for(lambda: points(driver, "local") > first, timeout=30, what=f"the curve to grow past {first} points")
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/metrics")
            found = families(connection.getresponse().read().decode())
            connection.close()
            self.assertEqual(value(found["kestrel_devices"], "kestrel_devices", key="local", state="busy"), 1)
            self.assertEqual(console_errors(driver), [])
        except AssertionError as error:
            raise AssertionError(f"{error}\n{processes.logs()}") from error
        finally:
            if driver:
                driver.quit()
            processes.close()
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
