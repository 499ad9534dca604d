/**
 * The real Chromium the console's browser suites drive (Debian's, through playwright-core): in CI
 * a missing browser fails the run; elsewhere its suites skip, loudly.
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';

const executablePath = '/usr/bin/chromium';

/** Whether Chromium is installed here. */
export const hasChromium = existsSync(executablePath);
if (!hasChromium) {
  if (process.env.CI === 'true') throw new Error(`${executablePath} is missing: CI must install chromium`);
  console.warn(
    `\n!!! SKIPPING console browser tests: ${executablePath} is not installed (apt-get install chromium)\n`,
  );
}

/** A headless Chromium and one page on it, whose script errors are collected in `pageErrors`. */
export async function launchChromium(): Promise<{ browser: Browser; page: Page; pageErrors: string[] }> {
  const browser = await chromium.launch({
    executablePath,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('dialog', (dialog) => void dialog.accept());
  return { browser, page, pageErrors };
}

/**
 * For a suite: launches Chromium before its tests and closes it after them (`beforeAll`,
 * `afterAll`); the page and its script errors are read through the returned object once the
 * suite runs.
 */
export function useChromium(): { readonly page: Page; readonly pageErrors: string[] } {
  let launched: Awaited<ReturnType<typeof launchChromium>> | undefined;
  beforeAll(async () => {
    launched = await launchChromium();
  });
  afterAll(async () => {
    await launched?.browser.close();
  });
  const current = () => {
    if (!launched) throw new Error('Chromium is launched in beforeAll: read the page inside a test');
    return launched;
  };
  return {
    get page() {
      return current().page;
    },
    get pageErrors() {
      return current().pageErrors;
    },
  };
}
