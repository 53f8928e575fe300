"""The page at / in a real browser (Debian's chromium through chromedriver, driven by selenium): a real uvicorn server
on a free loopback port serving splade-tiny and a small exact index, with an API key; the page asks for the key,
shows the model card, searches, and shows the same hits as POST /search, markup in documents shown as text.

Skipped when ../shared is absent; skipped when the browser is not installed, unless CI is set (then it fails:
.ci/run installs chromium and chromium-driver). ``SPLADEKIT_SCREENSHOT=docs/serving-screenshot.png`` also writes the
page's screenshot there (docs/serving.md shows it)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from itertools import islice
from pathlib import Path

import httpx
import pytest

from conftest import shared_path

pytestmark = pytest.mark.slow

BROWSER, DRIVER = "chromium", "chromedriver"
KEY = "browser-test-key"
QUERY = "immune system response to vaccines"
HOSTILE = {
    "_id": "markup",
    "text": '<img src=x onerror="document.body.dataset.pwned=1"><b>immune</b> system response to vaccines & T cells',
}


def browser_paths() -> tuple[str, str]:
    found = shutil.which(BROWSER), shutil.which(DRIVER)
    if None in found:
        missing = [name for name, path in zip((BROWSER, DRIVER), found) if path is None]
        message = f"{', '.join(missing)} not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI must run the browser test (.ci/run installs them)")
        pytest.skip(message)
    return found  # type: ignore[return-value]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A uvicorn server in a thread, on a socket bound to a free loopback port; yields its base URL."""
    import uvicorn

    from spladekit.index import build_index
    from spladekit.serve.app import create_app
    from spladekit.serve.encoding import load_served_model
    from spladekit.serve.search import SearchService
    from spladekit.serve.settings import ServeSettings

    model_dir = shared_path("models", "splade-tiny-msmarco")
    source = shared_path("data", "scifact", "corpus.jsonl")
    folder = tmp_path_factory.mktemp("browser")
    with source.open() as lines:
        records = [json.loads(line) for line in islice(lines, 150)] + [HOSTILE]
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(record) + "\n" for record in records))
    served = load_served_model(str(model_dir), device="cpu")
    texts = [f"{r.get('title', '')} {r['text']}".strip() for r in records]
    searcher = build_index(served.model.encode(texts, show_progress=False), "exact")
    searcher.doc_ids = [r["_id"] for r in records]
    searcher.save(folder / "index")
    search = SearchService.open(str(folder / "index"), str(model_dir), served.vocab_size, str(corpus))
    app = create_app(served, search, ServeSettings(api_key=KEY), model_id="splade-tiny-msmarco")

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not uv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    uv.should_exit = True
    thread.join(30)
    sock.close()
    search.close()


@pytest.fixture
def browser(tmp_path_factory):
    browser_path, driver_path = browser_paths()
    # the browser's profile and its temporary files in pytest's folders, not in the suite's $TMPDIR (checked empty)
    scratch = tmp_path_factory.mktemp("chromium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser_path
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,1000"):
        options.add_argument(argument)
    options.add_argument(f"--user-data-dir={scratch / 'profile'}")
    service = Service(executable_path=driver_path, env={**os.environ, "TMPDIR": str(scratch)})
    driver = webdriver.Chrome(service=service, options=options)
    yield driver
    driver.quit()


def test_the_page_searches_and_shows_what_search_returns(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(server + "/")
    # the shell is public; the data wants the key: the page asks for it
    wait.until(ready.visibility_of_element_located((By.ID, "api-key")))
    browser.find_element(By.ID, "api-key").send_keys(KEY)
    browser.find_element(By.ID, "key-button").click()
    wait.until(lambda driver: driver.find_element(By.ID, "model-name").text == "splade-tiny-msmarco")
    facts = browser.find_element(By.ID, "card-facts").text
    assert "30,522" in facts and "exact" in facts

    box = browser.find_element(By.ID, "query")
    box.send_keys(QUERY)
    browser.find_element(By.ID, "search-button").click()
    wait.until(lambda driver: driver.execute_script("return document.body.dataset.searched") == "1")
    hits = browser.find_elements(By.CSS_SELECTOR, "li.hit")
    shown = [(hit.get_attribute("data-id"), float(hit.find_element(By.CSS_SELECTOR, ".score").text)) for hit in hits]

    answer = httpx.post(
        server + "/search",
        json={"query": QUERY, "k": 10, "explain": True},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    ).json()
    assert [hit_id for hit_id, _ in shown] == [hit["id"] for hit in answer["hits"]]
    assert [score for _, score in shown] == [pytest.approx(hit["score"], abs=5e-4) for hit in answer["hits"]]
    assert len(shown) == 10
    # contributing terms are highlighted in the text and listed with their weights
    assert browser.find_elements(By.CSS_SELECTOR, "li.hit .text mark")
    assert browser.find_elements(By.CSS_SELECTOR, "li.hit ul.terms li")
    # a document's markup is text, not elements
    markup = browser.find_element(By.CSS_SELECTOR, 'li.hit[data-id="markup"] .text')
    assert "<img src=x" in markup.text and not markup.find_elements(By.TAG_NAME, "img")
    assert browser.execute_script("return document.body.dataset.pwned") is None

    browser.save_screenshot(str(tmp_path / "page.png"))
    wanted = os.environ.get("SPLADEKIT_SCREENSHOT")
    if wanted:
        shutil.copyfile(tmp_path / "page.png", Path(wanted))
    assert (tmp_path / "page.png").stat().st_size > 10_000


def test_the_page_without_the_key_shows_no_data(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "/")
    WebDriverWait(browser, 60).until(ready.visibility_of_element_located((By.ID, "api-key")))
    assert browser.find_element(By.ID, "model-name").text == ""
    assert "API key" in browser.find_element(By.ID, "status").text
