"""The status page in a real browser: Debian's headless chromium, driven through its own
chromedriver by selenium, against the embedded stack after a Spot job was preempted and
resumed from its checkpoint.

Why selenium and chromedriver rather than ``chromium --dump-dom``: the page must work under its
own Content-Security-Policy, and only a driven browser can say so. Here the stylesheet's rules
are seen applied (computed styles), the browser's console is read for CSP violations, the
timeline's shapes are measured as laid out, and a link is followed as a person would.
Debian's ``chromium-driver`` is built from the same source as ``chromium``, so the two always
match; selenium is given both paths and never fetches a browser or a driver (``SE_OFFLINE``).

The browser is not optional: when ``/usr/bin/chromium`` is missing this test fails (``./dev
test`` installs it with apt-get). Screenshots go to ``test-output/status-page/``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.integration.helpers import wait_for
from tests.integration.test_lifecycle import (
    attempts,
    record,
    running_with_checkpoint,
    spot_request,
    state_is,
)

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
OUTPUT = Path(__file__).resolve().parents[2] / "test-output" / "status-page"
NAME = "<script>document.title='pwned'</script> spot fine-tune"
A100_CAPACITY = 16  # the stack's default capacity


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    assert not missing, (
        f"{', '.join(missing)} missing: install Debian's browser with "
        "'apt-get install chromium chromium-driver' (./dev test does)"
    )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    saved = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # selenium's manager must never download anything
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1280,1000",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        if saved is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = saved


def shoot(driver: Any, name: str) -> Path:
    """A screenshot of the whole page."""
    from selenium.webdriver.common.by import By

    OUTPUT.mkdir(parents=True, exist_ok=True)
    height = driver.find_element(By.TAG_NAME, "html").rect["height"]
    driver.set_window_size(1280, max(int(height) + 40, 600))
    path = OUTPUT / f"{name}.png"
    assert driver.save_screenshot(str(path))
    driver.set_window_size(1280, 1000)
    return path


def console_problems(driver: Any) -> list[str]:
    """What the page's console said at warning level or above (a CSP violation, a 404)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def preempted_and_resumed(stack: Any, db: Any, rid: str) -> dict[str, Any]:
    """A Spot job that waits for capacity, runs, checkpoints, runs on a little (work that will
    be lost), is preempted, waits for capacity again, resumes from its checkpoint and
    SUCCEEDED. Wall seconds are simulated minutes here (the stack's time factor is 60)."""
    body = spot_request(rid, run_seconds=1800, every=240)
    body["customJob"]["displayName"] = NAME
    scarce(stack, 0)
    stack.publish_request(body)
    wait_for(state_is(db, rid, "QUEUED", attempt=1), timeout=90, what="attempt 1 queued")
    time.sleep(3)
    scarce(stack, A100_CAPACITY)
    running_with_checkpoint(stack, db, rid, 1)
    time.sleep(2)
    scarce(stack, 0)
    stack.simulator.preempt(record(db, rid)["vertexJob"])
    stack.simulator.flush()
    wait_for(state_is(db, rid, "QUEUED", attempt=2), timeout=90, what="attempt 2 queued")
    time.sleep(4)
    scarce(stack, A100_CAPACITY)
    running_with_checkpoint(stack, db, rid, 2)
    stack.simulator.advance(4000)
    wait_for(state_is(db, rid, "SUCCEEDED"), timeout=120, what="SUCCEEDED")

    def notified() -> dict[str, Any] | None:
        # Both notifications published (RETRYING, then SUCCEEDED): the page lists them.
        current = record(db, rid)
        return current if len(current.get("notified") or []) == 2 else None

    found: dict[str, Any] = wait_for(notified, timeout=60, what="the notifications published")
    return found


def scarce(stack: Any, gpus: int) -> None:
    stack.simulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", gpus)


