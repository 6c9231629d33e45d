"""Browser tests: JupyterLab in headless Chromium (a package, so its conftest has its own module name)."""
