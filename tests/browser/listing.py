#!/usr/bin/env python3
"""Headless Chromium against `sluice serve`'s HTTP listing.

Opens the directory listing, checks that every expected file has a link
whose URL resolves to that file, clicks one link to download it into
--downloads, and saves a screenshot. Exits non-zero (with a message) on
any mismatch; the Rust test compares the downloaded file's sha256.
Driven by Selenium (pip install selenium) with Debian's chromium and
chromium-driver.
"""
import argparse
import os
import sys
import time
import urllib.parse

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
    "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1000,700",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--downloads", required=True)
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--expect", nargs="+", required=True)
    ap.add_argument("--fetch", required=True)
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()

    opts = webdriver.ChromeOptions()
    opts.binary_location = a.chromium
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument("--user-data-dir=" + a.profile)
    opts.add_experimental_option("prefs", {
        "download.default_directory": a.downloads,
        "download.prompt_for_download": False,
        "safebrowsing.enabled": False,
    })
    driver = webdriver.Chrome(service=Service(executable_path=a.driver), options=opts)
    try:
        driver.set_page_load_timeout(a.timeout)
        driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                               {"behavior": "allow", "downloadPath": a.downloads})
        driver.get(a.url)
        title = driver.title
        if "Index of /" not in title:
            fail(f"unexpected title {title!r}")
        links = {}
        for el in driver.find_elements(By.TAG_NAME, "a"):
            href = el.get_attribute("href")  # resolved against the page URL
            links[el.text.strip()] = href
        for name in a.expect:
            href = links.get(name)
            want = urllib.parse.urljoin(a.url, urllib.parse.quote(name))
            if href != want:
                fail(f"link for {name}: {href!r}, want {want!r}; links: {links}")
        driver.save_screenshot(a.screenshot)
        driver.find_element(By.LINK_TEXT, a.fetch).click()
        target = os.path.join(a.downloads, a.fetch)
        deadline = time.time() + a.timeout
        while time.time() < deadline:
            busy = [n for n in os.listdir(a.downloads) if n.endswith(".crdownload")]
            if os.path.exists(target) and not busy:
                print(f"downloaded {target} ({os.path.getsize(target)} bytes)")
                return
            time.sleep(0.1)
        fail(f"download of {a.fetch} did not finish; dir has {os.listdir(a.downloads)}")
    finally:
        driver.quit()


def fail(msg):
    print("browser test: " + msg, file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