def test_the_job_page_shows_the_attempts_in_a_real_browser(browser, stack, db, unique):
    from selenium.webdriver.common.by import By

    rid = unique("browser-spot")
    final = preempted_and_resumed(stack, db, rid)
    docs = attempts(db, rid)

    browser.get(stack.status_page_url)
    assert browser.title == "Jobs · flexjobs status"
    # The stylesheet loaded under the CSP (style-src 'self'): its rules apply.
    header = browser.find_element(By.TAG_NAME, "header")
    assert header.value_of_css_property("background-color") == "rgba(245, 247, 250, 1)"
    link = browser.find_element(By.LINK_TEXT, rid)
    row = link.find_element(By.XPATH, "./ancestor::tr")
    assert NAME in row.text and "SUCCEEDED" in row.text  # shown as text, never run
    badge = row.find_element(By.CSS_SELECTOR, ".state")
    assert badge.value_of_css_property("border-top-style") == "solid"
    shoot(browser, "status-jobs")

    link.click()
    assert browser.current_url == f"{stack.status_page_url}jobs/{quote(rid, safe='')}"
    assert browser.title == f"{rid} · flexjobs status"  # the name's script never ran
    heading = browser.find_element(By.TAG_NAME, "h1").text
    assert NAME in heading and "SUCCEEDED" in heading

    svg = browser.find_element(By.CSS_SELECTOR, "svg.timeline")
    assert svg.is_displayed() and svg.rect["width"] > 900
    lanes = svg.find_elements(By.CSS_SELECTOR, "g.lane")
    assert [lane.get_attribute("data-attempt") for lane in lanes] == ["1", "2"]
    first, second = lanes
    for lane in lanes:
        running = lane.find_element(By.CSS_SELECTOR, "rect[data-kind='running']")
        assert running.rect["width"] > 1 and running.rect["height"] > 10
        assert lane.find_elements(By.CSS_SELECTOR, "rect[data-kind='queued']")
    assert "preempted" in first.text and "succeeded" in second.text
    assert "attempt 1" in first.text and "spot" in first.text
    # Attempt 1 waited for capacity, lost what it ran after its checkpoint, and was resumed
    # from that checkpoint.
    assert docs[1]["queuedSeconds"] > 60 and docs[2]["queuedSeconds"] > 60
    assert 0 < docs[1]["workLostSeconds"] < docs[1]["runningSeconds"]
    lost = first.find_element(By.CSS_SELECTOR, "rect[data-kind='lost']")
    assert lost.rect["width"] > 1
    assert first.find_elements(By.CSS_SELECTOR, "line[data-kind='checkpoint']")
    step = docs[2]["resumedFrom"].rstrip("/").rsplit("-", 1)[-1].lstrip("0")
    assert f"step {step}" in first.text

    table = browser.find_element(By.CSS_SELECTOR, "table.attempts")
    rows = table.find_elements(By.CSS_SELECTOR, "tbody.attempt")
    assert len(rows) == 2 and "preempted" in rows[0].text and "preempted" in docs[1]["errorMessage"]
    assert docs[2]["resumedFrom"] in rows[1].text
    notes = browser.find_element(By.CSS_SELECTOR, "table.notifications").text
    assert "RETRYING" in notes and "SUCCEEDED" in notes
    assert final["state"] == "SUCCEEDED"
    shoot(browser, "status-job")
    assert console_problems(browser) == []


def test_filters_and_errors_in_a_real_browser(browser, stack):
    from selenium.webdriver.common.by import By

    browser.get(f"{stack.status_page_url}?state=NOPE&age=<b>x</b>")
    assert browser.title == "400 Bad request · flexjobs status"
    problems = [li.text for li in browser.find_elements(By.CSS_SELECTOR, ".problems li")]
    assert [p.split(":")[0] for p in problems] == ["state", "age"]
    assert not browser.find_elements(By.CSS_SELECTOR, ".problems b")  # the value stayed text

    browser.get(stack.status_page_url)
    running = "input[name='state'][value='RUNNING']"
    # Once (in CI, on a loaded machine) this box was not found: wait for it, and say what the
    # browser showed instead if it never comes.
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, running),
        timeout=20,
        what=f"the state filter on {browser.title!r}: {browser.page_source[:1500]}",
    )
    browser.find_element(By.CSS_SELECTOR, running).click()
    browser.find_element(By.CSS_SELECTOR, "select[name='age'] option[value='24h']").click()
    browser.find_element(By.CSS_SELECTOR, "form.filters button").click()
    # The form submits to this page (CSP form-action 'self'); the click returns before that.
    filtered = f"{stack.status_page_url}?state=RUNNING&age=24h"
    wait_for(lambda: browser.current_url == filtered, timeout=20, what="the filtered page")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Jobs"
    browser.get(f"{stack.status_page_url}jobs/no-such-job")
    assert browser.title == "404 Not found · flexjobs status"
    # Only the deliberate 400 and 404 answers: nothing refused by the CSP, nothing missing.
    problems = console_problems(browser)
    assert all("404" in p or "400" in p for p in problems), problems
    assert not [p for p in problems if "Content Security Policy" in p]
