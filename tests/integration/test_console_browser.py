"""The web console in a real browser (headless Debian Chromium driven by Selenium's
WebDriver) against ``sow serve`` as a user starts it: publish and watch the record count
and rate change, run a query and read its table, watch a live subscription receive a
publish and an OOF, see a dead letter appear with its reason. Screenshots go to
``test-artifacts/console/`` (``SOW_TEST_ARTIFACTS`` moves it).

Chromium and ChromeDriver come from Debian's packages, installed by
``scripts/install-browser`` the first time (the fixture runs it when they are missing).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from processor.client.sow_client import SowClient
from processor.log.broker import free_loopback_port
from tests.integration.test_cli import REPO, Server, sow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: Orders the test publishes (one `sow publish` each, as a user would).
ORDERS = 15
ARTIFACTS = Path(os.environ.get("SOW_TEST_ARTIFACTS", REPO / "test-artifacts")) / "console"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        done = subprocess.run([str(REPO / "scripts" / "install-browser")], check=False)
        assert done.returncode == 0, "scripts/install-browser could not install Chromium"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def until(what: str, check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """``check()``'s first truthy answer; fails naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # the page is being redrawn: look again
            last = exc
        if last:
            return last
        time.sleep(0.2)
    pytest.fail(f"{what}: not seen within {timeout_s}s (last: {last!r})")


def shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def cell(driver: Any, topic: str, column: str) -> str:
    from selenium.webdriver.common.by import By

    row = driver.find_element(By.CSS_SELECTOR, f'#topics tr[data-topic="{topic}"]')
    return str(row.find_element(By.CSS_SELECTOR, f"td.{column}").text)


def test_the_console_shows_publishes_queries_live_changes_and_dead_letters(
    browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    address = f"127.0.0.1:{free_loopback_port()}"
    server = Server(tmp_path, address)
    try:
        assert server.up.wait(180), server.text
        console = until("the console line", lambda: re.search(r"console:\s+(\S+)", server.text))
        url = console.group(1)
        served = json.loads((tmp_path / "state" / "serve.json").read_text())
        at = ("--server", address)

        browser.get(url)
        until("the ORDERS row", lambda: cell(browser, "ORDERS", "records"))

        # Publish: the record count and the rate change.
        def publish() -> None:
            for order in range(1, ORDERS + 1):
                body = {"orderId": order, "symbol": "MSFT", "price": 10 * order}
                sow("publish", "ORDERS", json.dumps(body), *at)

        publisher = threading.Thread(target=publish)
        publisher.start()
        try:
            until("a rate above zero", lambda: float(cell(browser, "ORDERS", "rate") or 0) > 0)
        finally:
            publisher.join()
        shot(browser, "overview-rate")
        until(
            "the record count of ORDERS", lambda: cell(browser, "ORDERS", "records") == str(ORDERS)
        )
        shot(browser, "overview-records")

        # A query: filter, order, top-n; the table lists what the SOW holds.
        browser.get(url + "#/topic/ORDERS")
        browser.find_element(By.ID, "filter").send_keys("/price > 100")
        browser.find_element(By.ID, "order-by").send_keys("/price DESC")
        browser.find_element(By.ID, "top-n").send_keys("3")
        browser.find_element(By.ID, "run-query").click()
        rows = until(
            "the query's rows",
            lambda: browser.find_elements(By.CSS_SELECTOR, "#results tbody tr"),
        )
        prices = [
            json.loads(r.find_element(By.CSS_SELECTOR, "td.data").text)["price"] for r in rows
        ]
        expected = sorted((10 * o for o in range(1, ORDERS + 1) if 10 * o > 100), reverse=True)
        assert prices == expected[:3]
        shot(browser, "topic-query")

        # A live subscription: a publish into the filter, then an update out of it (OOF).
        browser.find_element(By.ID, "live-filter").send_keys("/price > 1000")
        browser.find_element(By.ID, "subscribe").click()
        until("subscribed", lambda: browser.find_element(By.ID, "live-state").text == "subscribed")
        sow("publish", "ORDERS", '{"orderId": 900, "symbol": "IBM", "price": 5000}', *at)
        until(
            "the live publish",
            lambda: browser.find_elements(By.CSS_SELECTOR, "#live .change-publish"),
        )
        sow("publish", "ORDERS", '{"orderId": 900, "symbol": "IBM", "price": 50}', *at)
        oof = until("the OOF", lambda: browser.find_elements(By.CSS_SELECTOR, "#live .change-oof"))
        assert "OOF (match)" in oof[0].text
        assert '"price": 50' in oof[0].text
        shot(browser, "topic-live")

        # The other pages: a client's session and its subscription, the default
        # topology's queue and view.
        with SowClient(address, client_name="desk-7") as desk:
            session = desk.session()
            session.subscribe("ORDERS", "mine", filter="/symbol = 'IBM'")
            browser.get(url + "#/clients")
            until(
                "the desk's session among the clients",
                lambda: (
                    "mine on ORDERS where /symbol = 'IBM'"
                    in browser.find_element(
                        By.CSS_SELECTOR, '#clients tr[data-client="desk-7"]'
                    ).text
                ),
            )
            shot(browser, "clients")
            session.cancel()
        browser.get(url + "#/queues")
        until(
            "the WORK queue",
            lambda: browser.find_elements(By.CSS_SELECTOR, '#queues tr[data-queue="WORK"]'),
        )
        shot(browser, "queues")
        browser.get(url + "#/views")
        until(
            "the ORDERS_BY_SYMBOL view",
            lambda: browser.find_elements(
                By.CSS_SELECTOR, '#views tr[data-view="ORDERS_BY_SYMBOL"]'
            ),
        )
        shot(browser, "views")

        # A dead letter: a record no JSON decoder takes, produced straight to Kafka.
        producer = Producer({"bootstrap.servers": served["bootstrap"], "log_level": 3})
        producer.produce("ORDERS", b"{not json", b"k")
        assert producer.flush(30) == 0
        browser.get(url + "#/")
        letter = until(
            "the dead letter",
            lambda: browser.find_elements(By.CSS_SELECTOR, "#dead-letters td.reason"),
            timeout_s=60,
        )
        assert letter[0].text == "undecodable"
        until(
            "the dead-letter count",
            lambda: browser.find_element(By.ID, "tile-dead-letters").text.endswith("1"),
        )
        shot(browser, "overview-dead-letter")
    finally:
        code = server.stop()
    assert code == 0, server.text
