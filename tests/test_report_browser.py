"""The reproduction report opened in a real browser (headless Chromium through Selenium):
every paper has a row, every embedded figure decodes, every link to a section resolves, a
failed and a missing run say so. ``make test-browser`` installs Chromium and runs this."""

from __future__ import annotations

import shutil

import pytest

from experiments.claims.papers import papers
from experiments.report.__main__ import write_report

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
    assert len(rows) == len(list(papers())) == 19
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


def test_the_page_shows_what_it_says_and_nothing_raw(browser, tmp_path):
    """What a reader sees: reconstruction notes rendered (no raw Markdown: no table pipes,
    no literal backticks), no empty provenance line for a paper that did not run, no claim
    badge beside a paper whose badge is "not run", and the effect figure's caption and
    tick labels inside the figure (checked on the figure's own layout)."""
    folder = report_fixture(tmp_path / "runs")
    write_report(folder, tmp_path / "report")
    browser.get((tmp_path / "report" / "index.html").as_uri())
    text = browser.find_element("tag name", "body").text
    assert "|---|" not in text and "`" not in text
    assert "git ;" not in text and "config hash ;" not in text
    rows = {row.get_attribute("data-paper"): row
            for row in browser.find_elements("css selector", "#overview tbody tr")}
    assert rows["cfbeam"].find_elements("css selector", "td")[2].text == "not run"
    assert not rows["cfbeam"].find_elements("css selector", "td")[3].text
    codes = browser.find_elements("css selector", "section li code")
    assert codes, "a reconstruction note's code is rendered as code"
