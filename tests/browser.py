"""Headless Debian Chromium driven over the Chrome DevTools protocol, for the report tests.

Python only (aiohttp's websocket client, which tsopt already has through
``ray[default]``): no chromedriver/selenium version pairing to go stale.
Install the browser with ``bash .ci/chromium.sh``.

The page's console errors, uncaught exceptions, log errors and every network
request are recorded, so a test can assert that a report loads cleanly and
fetches nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
)


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless browser with one page; use as a context manager."""

    def __init__(self, profile_dir: Path, width: int = 1400, height: int = 1000) -> None:
        executable = chromium_path()
        if executable is None:
            raise BrowserError("chromium is not installed (bash .ci/chromium.sh installs it)")
        profile_dir.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}",
             f"--window-size={width},{height}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self._loop = asyncio.new_event_loop()
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._waiters: list[tuple[str, asyncio.Future[dict[str, Any]]]] = []
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        try:
            port = self._devtools_port(profile_dir)
            self._loop.run_until_complete(self._connect(port))
            for domain in ("Runtime", "Log", "Page", "Network"):
                self.send(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    # -- connection ---------------------------------------------------------------------
    def _devtools_port(self, profile_dir: Path) -> int:
        marker = profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if marker.is_file():
                lines = marker.read_text().splitlines()
                if lines and lines[0].isdigit():
                    return int(lines[0])
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise BrowserError(f"chromium exited with {self._proc.returncode}: {err[-2000:]}")
            time.sleep(0.05)
        raise BrowserError("chromium did not open its DevTools port within 30 s")

    async def _connect(self, port: int) -> None:
        self._http = aiohttp.ClientSession()
        async with self._http.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = await self._http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = self._loop.create_task(self._read())

    async def _read(self) -> None:
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            self._on_event(data["method"], data.get("params", {}))

    def _on_event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
            self.console_errors.append("console.error: " + " ".join(texts))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            description = details.get("exception", {}).get("description") or details.get("text")
            self.console_errors.append(f"uncaught: {description}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.console_errors.append(f"log ({entry.get('source')}): {entry.get('text')}")
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        for name, future in list(self._waiters):
            if name == method and not future.done():
                future.set_result(params)
                self._waiters.remove((name, future))

    # -- commands -----------------------------------------------------------------------
    def send(self, method: str, timeout: float = 60.0, **params: Any) -> dict[str, Any]:
        async def call() -> dict[str, Any]:
            ident = next(self._ids)
            future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
            self._pending[ident] = future
            await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
            return await asyncio.wait_for(future, timeout)

        reply = self._loop.run_until_complete(call())
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    def open(self, url: str, timeout: float = 60.0) -> float:
        """Navigate and wait for the load event; returns the wall seconds it took."""
        loaded: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._waiters.append(("Page.loadEventFired", loaded))
        started = time.perf_counter()
        self.send("Page.navigate", url=url)
        self._loop.run_until_complete(asyncio.wait_for(loaded, timeout))
        return time.perf_counter() - started

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click (press and release) at the centre of the first match."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return null; e.scrollIntoView({block: 'center', inline: 'center'});"
            " const r = e.getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()"
        )
        if box is None:
            raise BrowserError(f"no element matches {selector!r}")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"],
                      button="left", clickCount=1)

    def screenshot(self, path: Path) -> None:
        import base64

        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        async def shutdown() -> None:
            if getattr(self, "_ws", None) is not None:
                await self._ws.close()
            if getattr(self, "_reader", None) is not None:
                await asyncio.gather(self._reader, return_exceptions=True)
            if getattr(self, "_http", None) is not None:
                await self._http.close()

        try:
            self._loop.run_until_complete(shutdown())
        finally:
            self._loop.close()
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            if self._proc.stderr is not None:
                self._proc.stderr.close()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
