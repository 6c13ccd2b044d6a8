"""The reproduction report opened in a real browser (headless Chromium through Selenium):
every paper has a row, every embedded figure decodes, every link to a section resolves, a
failed and a missing run say so. ``make test-browser`` installs Chromium and runs this."""

from __future__ import annotations

import shutil

import pytest

from experiments.claims import all_papers
from experiments.report.build import write_report

from .test_report import report_fixture

pytestmark = pytest.mark.browser


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    driver_path = shutil.which("chromedriver")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if driver_path is None or chromium is None:
        pytest.fail("make test-browser installs chromium and chromium-driver (apt-get)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1200,2000"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=driver_path)
    driver = webdriver.Chrome(options=options, service=service)
    yield driver
    driver.quit()


def test_the_report_page_in_chromium(browser, tmp_path):
    folder = report_fixture(tmp_path / "runs")
    write_report(folder, tmp_path / "report")
    page = tmp_path / "report" / "index.html"
    browser.get(page.as_uri())
    rows = browser.find_elements("css selector", "#overview tbody tr")
    assert len(rows) == len(all_papers()) == 19
    images = browser.find_elements("css selector", "img")
    assert images, "the fixture's figure is embedded"
    for image in images:
        assert browser.execute_script(
            "return arguments[0].complete && arguments[0].naturalWidth > 0", image)
    links = [a.get_attribute("href") for a in browser.find_elements("css selector", "a")]
    for link in links:
        anchor = link.split("#", 1)[1]
        assert browser.find_elements("id", anchor), f"link #{anchor} has no section"
    verdict = {row.get_attribute("data-paper"): row.find_elements(
        "css selector", "td")[2].text for row in rows}
    assert verdict["rankcomp"] == "failed" and verdict["cfbeam"] == "not run"
    assert verdict["tps"] == "contradicted"
    browser.find_element("css selector", "a[href='#paper-tps']").click()
    assert browser.execute_script("return location.hash") == "#paper-tps"
    screenshot = tmp_path / "report.png"
    browser.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000
