"""The search page of `accelkit images serve` in a browser (selenium), as a person uses it."""

from __future__ import annotations

from pathlib import Path


class Page:
    """The search page in the browser, as a person uses it."""

    def __init__(self, driver, url: str):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver, self.url, self.By = driver, url, By
        self.wait = WebDriverWait(driver, 60)

    def find(self, selector: str):
        return self.driver.find_element(self.By.CSS_SELECTOR, selector)

    def text(self, selector: str) -> str:
        return self.find(selector).text

    def names(self) -> list[str]:
        return self.driver.execute_script(
            "return Array.from(document.querySelectorAll('#results .name')).map(e => e.textContent)"
        )

    def scores(self) -> list[float]:
        return [
            float(e.text.removeprefix("score "))
            for e in self.driver.find_elements(self.By.CSS_SELECTOR, "#results .score")
        ]

    def clear_status(self) -> None:
        """Empties the status line, so that the next search's line is told from the last one's
        (two searches may well say "5 results in 12.5 ms")."""
        self.driver.execute_script("document.getElementById('status').textContent = ''")

    def search_done(self) -> str:
        """Waits until the status line names results (after `clear_status`); returns it."""
        self.wait.until(lambda d: "results" in self.text("#status"))
        return self.text("#status")

    def query(self, path: Path) -> None:
        self.clear_status()
        self.find("#query-file").send_keys(str(path))
        self.search_done()
