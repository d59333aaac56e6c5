// What every file of browser tests starts with and stops: a sidecar, a
// client of it, a browser, and the folder its screenshots go to.
import { connect, startSidecar } from './harness.js';
import { launch, screenshotDir } from './browser.js';

/**
 * Starts a sidecar (with args), connects a client and launches the browser.
 * What was started is stopped again if a later step fails.
 */
export async function openSuite({ args = [] } = {}) {
  const suite = {};
  try {
    suite.sidecar = await startSidecar({ args });
    suite.client = await connect({ socket: suite.sidecar.socket });
    suite.browser = await launch();
    suite.shots = screenshotDir();
    return suite;
  } catch (err) {
    await closeSuite(suite);
    throw err;
  }
}

/** Stops what openSuite started, in reverse order, and says where the screenshots are. */
export async function closeSuite({ sidecar, client, browser, shots }) {
  if (browser) await browser.close();
  if (client) await client.close();
  if (sidecar) await sidecar.stop();
  if (shots) console.log(`# screenshots in ${shots}`);
}
