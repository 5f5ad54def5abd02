"""A headless Chromium driven through the Chrome DevTools protocol over a pipe.

``--remote-debugging-pipe`` makes the browser read commands from its file descriptor 3 and
write replies and events to descriptor 4, each a JSON message ended by a NUL byte: no port, no
WebSocket, no driver package. The browser is the Debian ``chromium`` package; tests skip when
it is absent.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--remote-debugging-pipe")


# Runs in the child: put the pipe ends at 3 and 4, then become the browser (same pid).
REWIRE = ("import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
          "os.execv(sys.argv[3], sys.argv[3:])")


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _high_fd(fd: int) -> int:
    """``fd`` moved above 4, so that placing the pipe ends at 3 and 4 overwrites neither."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class Browser:
    """One Chromium process with a fresh profile, and one page attached to it."""

    def __init__(self, profile: str, width: int = 1400, height: int = 1000) -> None:
        commands_in, self._commands = (_high_fd(fd) for fd in os.pipe())
        self._replies, replies_out = (_high_fd(fd) for fd in os.pipe())
        argv = [chromium_path(), *FLAGS, f"--user-data-dir={profile}",
                f"--window-size={width},{height}", "about:blank"]
        self._log = open(os.path.join(profile, "chromium.log"), "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-c", REWIRE, str(commands_in), str(replies_out), *argv],
            pass_fds=(commands_in, replies_out), stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        os.close(commands_in)
        os.close(replies_out)
        self._next_id = 0
        self._results: dict[int, dict] = {}
        self.events: list[dict] = []
        self._arrived = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=self.session)
        self.size = (width, height)
        self.send("Emulation.setDeviceMetricsOverride", session=self.session, width=width,
                  height=height, deviceScaleFactor=1, mobile=False)

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._replies, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            with self._arrived:
                for raw in messages:
                    message = json.loads(raw)
                    if "id" in message:
                        self._results[message["id"]] = message
                    else:
                        self.events.append(message)
                self._arrived.notify_all()

    def send(self, method: str, session: str | None = None, timeout: float = 30,
             **params) -> dict:
        self._next_id += 1
        ident = self._next_id
        message = {"id": ident, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        with self._arrived:
            if not self._arrived.wait_for(lambda: ident in self._results, timeout):
                raise AssertionError(f"chromium did not answer {method} in {timeout} s")
            reply = self._results.pop(ident)
        if "error" in reply:
            raise AssertionError(f"{method} failed: {reply['error']}")
        return reply["result"]

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", session=self.session, url=url)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", session=self.session, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expression!r}")
            time.sleep(0.2)

    def mouse(self, kind: str, x: float, y: float) -> None:
        """A real pointer event (``mouseMoved``, ``mousePressed``, ``mouseReleased``) at page
        coordinates."""
        params = {"type": kind, "x": x, "y": y}
        if kind != "mouseMoved":
            params.update(button="left", clickCount=1)
        self.send("Input.dispatchMouseEvent", session=self.session, **params)

    def screenshot(self, path: str) -> None:
        data = self.send("Page.captureScreenshot", session=self.session, format="png")["data"]
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (failed loads, CSP)."""
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description")))
                                       for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                errors.append(details.get("exception", {}).get("description", details["text"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                errors.append(f"{params['entry']['text']} {params['entry'].get('url', '')}")
        return errors

    def requested_urls(self) -> list[str]:
        return [event["params"]["request"]["url"] for event in self.events
                if event.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("Browser.close", timeout=10)
            except (AssertionError, OSError):
                pass
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:  # the browser's process group: its helpers too
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        os.close(self._commands)
        self._reader.join(10)
        os.close(self._replies)
        self._log.close()
