"""The dashboard in headless Chromium: the page loads, shows a submitted job and its curve."""
from __future__ import annotations

import shutil

import pytest

from tensortune.service.client import ServiceClient

from .conftest import TOKEN

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser():
    if not (CHROMIUM and DRIVER):
        pytest.fail("the dashboard test needs Debian's chromium and chromium-driver "
                    "(make test installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def test_the_page_shows_a_job_and_its_curve(server, onnx_models, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    with ServiceClient(server.url, TOKEN) as c:
        job = c.submit(onnx_models["wide72"], trials=40)  # every task measured, then more
        c.wait(job["id"], poll_s=0.5, timeout_s=300)
    browser.get(server.url + "/")
    login = browser.find_element(By.ID, "login")
    assert login.is_displayed()  # no token yet: it asks for one
    browser.find_element(By.ID, "token").send_keys("wrong-token-0123456789")
    login.submit()
    wait = WebDriverWait(browser, 30)
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "refused"))
    browser.get("about:blank")
    browser.get(f"{server.url}/#token={TOKEN}")  # a link with the token in its fragment
    row = wait.until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, f'#jobs tr[data-id="{job["id"]}"]')))
    assert "wide72" in row.text and "done" in row.text
    assert "#token" not in browser.current_url  # the token leaves the address bar
    row.click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "detail-title"), job["id"]))
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#curve polyline.predicted")))
    points = browser.find_element(By.CSS_SELECTOR, "#curve polyline.predicted"
                                  ).get_attribute("points")
    assert len(points.split()) >= 2  # a line through the job's batches
    assert browser.find_elements(By.CSS_SELECTOR, "#curve circle.timed")  # the timed model
    device = browser.find_element(By.CSS_SELECTOR, "#devices tr.device")  # the cluster's
    assert "local" in device.text and "in service" in device.text
    tasks = browser.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")
    assert len(tasks) == len(c_tasks(server, job["id"]))


def c_tasks(server, job_id):
    with ServiceClient(server.url, TOKEN) as c:
        return c.job(job_id)["tasks"]
