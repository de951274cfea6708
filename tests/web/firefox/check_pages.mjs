// The web console in Firefox (Debian's firefox-esr, headless) over WebDriver BiDi, driven by
// Puppeteer: the login page (a wrong password, then the real one), the overview with every
// node's live figures, an instance's page, the overview on a narrow screen. It prints what it
// saw as one JSON line; tests/web/test_console_browser.py checks it against the cluster.
//
//   node check_pages.mjs URL USER PASSWORD INSTANCE NODES SHOTS_DIR
//
// Exits 2 when Firefox cannot be driven at all (the caller skips), 1 when a page does not
// come up as expected (the message says which).
import puppeteer from "puppeteer-core";

const [url, user, password, instance, nodeCount, shots] = process.argv.slice(2);
const FIREFOX = process.env.HERDER_FIREFOX || "/usr/bin/firefox-esr";
const WAIT = 90_000; // ms: a loaded 2-core machine runs the cluster and the browser
const seen = {};

async function loggedInPage(browser, viewport) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  await page.setViewport(viewport);
  await page.goto(`${url}/ui/login`);
  await page.type("#user", user);
  await page.type("#password", password);
  await Promise.all([page.waitForNavigation(), page.click("button[type=submit]")]);
  await page.waitForFunction((who) => document.querySelector("#whoami")?.textContent.includes(who), {}, user);
  return page;
}

const nodeRows = (page) => page.$$eval("#nodes tbody tr", (rows) => rows.map((row) => ({
  name: row.dataset.node,
  mem: row.querySelector("td.mem").textContent,
  cpu: row.querySelector("td.cpu").textContent,
  display: getComputedStyle(row).display,
})));

let browser;
try {
  browser = await puppeteer.launch({ browser: "firefox", executablePath: FIREFOX, headless: true,
    acceptInsecureCerts: true, protocolTimeout: WAIT });
} catch (err) {
  console.error(`cannot drive ${FIREFOX}: ${err.message}`);
  process.exit(2);
}
try {
  seen.version = await browser.version();
  // nothing without a login; a wrong password is said so
  const login = await (await browser.createBrowserContext()).newPage();
  login.setDefaultTimeout(WAIT);
  await login.goto(`${url}/ui/`);
  seen.unauthenticated_url = login.url();
  await login.type("#user", user);
  await login.type("#password", "wrong");
  await Promise.all([login.waitForNavigation(), login.click("button[type=submit]")]);
  seen.wrong_password = await login.$eval("#message", (el) => el.textContent);

  const page = await loggedInPage(browser, { width: 1280, height: 900 });
  seen.whoami = await page.$eval("#whoami", (el) => el.textContent);
  // the overview: every node's row with its live figures
  await page.waitForFunction((count) => {
    const rows = document.querySelectorAll("#nodes tbody tr");
    return rows.length === count && [...rows].every((row) =>
      row.querySelector("td.mem").textContent.includes("iB /") && /^\d+$/.test(row.querySelector("td.cpu").textContent));
  }, {}, Number(nodeCount));
  seen.nodes = await nodeRows(page);
  await page.screenshot({ path: `${shots}/firefox-overview.png`, fullPage: true });

  // an instance's page: its state, primary node, actions
  // a click on the instance's link, as a user would (the view changes in the page)
  // (a locator: live updates redraw the table, and a click on a row just replaced would hit a
  // node no longer in the page; the locator finds the row again, as a user's second look would)
  await page.locator(`#instances tr[data-instance="${instance}"] a`).click();
  await page.waitForFunction(() => document.querySelector("#instance-pnode")?.textContent, {});
  // read in one script: the page redraws on live updates, between two reads a node may go
  seen.instance = await page.evaluate(() => ({
    status: document.querySelector("#instance-status").textContent,
    pnode: document.querySelector("#instance-pnode").textContent,
    actions: [...document.querySelectorAll("#instance-actions [data-action]")].map((el) => el.dataset.action),
    disks: document.querySelectorAll("#disks tbody tr").length,
  }));
  await page.screenshot({ path: `${shots}/firefox-instance.png`, fullPage: true });

  // a narrow screen: the same overview, its tables stacked as cards
  const narrow = await loggedInPage(browser, { width: 390, height: 800 });
  await narrow.waitForFunction((count) => document.querySelectorAll("#nodes tbody tr").length === count,
    {}, Number(nodeCount));
  seen.narrow = { nodes: await nodeRows(narrow),
    scroll_width: await narrow.evaluate(() => document.documentElement.scrollWidth) };
  await narrow.screenshot({ path: `${shots}/firefox-overview-narrow.png`, fullPage: true });
  console.log(JSON.stringify(seen));
} catch (err) {
  console.error(`${err.message} (seen so far: ${JSON.stringify(seen)})`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
